// CPU kernels of the engine. Weights stay in their stored dtype; quantized blocks are
// dequantized inside the dot products, a block at a time, never into a full fp32 copy.
//
// Instruction sets: a scalar implementation (kernels.cpp), an AVX2+FMA+F16C one
// (kernels_avx2.cpp) and an AVX-512 F/BW/VL one (kernels_avx512.cpp), each compiled with
// its flags only; the best the CPU has is chosen once at run time. NUNCHAKU_ISA=scalar|
// avx2|avx512 in the environment asks for one (the best available at or below it is used).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "format/dtype.hpp"
#include "memory/cpu_kernel_buffers.hpp"

namespace nunchaku::engine {

// A weight matrix as stored: `rows` output features of `cols` inputs each, row-major,
// rows `row_bytes` apart (a row of a quantized type is a whole number of blocks).
// Non-owning: `data` points into a WeightStore (host memory or a file mapping).
struct WeightMatrix {
  const uint8_t* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  size_t row_bytes = 0;
  std::string name;
  // gpt-oss's experts (Backend::moe only, through matmul_expert_rows): `input_major`: stored
  // [cols][rows] (x @ W, bf16/fp32 files), row_bytes apart per input; dtype MXFP4: as the HF
  // files hold it, 16 code bytes per 32 values at `data` (row_bytes = cols / 2) and one E8M0
  // scale byte per 32 values at `scales` (cols / 32 per row); or, `scales` null, ggml's
  // blocks as GGUF holds them (17 bytes per 32 values: the scale, then 16 code bytes).
  bool input_major = false;
  const uint8_t* scales = nullptr;
  int64_t stored_rows() const { return input_major ? cols : rows; }  // rows of storage (row_bytes each)
};

// Dtypes the matmul kernels read directly.
bool matmul_supports(DType t);

enum class Isa { Scalar, Avx2, Avx512 };  // ordered: each needs what the one before needs
constexpr Isa kAllIsas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512};
Isa active_isa();
std::string_view isa_name(Isa isa);  // "scalar", "avx2", "avx512"
bool isa_available(Isa isa);         // built in and supported by this CPU
// For tests: switch implementations (the best available at or below `isa`; returns what
// is active).
Isa set_isa(Isa isa);

// y[b*ldy + r] = sum_i W[r][i] * x[b*ldx + i] for r in [r0, r1), b in [0, B).
// Each weight row is read once for all B activation rows (the point of batching).
// From this many activation rows on, matmul_rows runs as a cache-blocked GEMM (same sums
// in the same order, so results do not depend on which path a batch takes).
constexpr int64_t kMatmulGemmBatch = kCpuGemmMinRows;  // defined with the accounting (engine_memory())
void matmul_rows(const WeightMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy,
                 int64_t r0, int64_t r1);

// matmul_rows for any expert matrix: input-major ones (F32, F16, BF16) sum x[i] * W[i][r]
// over i in order; split-scale MXFP4 ones dequantize each 32-value block exactly (a code's
// FP4 value times 2^(scale - 127), as transformers' convert_moe_packed_tensors) and sum like
// F32; the rest are matmul_rows. AVX2 and AVX-512 kernels with the active ISA, the same bits
// as the scalar ones (kernels_experts_impl.hpp: the sums' order; NUNCHAKU_EXPERT_KERNELS=
// scalar keeps the scalar ones, for benchmarks).
void matmul_expert_rows(const WeightMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy,
                        int64_t r0, int64_t r1);
bool expert_matrix_supports(DType t, bool input_major, bool split_scales);
// FP4 (e2m1) code -> value: codes 0-7 are +0, 0.5, 1, 1.5, 2, 3, 4, 6; 8-15 their negatives.
float fp4_e2m1_value(uint8_t code);
// E8M0 scale byte -> 2^(s - 127) (255: NaN).
float e8m0_value(uint8_t s);

// out[0..cols) = row r of W as fp32 (embedding lookup, tests).
void dequant_row(const WeightMatrix& w, int64_t r, float* out);

// Attention over cache rows: n rows of d values (f32, or IEEE half when `half`), rows
// `stride` elements apart. One call per (query head, token), so q and the running sums
// stay in registers across positions.
// scores: out[p] = scale * (q . row_p)
void attn_scores(const float* q, const void* rows, bool half, int64_t stride, int64_t n, int64_t d, float scale,
                 float* out);
// mix: out[0..d) = sum_p w[p] * row_p (out is overwritten)
void attn_mix(const float* w, const void* rows, bool half, int64_t stride, int64_t n, int64_t d, float* out);
void store_f16(const float* x, uint16_t* y, int64_t n);
// Starts reading [p, p + bytes) into L2 and returns: weights a matmul reads soon after,
// fetched while other work (attention) leaves DRAM idle.
void prefetch_l2(const void* p, size_t bytes);

// Row-wise ops (small next to the matmuls; scalar, the compiler vectorizes them).
void rmsnorm(const float* x, const float* weight, float eps, int64_t n, float* out);  // weight null: all 1
// out = (x - mean) / sqrt(var + eps) * weight (+ bias when given); mean and variance in double.
void layernorm(const float* x, const float* weight, const float* bias, float eps, int64_t n, float* out);
void softmax_inplace(float* x, int64_t n);
// softmax over x[0..n) and one more logit `sink` that takes part in the denominator only.
void softmax_with_sink(float* x, int64_t n, float sink);
void silu_mul(float* gate, const float* up, int64_t n);       // gate = silu(gate) * up
void gelu_tanh_mul(float* gate, const float* up, int64_t n);  // gate = gelu_tanh(gate) * up
void softcap_inplace(float* x, int64_t n, float cap);         // x = cap * tanh(x / cap)

}  // namespace nunchaku::engine
