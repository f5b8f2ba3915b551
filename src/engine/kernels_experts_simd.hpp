// The SIMD expert kernels (kernels_experts_impl.hpp: the contract they share with the scalar
// ones), written once and included by each ISA's file (kernels_experts_avx2.cpp,
// kernels_experts_avx512.cpp) inside its anonymous namespace, after it has defined:
//   V, kW (floats per V), vzero, vloadu, vstoreu, vset1, vadd, vmul; widen_bf16(p) and
//   widen_f16(p): kW stored values from p as a V; kMxDecodeRows (MXFP4 weight rows per tile
//   at batch 1), kMxRows x kMxBatch (weight rows x activation rows per tile at batch 2+).
// Input-major matrices run in V (output features across the lanes); MXFP4 in 256-bit
// vectors on both ISAs, since its sums are 8 lanes wide (wider lanes would change them).
// No std templates here (see kernels_avx2.cpp).
// Internal: only kernels_experts_<isa>.cpp include this.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "engine/kernels_experts_impl.hpp"
#include "engine/quant_blocks.hpp"

namespace nunchaku::engine {
namespace {

// ---- input-major: y[b][c0 .. c0 + n) over all inputs i ---------------------------------
// Rows of storage are inputs; the tile's n output features are contiguous in each. The
// accumulators live in y (an L1 tile of n floats per activation row): per input, one
// multiply and one add per output, in input order.
struct InF32 {
  static constexpr int kBytes = 4;
  static V load(const uint8_t* p) { return vloadu(reinterpret_cast<const float*>(p)); }
  static float one(const uint8_t* p) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
};
struct InBF16 {
  static constexpr int kBytes = 2;
  static V load(const uint8_t* p) { return widen_bf16(p); }
  static float one(const uint8_t* p) { return blocks::bf16_to_float(blocks::load_u16(p)); }
};
struct InF16 {
  static constexpr int kBytes = 2;
  static V load(const uint8_t* p) { return widen_f16(p); }
  static float one(const uint8_t* p) { return blocks::half_to_float(blocks::load_u16(p)); }
};

// out[0..n) += xi * w[0..n): whole vectors, then the scalar tail (-ffp-contract=off: the
// tail rounds the product and the sum apart, as the lanes do).
template <class L>
inline void add_scaled_row(float* out, float xi, const uint8_t* w, int64_t n) {
  const V xv = vset1(xi);
  int64_t c = 0;
  for (; c + kW <= n; c += kW) vstoreu(out + c, vadd(vloadu(out + c), vmul(xv, L::load(w + c * L::kBytes))));
  for (; c < n; ++c) out[c] += xi * L::one(w + c * L::kBytes);
}

// Inputs this many rows on are prefetched (the next rows of a pass: a stride of a whole
// matrix row, which the hardware prefetchers follow poorly).
constexpr int64_t kInputAhead = 8;

template <class L>
void input_major_tile(const WeightMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy, int64_t c0,
                      int64_t n) {
  for (int64_t b = 0; b < B; ++b) std::memset(y + b * ldy + c0, 0, size_t(n) * 4);
  alignas(64) float wv[kInputMajorCols];  // the row segment widened once for B > 1 (16-bit types)
  const size_t seg = size_t(n) * L::kBytes;
  for (int64_t i = 0; i < w.cols; ++i) {
    const uint8_t* row = w.data + size_t(i) * w.row_bytes + size_t(c0) * L::kBytes;
    if (i + kInputAhead < w.cols)
      for (size_t o = 0; o < seg; o += 64) _mm_prefetch(reinterpret_cast<const char*>(row + kInputAhead * w.row_bytes + o), _MM_HINT_T0);
    if (L::kBytes == 4 || B == 1) {
      for (int64_t b = 0; b < B; ++b) add_scaled_row<L>(y + b * ldy + c0, x[b * ldx + i], row, n);
      continue;
    }
    int64_t c = 0;
    for (; c + kW <= n; c += kW) vstoreu(wv + c, L::load(row + c * L::kBytes));
    for (; c < n; ++c) wv[c] = L::one(row + c * L::kBytes);
    for (int64_t b = 0; b < B; ++b)
      add_scaled_row<InF32>(y + b * ldy + c0, x[b * ldx + i], reinterpret_cast<const uint8_t*>(wv), n);
  }
}

template <class L>
void input_major_range(const WeightMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy, int64_t r0,
                       int64_t r1) {
  for (int64_t c0 = r0; c0 < r1; c0 += kInputMajorCols)
    input_major_tile<L>(w, x, ldx, B, y, ldy, c0, r1 - c0 < kInputMajorCols ? r1 - c0 : kInputMajorCols);
}

void simd_input_major_rows(const WeightMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy,
                           int64_t r0, int64_t r1) {
  switch (w.dtype) {
    case DType::BF16: return input_major_range<InBF16>(w, x, ldx, B, y, ldy, r0, r1);
    case DType::F16: return input_major_range<InF16>(w, x, ldx, B, y, ldy, r0, r1);
    default: return input_major_range<InF32>(w, x, ldx, B, y, ldy, r0, r1);
  }
}

// ---- MXFP4 ---------------------------------------------------------------------------
// 2^(s - 128), half the block's scale (NaN for 255), from its bits: the codes' values are
// looked up doubled, as integers (0, 1, 2, 3, 4, 6, 8, 12 and negatives), so value * scale
// = doubled * (scale / 2), both products exact (at most 4 significant bits; 2^-128 and
// 2^-127 are subnormal, still exact).
inline float mxfp4_half_scale(uint8_t s) {
  const uint32_t bits = s == 255 ? 0x7fc00000u : s >= 2 ? uint32_t(s - 1) << 23 : 0x00200000u << s;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// One 32-value block into out[0..32) (kernels_experts.cpp's mxfp4_block: HF's order when
// `split`, value 2j in the low nibble of byte j and 2j + 1 in the high one; ggml's
// otherwise, value j low and j + 16 high). Negative zero comes out as +0 (see the contract).
inline void mxfp4_block_simd(const uint8_t* q, float half_scale, bool split, float* out) {
  const __m128i tab = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  const __m128i m4 = _mm_set1_epi8(15);
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  const __m128i lo = _mm_shuffle_epi8(tab, _mm_and_si128(b, m4));
  const __m128i hi = _mm_shuffle_epi8(tab, _mm_and_si128(_mm_srli_epi16(b, 4), m4));
  const __m128i v0 = split ? _mm_unpacklo_epi8(lo, hi) : lo, v1 = split ? _mm_unpackhi_epi8(lo, hi) : hi;
  const __m256 d = _mm256_set1_ps(half_scale);
  _mm256_storeu_ps(out, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v0))));
  _mm256_storeu_ps(out + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(v0, v0)))));
  _mm256_storeu_ps(out + 16, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v1))));
  _mm256_storeu_ps(out + 24, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(v1, v1)))));
}

// ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), the scalar kernel's order.
inline float mxfp4_lane_sum(__m256 v) {
  const __m256 h = _mm256_hadd_ps(v, v);       // l0+l1, l2+l3, . . | l4+l5, l6+l7, . .
  const __m256 h2 = _mm256_hadd_ps(h, h);      // (l0+l1)+(l2+l3) ... | (l4+l5)+(l6+l7) ...
  return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(h2), _mm256_extractf128_ps(h2, 1)));
}

// y[b*ldy + r] += the run's sum, for R dequantized rows (v: kMxfp4Run floats apart) and NB
// activation rows (x at the run's first column): R*NB chains of 8 lanes.
template <int R, int NB>
inline void mxfp4_run_tile(const float* v, int64_t n, const float* x, int64_t ldx, float* y, int64_t ldy) {
  __m256 acc[R][NB];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) acc[r][b] = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; j += 8) {
    __m256 xv[NB];
#pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) xv[b] = _mm256_loadu_ps(x + b * ldx + j);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m256 wv = _mm256_load_ps(v + r * kMxfp4Run + j);
#pragma GCC unroll 16
      for (int b = 0; b < NB; ++b) acc[r][b] = _mm256_add_ps(acc[r][b], _mm256_mul_ps(wv, xv[b]));
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) y[b * ldy + r] += mxfp4_lane_sum(acc[r][b]);
}

// The activation rows in groups of NB, the last group smaller (NB down to 1).
template <int R, int NB>
inline void mxfp4_run_batch(const float* v, int64_t n, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy) {
  int64_t b = 0;
  for (; b + NB <= B; b += NB) mxfp4_run_tile<R, NB>(v, n, x + b * ldx, ldx, y + b * ldy, ldy);
  if constexpr (NB > 1)
    if (b < B) mxfp4_run_batch<R, NB - 1>(v, n, x + b * ldx, ldx, B - b, y + b * ldy, ldy);
}

// R weight rows from `r`: each run of kMxfp4Run values dequantized once into v, then used for
// every activation row.
template <int R, int NB>
void mxfp4_rows_group(const WeightMatrix& w, int64_t r, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy) {
  alignas(32) float v[R * kMxfp4Run];
  const int64_t nb = w.cols / 32;
  const bool split = w.scales != nullptr;
  const size_t block_bytes = split ? 16 : 17;
  for (int64_t b = 0; b < B; ++b)
    for (int k = 0; k < R; ++k) y[b * ldy + r + k] = 0.0f;
  for (int64_t c0 = 0; c0 < w.cols; c0 += kMxfp4Run) {
    const int64_t n = w.cols - c0 < kMxfp4Run ? w.cols - c0 : kMxfp4Run;
#pragma GCC unroll 16
    for (int k = 0; k < R; ++k) {
      const uint8_t* codes = w.data + size_t(r + k) * w.row_bytes;
      const uint8_t* sc = split ? w.scales + size_t(r + k) * size_t(nb) : nullptr;
      for (int64_t blk = c0 / 32; blk < (c0 + n) / 32; ++blk) {
        const uint8_t* q = codes + size_t(blk) * block_bytes;
        float* out = v + k * kMxfp4Run + (blk * 32 - c0);
        if (split) mxfp4_block_simd(q, mxfp4_half_scale(sc[blk]), true, out);
        else mxfp4_block_simd(q + 1, mxfp4_half_scale(q[0]), false, out);
      }
    }
    mxfp4_run_batch<R, NB>(v, n, x + c0, ldx, B, y + r, ldy);
  }
}

void simd_mxfp4_rows(const WeightMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy, int64_t r0,
                     int64_t r1) {
  int64_t r = r0;
  if (B == 1)
    for (; r + kMxDecodeRows <= r1; r += kMxDecodeRows) mxfp4_rows_group<kMxDecodeRows, 1>(w, r, x, ldx, B, y, ldy);
  else
    for (; r + kMxRows <= r1; r += kMxRows) mxfp4_rows_group<kMxRows, kMxBatch>(w, r, x, ldx, B, y, ldy);
  for (; r < r1; ++r) mxfp4_rows_group<1, kMxBatch>(w, r, x, ldx, B, y, ldy);
}

}  // namespace
}  // namespace nunchaku::engine
