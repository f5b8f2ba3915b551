// Fast math (opt-in: `run --fast-math`, EngineOptions::fast_math): matmuls over K-quant
// weights with the activations rounded to 8 bits, llama.cpp's arithmetic for them. Each
// activation row is quantized once per matmul into Q8_K blocks (ggml's quantize_row_q8_K:
// per 256 values a float scale d = max / -127 of the value of largest magnitude, codes
// round(x / d) clamped to 127); a weight row then meets it in exact integer dot products
// per sub-block (unsigned weight codes times signed 8-bit codes, times the sub-block's
// integer scale), and only the per-block scales are floats. The default path (kernels.hpp)
// is exact fp32 over the dequantized weights; this one trades that for ~2x fewer cycles
// per weight (docs/engine.md, "Fast math", has the measured accuracy cost).
//
// The arithmetic, identical on every ISA (scalar, AVX2 and AVX-512 give the same bits) and
// every batch size: per (weight row, activation row) 8 float lanes acc[l], zero; per block
// k, with q the weight block's unsigned codes, q8 / dx / bs / bs16 the activation block's
// codes, scale and sums of 32 and of 16 codes (all integer sums exact in int32):
//   Q4_K, Q5_K (d, dmin f16; 8 sub-blocks j of 32 with 6-bit scale sc[j] and min m[j]):
//     iv[l] = sum_j sc[j] * sum_{i<4} q[32j + 4l + i] * q8[32j + 4l + i]
//     mv[l] = m[2l] * bs[2l] + m[2l+1] * bs[2l+1] for l < 4, else 0
//     acc[l] = fma(dx * d, float(iv[l]), acc[l]);  acc[l] = fma(-(dx * dmin), float(mv[l]), acc[l])
//   Q6_K (d f16; 16 sub-blocks of 16 with int8 scales sc[], values q - 32):
//     iv[l] = sum_{g<8} sc[2g + l/4] * sum_{i<4} q[32g + 4l + i] * q8[32g + 4l + i]
//             - 32 * (sc[2l] * bs16[2l] + sc[2l+1] * bs16[2l+1])
//     acc[l] = fma(dx * d, float(iv[l]), acc[l])
// and the result is (acc[l] + acc[l+4]) summed as ((0 + 2) + (1 + 3)).
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/kernels.hpp"
#include "memory/cpu_kernel_buffers.hpp"

namespace nunchaku::engine {

// Which fast-math path a weight takes: Q8K (Q4_K, Q5_K, Q6_K rows of whole 256-value
// blocks: this header), BF16 (BF16 rows of whole 32-value steps where the CPU has
// AVX512_BF16 and the AVX-512 kernels are active: kernels_fast_bf16.hpp), or None (the
// exact path).
enum class FastPath { None, Q8K, BF16 };
FastPath fast_math_path(DType t, int64_t cols);

// One activation row of `cols` values (a multiple of 256) as Q8_K, in cpu_q8k_row_bytes(cols)
// bytes at a 64-byte boundary: codes [cols] int8, then d [cols/256] float, then bs [cols/32]
// and bs16 [cols/16] int16 (the sums of each 32 and each 16 codes).
struct Q8KRow {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const int16_t* bs = nullptr;
  const int16_t* bs16 = nullptr;
};
inline Q8KRow q8k_row(const uint8_t* base, int64_t cols) {
  const uint8_t* bs = base + cols + cols / 256 * 4;
  return {reinterpret_cast<const int8_t*>(base), reinterpret_cast<const float*>(base + cols),
          reinterpret_cast<const int16_t*>(bs), reinterpret_cast<const int16_t*>(bs + cols / 16)};
}
void quantize_q8k(const float* x, int64_t cols, uint8_t* out);

// y[b*ldy + r] = W[r] . xq[b] for r in [r0, r1), b in [0, B), activation rows ldxq bytes
// apart (cpu_q8k_row_bytes(w.cols)); fast_math_path(w.dtype, w.cols) must be Q8K.
// On AVX-512 it uses the AVX512-VNNI build of the kernels where the CPU has VNNI (the same
// bits); set_fast_math_vnni(false) turns that off (tests, benchmarks; returns the setting).
void matmul_rows_q8k(const WeightMatrix& w, const uint8_t* xq, size_t ldxq, int64_t B, float* y, int64_t ldy,
                     int64_t r0, int64_t r1);
bool fast_math_vnni_available();
bool set_fast_math_vnni(bool on);

}  // namespace nunchaku::engine
