// Fast math's SIMD kernels (kernels_q8.hpp): Q4_K, Q5_K and Q6_K weights x Q8_K activations
// in 256-bit integer code, included by kernels_avx2.cpp, kernels_avx512.cpp and
// kernels_q8_avx512vnni.cpp (its definitions are in an anonymous namespace, one copy per
// ISA file). The same instructions on every ISA
// (AVX-512 gives the compiler 32 registers; with AVX512-VNNI, vpdpwssd does vpmaddwd's
// multiply and the add in one), all integer until the per-block float steps, so every
// ISA gives the bits of the scalar kernel (kernels_q8.cpp), at any batch size.
// Internal: only kernels_<isa>.cpp include this.
#pragma once

#include <immintrin.h>

#include "engine/kernels_kscales.hpp"
#include "engine/kernels_q8.hpp"
#include "engine/kernels_stream.hpp"

namespace nunchaku::engine {
namespace {

// The weight types (kernels_q8.hpp): codes(blk, p, lo, hi) gives the unsigned codes of the
// 32-value groups 2p and 2p+1, one byte per value.
struct FastQ4K {
  static constexpr int64_t kBytes = 144;
  static constexpr bool kMins = true;
  static void codes(const uint8_t* blk, int p, __m256i& lo, __m256i& hi) {
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * p)), m15 = _mm256_set1_epi8(15);
    lo = _mm256_and_si256(c, m15);
    hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), m15);
  }
};
struct FastQ5K {  // as Q4_K, with bit j of qh[l] (the 32 bytes at 16) the 5th bit of value l of group j
  static constexpr int64_t kBytes = 176;
  static constexpr bool kMins = true;
  static void codes(const uint8_t* blk, int p, __m256i& lo, __m256i& hi) {
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 48 + 32 * p)), m15 = _mm256_set1_epi8(15);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16)), one = _mm256_set1_epi8(1);
    const __m256i h0 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * p)), one);  // masked: no bits
    const __m256i h1 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * p + 1)), one);  // cross bytes
    lo = _mm256_or_si256(_mm256_and_si256(c, m15), _mm256_slli_epi16(h0, 4));
    hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), m15), _mm256_slli_epi16(h1, 4));
  }
};
struct FastQ6K {
  static constexpr int64_t kBytes = 210;
  static constexpr bool kMins = false;
  static void codes(const uint8_t* blk, int p, __m256i& lo, __m256i& hi) { q6_codes_u(blk, p, lo, hi); }
};

// vpshufb controls: every int16 = element e of each 128-bit half (Q4_K, Q5_K: the scale of
// group j in both halves); element e0 in the low half, e1 in the high one (Q6_K: a group's
// two 16-value sub-blocks).
inline __m256i pick16(int e0, int e1) {
  const __m128i c0 = _mm_set1_epi16(short(((2 * e0 + 1) << 8) | (2 * e0)));
  const __m128i c1 = _mm_set1_epi16(short(((2 * e1 + 1) << 8) | (2 * e1)));
  return _mm256_inserti128_si256(_mm256_castsi128_si256(c0), c1, 1);
}

