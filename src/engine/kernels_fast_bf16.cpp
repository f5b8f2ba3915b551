// Fast math for BF16 weights: the activation rounding and the scalar twin of vdpbf16ps's
// arithmetic (kernels_fast_bf16.hpp; kernels.cpp checks the CPU and dispatches).
#include "engine/kernels_fast_bf16.hpp"

#include <cmath>
#include <cstring>


namespace nunchaku::engine {
namespace {

float bf16_value(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
float flush(float f) { return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.0f, f) : f; }  // daz / ftz

float dot_scalar(const uint16_t* w, const uint16_t* x, int64_t cols) {
  float acc[16] = {};
  for (int64_t j = 0; j < cols; j += 32)
    for (int l = 0; l < 16; ++l) {
      const int64_t c = j + 2 * l;
      acc[l] = flush(std::fma(flush(bf16_value(w[c + 1])), flush(bf16_value(x[c + 1])), flush(acc[l])));
      acc[l] = flush(std::fma(flush(bf16_value(w[c])), flush(bf16_value(x[c])), acc[l]));
    }
  float s8[8], s4[4];
  for (int i = 0; i < 8; ++i) s8[i] = acc[i] + acc[i + 8];
  for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

}  // namespace

void round_bf16_row(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &x[i], 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) out[i] = uint16_t((u >> 16) | 0x40);  // NaN: quiet, sign kept
    else out[i] = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
}

void scalar_matmul_rows_bf16x(const WeightMatrix& w, const uint16_t* x, int64_t ldx, int64_t B, float* y, int64_t ldy,
                              int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const auto* row = reinterpret_cast<const uint16_t*>(w.data + size_t(r) * w.row_bytes);
    for (int64_t b = 0; b < B; ++b) y[b * ldy + r] = dot_scalar(row, x + b * ldx, w.cols);
  }
}

}  // namespace nunchaku::engine
