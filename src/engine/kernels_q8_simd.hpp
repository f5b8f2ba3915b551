// Fast math's SIMD kernel (kernels_q8.hpp): Q4_K weights x Q8_K activations in 256-bit
// integer code, included by kernels_avx2.cpp and kernels_avx512.cpp after kernels_simd.hpp
// (whose TilePrefetch, block_prefetch and by_groups it uses), inside their anonymous
// namespace, once they have defined kQ8DecodeRows (weight rows per decode tile) and
// kQ8BatchRows x kQ8BatchTile (weight rows x activation rows per small-batch and prefill
// tile). The same instructions on both ISAs (AVX-512 gives the compiler 32 registers), so
// both give the bits of the scalar kernel (kernels_q8.cpp), at any batch size.
// Internal: only kernels_<isa>.cpp include this.
#pragma once

#include "engine/kernels_q8.hpp"

namespace nunchaku::engine {
namespace {

// R weight rows x NB activation rows. Per 32-code sub-block j and activation row:
// vpmaddubsw pairs codes (4-bit, unsigned) with activation codes (signed) into int16
// (at most 2 * 15 * 127), vpmaddwd multiplies those by the 6-bit scale and adds pairs
// into int32 lane l = values 4l..4l+3 of the sub-block; the 8 sub-blocks' lanes add up in
// int32 (at most 8 * 63 * 4 * 15 * 127 < 2^22: exact in float too).
template <int R, int NB, bool Prefetch>
inline void q4k_q8k_tile(const uint8_t* row0, size_t row_bytes, int64_t nblocks, const uint8_t* xq, size_t ldxq,
                         int64_t cols, float* y, int64_t ldy) {
  Q8KRow x[NB];
  #pragma GCC unroll 16
  for (int b = 0; b < NB; ++b) x[b] = q8k_row(xq + size_t(b) * ldxq, cols);
  __m256 acc[R][NB];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) acc[r][b] = _mm256_setzero_ps();
  TilePrefetch pf = block_prefetch<BlockQ4_K, R>(row0, row_bytes, nblocks);
  const __m256i m15 = _mm256_set1_epi8(15);
  for (int64_t k = 0; k < nblocks; ++k) {
    if constexpr (Prefetch) pf.next();
    const uint8_t* blk[R];
    __m256i scl[R];  // the 8 scales as int16, in both 128-bit halves
    __m128i mins[R];
    float d[R], dmin[R];
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      blk[r] = row0 + size_t(r) * row_bytes + size_t(k) * 144;
      __m128i sc8, mn8;
      k_scale_bytes(blk[r], sc8, mn8);
      scl[r] = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc8));
      mins[r] = _mm_cvtepu8_epi16(mn8);
      const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(int(blocks::load_u32(blk[r]))));
      d[r] = _mm_cvtss_f32(dm);
      dmin[r] = _mm_cvtss_f32(_mm_movehdup_ps(dm));
    }
    __m256i iv[R][NB];
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
      #pragma GCC unroll 16
      for (int b = 0; b < NB; ++b) iv[r][b] = _mm256_setzero_si256();
    #pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {  // sub-blocks 2p (low nibbles) and 2p+1 (high) of 32 code bytes
      const __m256i ctl_lo = _mm256_set1_epi16(short(((4 * p + 1) << 8) | (4 * p)));
      const __m256i ctl_hi = _mm256_set1_epi16(short(((4 * p + 3) << 8) | (4 * p + 2)));
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[r] + 16 + 32 * p));
        const __m256i lo = _mm256_and_si256(c, m15), hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), m15);
        const __m256i slo = _mm256_shuffle_epi8(scl[r], ctl_lo), shi = _mm256_shuffle_epi8(scl[r], ctl_hi);
        #pragma GCC unroll 16
        for (int b = 0; b < NB; ++b) {
          const int8_t* q = x[b].q + k * 256 + 64 * p;
          const __m256i xl = _mm256_load_si256(reinterpret_cast<const __m256i*>(q));
          const __m256i xh = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 32));
          const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo, xl), slo),
                                             _mm256_madd_epi16(_mm256_maddubs_epi16(hi, xh), shi));
          iv[r][b] = _mm256_add_epi32(iv[r][b], s);
        }
      }
    }
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
      #pragma GCC unroll 16
      for (int b = 0; b < NB; ++b) {
        const float dx = x[b].d[k];
        const __m128i bs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].bs + 8 * k));
        const __m256 mv = _mm256_cvtepi32_ps(_mm256_zextsi128_si256(_mm_madd_epi16(mins[r], bs)));
        acc[r][b] = _mm256_fmadd_ps(_mm256_set1_ps(dx * d[r]), _mm256_cvtepi32_ps(iv[r][b]), acc[r][b]);
        acc[r][b] = _mm256_fnmadd_ps(_mm256_set1_ps(dx * dmin[r]), mv, acc[r][b]);
      }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) y[b * ldy + r] = hsum8(acc[r][b]);
}

// Decode: kQ8DecodeRows rows per tile, prefetching the stream ahead (as blockq_rows).
// Batches: kQ8BatchRows rows against every activation row, kQ8BatchTile at a time (the
// rows stay in L1; the first group prefetches the rows ahead, the others find them).
void simd_matmul_rows_q8k(const WeightMatrix& w, const uint8_t* xq, size_t ldxq, int64_t B, float* y, int64_t ldy,
                          int64_t r0, int64_t r1) {
  const int64_t nblocks = w.cols / 256, n = w.cols;
  const size_t rb = w.row_bytes;
  int64_t r = r0;
  if (B == 1) {
    for (; r + kQ8DecodeRows <= r1; r += kQ8DecodeRows)
      q4k_q8k_tile<kQ8DecodeRows, 1, true>(w.data + size_t(r) * rb, rb, nblocks, xq, ldxq, n, y + r, ldy);
    for (; r < r1; ++r) q4k_q8k_tile<1, 1, false>(w.data + size_t(r) * rb, rb, nblocks, xq, ldxq, n, y + r, ldy);
    return;
  }
  for (; r + kQ8BatchRows <= r1; r += kQ8BatchRows)
    by_groups<kQ8BatchTile>(B, [&](auto nb, int64_t b) {
      const uint8_t* rows = w.data + size_t(r) * rb;
      const uint8_t* xb = xq + size_t(b) * ldxq;
      if (b == 0) q4k_q8k_tile<kQ8BatchRows, decltype(nb)::value, true>(rows, rb, nblocks, xb, ldxq, n, y + r, ldy);
      else q4k_q8k_tile<kQ8BatchRows, decltype(nb)::value, false>(rows, rb, nblocks, xb, ldxq, n, y + b * ldy + r, ldy);
    });
  for (; r < r1; ++r)
    by_groups<kQ8BatchTile>(B, [&](auto nb, int64_t b) {
      q4k_q8k_tile<1, decltype(nb)::value, false>(w.data + size_t(r) * rb, rb, nblocks, xq + size_t(b) * ldxq, ldxq, n,
                                                  y + b * ldy + r, ldy);
    });
}

}  // namespace
}  // namespace nunchaku::engine