// R weight rows x NB activation rows. Per 32-value group and activation row: vpmaddubsw
// pairs the weight codes (unsigned) with the activation codes (signed) into int16 (at most
// 2 * 63 * 127), vpmaddwd multiplies those by the integer scales and adds pairs into int32
// lane l = values 4l..4l+3 of the group; the groups' lanes add up in int32 (exact).
template <class Q, int R, int NB, bool Prefetch>
inline void kq8_tile(const uint8_t* row0, size_t row_bytes, int64_t nblocks, const uint8_t* xq, size_t ldxq,
                     int64_t cols, float* y, int64_t ldy) {
  Q8KRow x[NB];
  #pragma GCC unroll 16
  for (int b = 0; b < NB; ++b) x[b] = q8k_row(xq + size_t(b) * ldxq, cols);
  __m256 acc[R][NB];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) acc[r][b] = _mm256_setzero_ps();
  TilePrefetch pf(row0, R * row_bytes, nblocks > 0 ? R * row_bytes / size_t(nblocks) : 0, g_prefetch_fast);
  for (int64_t k = 0; k < nblocks; ++k) {
    if constexpr (Prefetch) pf.next();
    const uint8_t* blk[R];
    // Q4_K/Q5_K: sc = the 8 scales as int16 in both halves, mins the 8 mins; Q6_K: sc = the
    // 16 scales as int16, lo / hi its first / last 8 in both halves.
    __m256i sc[R], sc_lo[R] = {}, sc_hi[R] = {};
    __m128i mins[R];
    float d[R], dmin[R];
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      blk[r] = row0 + size_t(r) * row_bytes + size_t(k) * Q::kBytes;
      if constexpr (Q::kMins) {
        __m128i sc8, mn8;
        k_scale_bytes(blk[r], sc8, mn8);
        sc[r] = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc8));
        mins[r] = _mm_cvtepu8_epi16(mn8);
        const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(int(blocks::load_u32(blk[r]))));
        d[r] = _mm_cvtss_f32(dm);
        dmin[r] = _mm_cvtss_f32(_mm_movehdup_ps(dm));
      } else {
        sc[r] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[r] + 192)));
        sc_lo[r] = _mm256_permute4x64_epi64(sc[r], 0x44);
        sc_hi[r] = _mm256_permute4x64_epi64(sc[r], 0xEE);
        d[r] = _cvtsh_ss(blocks::load_u16(blk[r] + 208));
      }
    }
    __m256i iv[R][NB];
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
      #pragma GCC unroll 16
      for (int b = 0; b < NB; ++b) iv[r][b] = _mm256_setzero_si256();
    #pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {  // groups 2p and 2p+1
      const __m256i ctl_lo = Q::kMins ? pick16(2 * p, 2 * p) : pick16((4 * p) % 8, (4 * p + 1) % 8);
      const __m256i ctl_hi = Q::kMins ? pick16(2 * p + 1, 2 * p + 1) : pick16((4 * p + 2) % 8, (4 * p + 3) % 8);
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        __m256i lo, hi;
        Q::codes(blk[r], p, lo, hi);
        __m256i src;
        if constexpr (Q::kMins) src = sc[r];
        else src = p < 2 ? sc_lo[r] : sc_hi[r];
        const __m256i slo = _mm256_shuffle_epi8(src, ctl_lo), shi = _mm256_shuffle_epi8(src, ctl_hi);
        #pragma GCC unroll 16
        for (int b = 0; b < NB; ++b) {
          const int8_t* q = x[b].q + k * 256 + 64 * p;
          const __m256i xl = _mm256_load_si256(reinterpret_cast<const __m256i*>(q));
          const __m256i xh = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 32));
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
          iv[r][b] = _mm256_dpwssd_epi32(iv[r][b], _mm256_maddubs_epi16(lo, xl), slo);
          iv[r][b] = _mm256_dpwssd_epi32(iv[r][b], _mm256_maddubs_epi16(hi, xh), shi);
#else
          const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo, xl), slo),
                                             _mm256_madd_epi16(_mm256_maddubs_epi16(hi, xh), shi));
          iv[r][b] = _mm256_add_epi32(iv[r][b], s);
