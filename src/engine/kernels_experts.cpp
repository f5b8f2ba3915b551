// The expert matmuls of gpt-oss checkpoints that matmul_rows does not read: experts stored
// input-major (x @ W, as transformers holds and saves GptOssExperts in bf16/fp32) and MXFP4
// with its E8M0 scales in a tensor of their own (the HF *_blocks / *_scales pair).
#include <cmath>
#include <cstring>

#include "engine/kernels.hpp"
#include "engine/quant_blocks.hpp"

namespace nunchaku::engine {
namespace {

constexpr int64_t kCols = 64;  // output features per pass of an input-major matrix (a stack tile)

// out[0..n) = values [c0, c0 + n) of a stored row as fp32.
void widen_run(const uint8_t* p, DType t, int64_t c0, int64_t n, float* out) {
  switch (t) {
    case DType::F16:
      for (int64_t c = 0; c < n; ++c) out[c] = blocks::half_to_float(blocks::load_u16(p + 2 * (c0 + c)));
      break;
    case DType::BF16:
      for (int64_t c = 0; c < n; ++c) out[c] = blocks::bf16_to_float(blocks::load_u16(p + 2 * (c0 + c)));
      break;
    default: std::memcpy(out, p + 4 * c0, size_t(n) * 4);
  }
}

// y[b][r] = sum_i x[b][i] * W[i][r], r in [r0, r1), i ascending (as one dot product each).
void input_major_rows(const WeightMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy,
                      int64_t r0, int64_t r1) {
  float wv[kCols];
  for (int64_t c0 = r0; c0 < r1; c0 += kCols) {
    const int64_t n = std::min(kCols, r1 - c0);
    for (int64_t b = 0; b < B; ++b) std::memset(y + b * ldy + c0, 0, size_t(n) * 4);
    for (int64_t i = 0; i < w.cols; ++i) {
      const uint8_t* row = w.data + size_t(i) * w.row_bytes;
      widen_run(row, w.dtype, c0, n, wv);
      for (int64_t b = 0; b < B; ++b) {
        const float xi = x[b * ldx + i];
        float* out = y + b * ldy + c0;
        for (int64_t c = 0; c < n; ++c) out[c] = std::fma(xi, wv[c], out[c]);
      }
    }
  }
}

// MXFP4 rows, each dequantized a block at a time (32 values), then dotted with every x row.
void mxfp4_rows(const WeightMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy, int64_t r0,
                int64_t r1) {
  const int64_t nb = w.cols / 32;
  float v[32];
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* codes = w.data + size_t(r) * w.row_bytes;
    const uint8_t* sc = w.scales + size_t(r) * size_t(nb);
    for (int64_t b = 0; b < B; ++b) y[b * ldy + r] = 0.0f;
    for (int64_t k = 0; k < nb; ++k) {
      const float d = e8m0_value(sc[k]);
      for (int j = 0; j < 16; ++j) {
        const uint8_t q = codes[k * 16 + j];
        v[2 * j] = fp4_e2m1_value(q & 15) * d;
        v[2 * j + 1] = fp4_e2m1_value(uint8_t(q >> 4)) * d;
      }
      for (int64_t b = 0; b < B; ++b) {
        const float* xb = x + b * ldx + k * 32;
        float acc = 0.0f;
        for (int j = 0; j < 32; ++j) acc = std::fma(xb[j], v[j], acc);
        y[b * ldy + r] += acc;
      }
    }
  }
}

}  // namespace

float fp4_e2m1_value(uint8_t code) {
  static constexpr float kValues[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                        -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  return kValues[code & 15];
}

float e8m0_value(uint8_t s) { return s == 255 ? std::nanf("") : std::ldexp(1.0f, int(s) - 127); }

bool expert_matrix_supports(DType t, bool input_major, bool split_scales) {
  if (split_scales) return t == DType::MXFP4 && !input_major;
  if (input_major) return t == DType::F32 || t == DType::F16 || t == DType::BF16;
  return matmul_supports(t);
}

void matmul_expert_rows(const WeightMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy,
                        int64_t r0, int64_t r1) {
  if (w.input_major) input_major_rows(w, x, ldx, B, y, ldy, r0, r1);
  else if (w.dtype == DType::MXFP4) mxfp4_rows(w, x, ldx, B, y, ldy, r0, r1);
  else matmul_rows(w, x, ldx, B, y, ldy, r0, r1);
}

}  // namespace nunchaku::engine
