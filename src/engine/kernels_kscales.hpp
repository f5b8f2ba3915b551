// 256-bit helpers shared by the SIMD kernels: hsum8, K-quant (Q4_K, Q5_K, Q6_K) scale and
// Q6_K code decoding, included by kernels_avx2.cpp
// and kernels_avx512.cpp (compiled with AVX2 at least) before their block policies; in an
// anonymous namespace like the kernels, so each ISA's copy stays in its file.
// Internal: only kernels_<isa>.cpp include this.
#pragma once

#include <immintrin.h>

#include "engine/quant_blocks.hpp"

namespace nunchaku::engine {
namespace {

// The sum of 8 lanes: (i + i+4), then + i+2, + i+1 (AVX2's vhsum; Q6_K's fused kernel).
inline float hsum8(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// K types (Q4_K, Q5_K): a block's 8 sub-block scales and mins, decoded once per block
// with a few byte shuffles (per sub-block and row, the scalar decode cost more than the
// dot product on AVX2), interleaved: dm[2s] = d * scale_s, dm[2s+1] = dmin * min_s (the
// same products the scalar dequantizer forms); dm16 (AVX2 only) as dm with d * scale_s / 16
// (exact) at the even places, for high nibbles kept in place.
// Q6_K: d6[i] = d * scale_i for its 16 sub-blocks of 16 values (exact: an 11-bit half
// times an 8-bit integer), the first product of the scalar dequantizer's d * sc * q.
// qh4 (Q5_K on AVX-512): the block's 32 high-bit bytes, one per 32-bit lane, shifted left by 4.
struct KScales {
  alignas(64) float dm[16], dm16[16], d6[16];
  alignas(64) uint32_t qh4[32];
};
// The 6-bit scales (sc) and mins (mn) of a K block's 8 sub-blocks as byte pairs: byte 2j
// = sc_j, byte 2j+1 = mn_j (one shuffle, two shifts, masks).
inline __m128i k_scale_pairs(const uint8_t* blk) {
  const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4));
  // a: s[j], s[j+4] for j < 4 (masked to 6 bits), then s[j+4] twice for j >= 4: low nibble
  // (scale) and high nibble (min), each with 2 high bits from a's first half 8 bytes before.
  const __m128i a = _mm_shuffle_epi8(s, _mm_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 8, 9, 9, 10, 10, 11, 11));
  const __m128i low = _mm_or_si128(
      _mm_and_si128(a, _mm_setr_epi8(63, 63, 63, 63, 63, 63, 63, 63, 15, 0, 15, 0, 15, 0, 15, 0)),
      _mm_and_si128(_mm_srli_epi16(a, 4), _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 0, 15, 0, 15, 0, 15)));
  // (b >> 6) << 4 == (b >> 2) & 0x30, the bytes of a's first half moved up by 8.
  const __m128i top = _mm_and_si128(_mm_srli_epi16(_mm_bslli_si128(a, 8), 2),
                                    _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 48, 48, 48, 48, 48, 48, 48, 48));
  return _mm_or_si128(low, top);
}
// The same scales and mins one byte each in the low 8 bytes of two registers (the high 8
// are zero): fast math's int16 scales.
inline void k_scale_bytes(const uint8_t* blk, __m128i& sc, __m128i& mn) {
  const __m128i p = k_scale_pairs(blk);
  sc = _mm_shuffle_epi8(p, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1));
  mn = _mm_shuffle_epi8(p, _mm_setr_epi8(1, 3, 5, 7, 9, 11, 13, 15, -1, -1, -1, -1, -1, -1, -1, -1));
}
inline void k_scales(const uint8_t* blk, KScales& k) {
  const __m128i pairs = k_scale_pairs(blk);
  // d, dmin, d, dmin, ...: the block's two f16 scales, broadcast as one 32-bit word.
  const __m128i dd16 = _mm_broadcastd_epi32(_mm_loadu_si32(blk));
#ifdef __AVX512F__
  _mm512_store_ps(k.dm, _mm512_mul_ps(_mm512_cvtph_ps(_mm256_broadcastsi128_si256(dd16)),
                                      _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(pairs))));
#else
  const __m256 dd = _mm256_cvtph_ps(dd16);
  const __m256 lo = _mm256_mul_ps(dd, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(pairs)));
  const __m256 hi = _mm256_mul_ps(dd, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_bsrli_si128(pairs, 8))));
  _mm256_store_ps(k.dm, lo);
  _mm256_store_ps(k.dm + 8, hi);
  const __m256 by16 = _mm256_setr_ps(0.0625f, 1, 0.0625f, 1, 0.0625f, 1, 0.0625f, 1);
  _mm256_store_ps(k.dm16, _mm256_mul_ps(lo, by16));
  _mm256_store_ps(k.dm16 + 8, _mm256_mul_ps(hi, by16));
#endif
}

// d6 (32-byte aligned) = the 16 products d * scale_i.
inline void q6_scale_products(const uint8_t* blk, float* d6) {
  const __m256 d = _mm256_set1_ps(_cvtsh_ss(blocks::load_u16(blk + 208)));
  const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192));
  _mm256_store_ps(d6, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
  _mm256_store_ps(d6 + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
}
inline void q6_scales(const uint8_t* blk, KScales& k) { q6_scale_products(blk, k.d6); }

// Q6_K's sub-blocks 2p and 2p+1 (p = 0..3) as unsigned 6-bit codes q (0..63), one byte
// per value, in column order: values l of sub-block 4h + g (l = 0..31) are the low (g = 0,
// 1) or high (g = 2, 3) nibbles of ql[64h + 32(g & 1) + l] with bits 2g, 2g+1 of qh[32h + l]
// above them.
inline void q6_codes_u(const uint8_t* blk, int p, __m256i& lo, __m256i& hi) {
  const int h = p >> 1;
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h));
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32));
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
  const __m256i m15 = _mm256_set1_epi8(15), m48 = _mm256_set1_epi8(48);
  __m256i ca, cb, ha, hb;  // the 16-bit shifts move bits only within each byte once masked
  if (p & 1) {
    ca = _mm256_and_si256(_mm256_srli_epi16(a, 4), m15), cb = _mm256_and_si256(_mm256_srli_epi16(b, 4), m15);
    ha = _mm256_and_si256(qh, m48), hb = _mm256_and_si256(_mm256_srli_epi16(qh, 2), m48);
  } else {
    ca = _mm256_and_si256(a, m15), cb = _mm256_and_si256(b, m15);
    ha = _mm256_and_si256(_mm256_slli_epi16(qh, 4), m48), hb = _mm256_and_si256(_mm256_slli_epi16(qh, 2), m48);
  }
  lo = _mm256_or_si256(ca, ha);
  hi = _mm256_or_si256(cb, hb);
}
// The same codes as the signed values q - 32.
inline void q6_codes(const uint8_t* blk, int p, __m256i& lo, __m256i& hi) {
  q6_codes_u(blk, p, lo, hi);
  const __m256i off = _mm256_set1_epi8(32);
  lo = _mm256_sub_epi8(lo, off);
  hi = _mm256_sub_epi8(hi, off);
}

}  // namespace
}  // namespace nunchaku::engine
