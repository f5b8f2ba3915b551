// The expert matmuls of gpt-oss checkpoints that matmul_rows does not read: experts stored
// input-major (x @ W, as transformers holds and saves GptOssExperts in bf16/fp32) and MXFP4,
// with its E8M0 scales in a tensor of their own (the HF *_blocks / *_scales pair) or in
// ggml's blocks (GGUF). The scalar kernels here define the sums (kernels_experts_impl.hpp
// states the contract); the AVX2 and AVX-512 ones (kernels_experts_simd.hpp) give the same
// bits, chosen with the other kernels' ISA (active_isa()).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/log.hpp"
#include "engine/kernels.hpp"
#include "engine/kernels_experts_impl.hpp"
#include "engine/quant_blocks.hpp"

namespace nunchaku::engine {
namespace {

constexpr int64_t kCols = kInputMajorCols;  // output features per pass (a stack tile)

// out[0..n) = values [c0, c0 + n) of a stored row as fp32.
void widen_run(const uint8_t* p, DType t, int64_t c0, int64_t n, float* out) {
  switch (t) {
    case DType::F16:
      for (int64_t c = 0; c < n; ++c) out[c] = blocks::half_to_float(blocks::load_u16(p + 2 * (c0 + c)));
      break;
    case DType::BF16: {  // the 16 bits above 16 zeros: exact, vectorizable
      uint16_t h[kCols];
      std::memcpy(h, p + 2 * c0, size_t(n) * 2);
      for (int64_t c = 0; c < n; ++c) {
        const uint32_t bits = uint32_t(h[c]) << 16;
        std::memcpy(out + c, &bits, 4);
      }
      break;
    }
    default: std::memcpy(out, p + 4 * c0, size_t(n) * 4);
  }
}

// y[b][r] = sum_i x[b][i] * W[i][r], r in [r0, r1), i ascending (a tile of kCols outputs
// at a time: the row segment widened once, then every x row's contribution added).
void scalar_input_major_rows(const WeightMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy,
                      int64_t r0, int64_t r1) {
  alignas(64) float wv[kCols];
  for (int64_t c0 = r0; c0 < r1; c0 += kCols) {
    const int64_t n = std::min(kCols, r1 - c0);
    for (int64_t b = 0; b < B; ++b) std::memset(y + b * ldy + c0, 0, size_t(n) * 4);
    for (int64_t i = 0; i < w.cols; ++i) {
      widen_run(w.data + size_t(i) * w.row_bytes, w.dtype, c0, n, wv);
      for (int64_t b = 0; b < B; ++b) {
        const float xi = x[b * ldx + i];
        float* out = y + b * ldy + c0;
        for (int64_t c = 0; c < n; ++c) out[c] += xi * wv[c];
      }
    }
  }
}

// One 32-value MXFP4 block into v[0..32): HF's split form (codes: value 2j in the low nibble
// of byte j, 2j + 1 in the high one; the E8M0 scale apart) or ggml's (`scale` null: the
// scale byte first, then value j in the low nibble of byte j and j + 16 in the high one).
void mxfp4_block(const uint8_t* q, const uint8_t* scale, float* v) {
  const bool ggml = scale == nullptr;
  const float d = e8m0_value(ggml ? q[0] : *scale);
  if (ggml) ++q;
  float tab[16];  // the block's 16 possible values (each one exact product)
  for (int c = 0; c < 16; ++c) tab[c] = fp4_e2m1_value(uint8_t(c)) * d;
  for (int j = 0; j < 16; ++j) {
    v[ggml ? j : 2 * j] = tab[q[j] & 15];
    v[ggml ? j + 16 : 2 * j + 1] = tab[q[j] >> 4];
  }
}

// MXFP4 rows, dequantized kRun values (whole 32-value blocks) at a time into a stack buffer,
// then dotted with every x row over 8 partial sums (summed in a fixed order).
constexpr int64_t kRun = kMxfp4Run;
void scalar_mxfp4_rows(const WeightMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy, int64_t r0,
                int64_t r1) {
  const int64_t nb = w.cols / 32;
  alignas(64) float v[kRun];
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* codes = w.data + size_t(r) * w.row_bytes;
    const uint8_t* sc = w.scales ? w.scales + size_t(r) * size_t(nb) : nullptr;
    const size_t block_bytes = sc ? 16 : 17;
    for (int64_t b = 0; b < B; ++b) y[b * ldy + r] = 0.0f;
    for (int64_t c0 = 0; c0 < w.cols; c0 += kRun) {
      const int64_t n = std::min(kRun, w.cols - c0);
      for (int64_t k = 0; k < n / 32; ++k) {
        const int64_t blk = c0 / 32 + k;
        mxfp4_block(codes + size_t(blk) * block_bytes, sc ? sc + blk : nullptr, v + k * 32);
      }
      for (int64_t b = 0; b < B; ++b) {
        const float* xb = x + b * ldx + c0;
        float lane[8] = {};
        for (int64_t j = 0; j < n; j += 8)
          for (int l = 0; l < 8; ++l) lane[l] += xb[j + l] * v[j + l];
        y[b * ldy + r] += ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
      }
    }
  }
}

// NUNCHAKU_EXPERT_KERNELS=scalar: the scalar expert kernels whatever the ISA (benchmarks:
// scripts/bench_experts.sh takes its before/after pairs with it).
bool g_experts_scalar = [] {
  const char* e = std::getenv("NUNCHAKU_EXPERT_KERNELS");
  if (!e || !*e) return false;
  if (std::string_view(e) == "scalar") return true;
  log::warn("NUNCHAKU_EXPERT_KERNELS={} is not scalar; ignored", e);
  return false;
}();

const ExpertKernelSet kScalarExpertKernels = {scalar_input_major_rows, scalar_mxfp4_rows};

const ExpertKernelSet& expert_kernels() {
  switch (expert_kernels_isa()) {
    case Isa::Avx512: return kAvx512ExpertKernels;
    case Isa::Avx2: return kAvx2ExpertKernels;
    default: return kScalarExpertKernels;
  }
}

}  // namespace

float fp4_e2m1_value(uint8_t code) {
  static constexpr float kValues[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                        -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  return kValues[code & 15];
}

float e8m0_value(uint8_t s) { return s == 255 ? std::nanf("") : std::ldexp(1.0f, int(s) - 127); }

Isa expert_kernels_isa() {
  const Isa isa = g_experts_scalar ? Isa::Scalar : active_isa();
  if (isa == Isa::Avx512 && kAvx512ExpertKernels.mxfp4_rows) return isa;
  if (isa >= Isa::Avx2 && kAvx2ExpertKernels.mxfp4_rows) return Isa::Avx2;
  return Isa::Scalar;
}

bool expert_matrix_supports(DType t, bool input_major, bool split_scales) {
  if (split_scales || t == DType::MXFP4) return t == DType::MXFP4 && !input_major;
  if (input_major) return t == DType::F32 || t == DType::F16 || t == DType::BF16;
  return matmul_supports(t);
}

void matmul_expert_rows(const WeightMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy,
                        int64_t r0, int64_t r1) {
  if (w.input_major) expert_kernels().input_major_rows(w, x, ldx, B, y, ldy, r0, r1);
  else if (w.dtype == DType::MXFP4) expert_kernels().mxfp4_rows(w, x, ldx, B, y, ldy, r0, r1);
  else matmul_rows(w, x, ldx, B, y, ldy, r0, r1);
}

}  // namespace nunchaku::engine
