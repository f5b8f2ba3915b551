// Fast math: the Q8_K activation quantizer (one for every ISA) and the scalar Q4_K, Q5_K and
// Q6_K x Q8_K kernels that spell out the arithmetic of kernels_q8.hpp lane by lane (the
// SIMD ones are kernels_q8_simd.hpp; kernels.cpp dispatches).
#include "engine/kernels_q8.hpp"

#include <cmath>
#include <cstring>

#include "engine/kernels_fast_bf16.hpp"
#include "engine/kernels_impl.hpp"
#include "engine/quant_blocks.hpp"

namespace nunchaku::engine {

FastPath fast_math_path(DType t, int64_t cols) {
  if ((t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K) && cols % 256 == 0) return FastPath::Q8K;
  if (t == DType::BF16 && cols % 32 == 0 && fast_bf16_available()) return FastPath::BF16;
  return FastPath::None;
}

void quantize_q8k(const float* x, int64_t cols, uint8_t* out) {
  const Q8KRow row = q8k_row(out, cols);  // the layout, written here
  auto* q = const_cast<int8_t*>(row.q);
  auto* d = const_cast<float*>(row.d);
  auto* bs = const_cast<int16_t*>(row.bs);
  auto* bs16 = const_cast<int16_t*>(row.bs16);
  for (int64_t k = 0; k < cols / 256; ++k) {
    const float* xb = x + k * 256;
    int8_t* qb = q + k * 256;
    float amax = 0, max = 0;  // the value of largest magnitude (the first, on ties)
    for (int i = 0; i < 256; ++i)
      if (std::fabs(xb[i]) > amax) amax = std::fabs(xb[i]), max = xb[i];
    if (amax == 0) {
      d[k] = 0;
      std::memset(qb, 0, 256);
      for (int j = 0; j < 8; ++j) bs[8 * k + j] = 0;
      for (int j = 0; j < 16; ++j) bs16[16 * k + j] = 0;
      continue;
    }
    const float iscale = -127.f / max;
    for (int i = 0; i < 256; ++i) {
      const float v = iscale * xb[i];  // in [-127, 127] up to rounding; NaN from a NaN or inf input
      const int c = v == v ? int(std::nearbyint(v)) : 0;  // nearest, ties to even (ggml's nearest_int)
      qb[i] = int8_t(c > 127 ? 127 : c < -128 ? -128 : c);
    }
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += qb[16 * j + i];
      bs16[16 * k + j] = int16_t(s);
    }
    for (int j = 0; j < 8; ++j) bs[8 * k + j] = int16_t(bs16[16 * k + 2 * j] + bs16[16 * k + 2 * j + 1]);
    d[k] = 1 / iscale;
  }
}

namespace {

// The unsigned code of value v (0..255) of a block, and its sub-block's integer scale.
int code_q4k(const uint8_t* blk, int v) {
  const uint8_t c = blk[16 + 32 * (v / 64) + v % 32];  // sub-blocks 2p, 2p+1: low, high nibbles
  return (v / 32) % 2 ? c >> 4 : c & 15;
}
int code_q5k(const uint8_t* blk, int v) {
  const uint8_t c = blk[48 + 32 * (v / 64) + v % 32];
  return ((v / 32) % 2 ? c >> 4 : c & 15) | ((blk[16 + v % 32] >> (v / 32)) & 1) << 4;
}
int code_q6k(const uint8_t* blk, int v) {  // 0..63; the value is code - 32
  const int h = v / 128, g = (v % 128) / 32, l = v % 32;
  const uint8_t lo = blk[64 * h + 32 * (g & 1) + l], hi = blk[128 + 32 * h + l];
  return (g < 2 ? lo & 15 : lo >> 4) | ((hi >> (2 * g)) & 3) << 4;
}

template <DType T>
float dot_scalar(const uint8_t* row, int64_t nblocks, const Q8KRow& x) {
  constexpr int64_t kBytes = T == DType::Q4_K ? 144 : T == DType::Q5_K ? 176 : 210;
  float acc[8] = {};
  for (int64_t k = 0; k < nblocks; ++k) {
    const uint8_t* blk = row + k * kBytes;
    const int8_t* q8 = x.q + k * 256;
    int32_t iv[8] = {}, mv[8] = {};
    if constexpr (T == DType::Q6_K) {
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
      for (int v = 0; v < 256; ++v) iv[(v % 32) / 4] += sc[2 * (v / 32) + (v % 32) / 16] * code_q6k(blk, v) * q8[v];
      for (int l = 0; l < 8; ++l) iv[l] -= 32 * (sc[2 * l] * x.bs16[16 * k + 2 * l] + sc[2 * l + 1] * x.bs16[16 * k + 2 * l + 1]);
      const float dd = x.d[k] * blocks::half_to_float(blocks::load_u16(blk + 208));
      for (int l = 0; l < 8; ++l) acc[l] = std::fma(dd, float(iv[l]), acc[l]);
    } else {
      int sc[8], m[8];
      for (int j = 0; j < 8; ++j) blocks::q4k_scale_min(j, blk + 4, sc[j], m[j]);
      for (int v = 0; v < 256; ++v)
        iv[(v % 32) / 4] += sc[v / 32] * (T == DType::Q4_K ? code_q4k(blk, v) : code_q5k(blk, v)) * q8[v];
      for (int l = 0; l < 4; ++l) mv[l] = m[2 * l] * x.bs[8 * k + 2 * l] + m[2 * l + 1] * x.bs[8 * k + 2 * l + 1];
      const float dd = x.d[k] * blocks::half_to_float(blocks::load_u16(blk));
      const float dm = x.d[k] * blocks::half_to_float(blocks::load_u16(blk + 2));
      for (int l = 0; l < 8; ++l) {
        acc[l] = std::fma(dd, float(iv[l]), acc[l]);
        acc[l] = std::fma(-dm, float(mv[l]), acc[l]);
      }
    }
  }
  float t[4];
  for (int l = 0; l < 4; ++l) t[l] = acc[l] + acc[l + 4];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

template <DType T>
void rows_scalar(const WeightMatrix& w, const uint8_t* xq, size_t ldxq, int64_t B, float* y, int64_t ldy, int64_t r0,
                 int64_t r1) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t b = 0; b < B; ++b)
      y[b * ldy + r] = dot_scalar<T>(w.data + size_t(r) * w.row_bytes, w.cols / 256, q8k_row(xq + size_t(b) * ldxq, w.cols));
}

}  // namespace

void scalar_matmul_rows_q8k(const WeightMatrix& w, const uint8_t* xq, size_t ldxq, int64_t B, float* y, int64_t ldy,
                            int64_t r0, int64_t r1) {
  switch (w.dtype) {
    case DType::Q4_K: return rows_scalar<DType::Q4_K>(w, xq, ldxq, B, y, ldy, r0, r1);
    case DType::Q5_K: return rows_scalar<DType::Q5_K>(w, xq, ldxq, B, y, ldy, r0, r1);
    case DType::Q6_K: return rows_scalar<DType::Q6_K>(w, xq, ldxq, B, y, ldy, r0, r1);
    default: break;
  }
}

}  // namespace nunchaku::engine