#endif
        }
      }
    }
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
      #pragma GCC unroll 16
      for (int b = 0; b < NB; ++b) {
        const float dx = x[b].d[k];
        if constexpr (Q::kMins) {
          const __m128i bs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].bs + 8 * k));
          const __m256 mv = _mm256_cvtepi32_ps(_mm256_zextsi128_si256(_mm_madd_epi16(mins[r], bs)));
          acc[r][b] = _mm256_fmadd_ps(_mm256_set1_ps(dx * d[r]), _mm256_cvtepi32_ps(iv[r][b]), acc[r][b]);
          acc[r][b] = _mm256_fnmadd_ps(_mm256_set1_ps(dx * dmin[r]), mv, acc[r][b]);
        } else {  // the codes' offset: 32 * sum over sub-blocks of scale * activation sum
          const __m256i bs16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].bs16 + 16 * k));
          const __m256i v = _mm256_sub_epi32(iv[r][b], _mm256_slli_epi32(_mm256_madd_epi16(sc[r], bs16), 5));
          acc[r][b] = _mm256_fmadd_ps(_mm256_set1_ps(dx * d[r]), _mm256_cvtepi32_ps(v), acc[r][b]);
        }
      }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) y[b * ldy + r] = hsum8(acc[r][b]);
}

// Tile shapes (bench_kernels.sh, Zen 4: 2 decode rows cost 30% more cycles, 3, 6 and 8 no
// fewer than 4). Batch tiles: 2 weight rows x 4 activation rows in the AVX2 file; 2 x 8
// where the compiler has AVX-512's 32 registers (session 15, q4_k-fast over 2048x2048 and
// 1024x8192: 4-6% fewer cycles at batch 128, 5-6% at 8 and 16 than 2 x 4; q5_k-fast 8%;
// 2 x 6, 1 x 8 and 2 x 12 no better, 4 x 4 worse). Integer sums per (row, activation
// row): the tile changes no bits.
constexpr int kQ8DecodeRows = 4;  // weight rows per decode tile
#if defined(__AVX512F__)
constexpr int kQ8BatchRows = 2, kQ8BatchTile = 8;  // weight rows x activation rows per batch tile
#else
constexpr int kQ8BatchRows = 2, kQ8BatchTile = 4;
#endif

// fast_tiles (kernels_stream.hpp): decode tiles of kQ8DecodeRows rows, prefetching the
// stream with its own plan, g_prefetch_fast; batches per chunk of activation rows of at
// most kQ8ChunkBytes (all of a 128-token prefill at hidden 2048; a batch-8 prefill's 1024
// tokens would not stay in L2 while the weight rows pass), kQ8BatchRows weight rows x
// kQ8BatchTile activation rows (the weight rows stay in L1).
constexpr size_t kQ8ChunkBytes = size_t(384) << 10;
template <class Q>
void kq8_rows(const WeightMatrix& w, const uint8_t* xq, size_t ldxq, int64_t B, float* y, int64_t ldy, int64_t r0,
              int64_t r1) {
  const int64_t nblocks = w.cols / 256, n = w.cols;
  const size_t rb = w.row_bytes;
  const int64_t chunk = chunk_rows<kQ8BatchTile>(kQ8ChunkBytes, ldxq);
  fast_tiles<kQ8DecodeRows, kQ8BatchRows, kQ8BatchTile>(B, r0, r1, chunk, [&](auto rows, auto nb, auto pf, int64_t r, int64_t b) {
    kq8_tile<Q, decltype(rows)::value, decltype(nb)::value, decltype(pf)::value>(
        w.data + size_t(r) * rb, rb, nblocks, xq + size_t(b) * ldxq, ldxq, n, y + b * ldy + r, ldy);
  });
}

void simd_matmul_rows_q8k(const WeightMatrix& w, const uint8_t* xq, size_t ldxq, int64_t B, float* y, int64_t ldy,
                          int64_t r0, int64_t r1) {
  switch (w.dtype) {
    case DType::Q4_K: return kq8_rows<FastQ4K>(w, xq, ldxq, B, y, ldy, r0, r1);
    case DType::Q5_K: return kq8_rows<FastQ5K>(w, xq, ldxq, B, y, ldy, r0, r1);
    case DType::Q6_K: return kq8_rows<FastQ6K>(w, xq, ldxq, B, y, ldy, r0, r1);
    default: break;
  }
}

}  // namespace
}  // namespace nunchaku::engine
