// AVX-512 (F, BW, VL) kernels: kernels_simd.hpp over 16-float vectors. This file alone is
// compiled with -mavx512f -mavx512bw -mavx512vl (and AVX2/FMA/F16C, CMakeLists.txt);
// kernels.cpp calls into it only after the CPU says it has them. Sums run in 16 lanes, so
// results differ from the AVX2 kernels' by fp32 rounding; within this ISA every path sums
// in the same order (batch-invariant to the bit).
//
// 4- and 5-bit blocks dequantize through a table: the 16 (or 32) values a block's codes
// can take, computed with the same one fmadd/fmsub per value as the direct way, then
// vpermps / vpermt2ps by code (the index bits above the code are ignored by vpermps, and
// masked for vpermt2ps). A 32-value sub-block is one 16-byte load; no int->float
// conversions per value.
// No std templates here, so no AVX-512 copy of a shared inline function reaches the linker.
#include "engine/kernels_impl.hpp"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX2__) && defined(__FMA__) && \
    defined(__F16C__)
// GCC 12's own AVX-512 headers trip its uninitialized-use warnings (their
// _mm512_undefined_* placeholders, e.g. inside _mm512_cvtph_ps): not our code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "engine/quant_blocks.hpp"
#include "engine/kernels_kscales.hpp"

namespace nunchaku::engine {
namespace {

using V = __m512;
constexpr int kW = 16, kSubVecs = 32 / kW;
// Prefill GEMM register tile: 4 weight rows x 6 activation rows (24 accumulators of 32
// registers: 10 loads per 24 FMAs; 2 rows left the FMA units idle: +42% on Ice Lake; 3 x 8,
// 5 x 5, 2 x 10 and 2 x 12 were slower on Zen 4), at every width. Column blocks of 1024
// (session 15, against 768: 1-5% fewer cycles at batch 128 over 576-8192 columns).
constexpr int kGemmTileRows = 4, kGemmTileBatch = 6;
constexpr int kGemmWideRows = kGemmTileRows, kGemmWideBatch = kGemmTileBatch;
constexpr int64_t kGemmWideCols = 0, kGemmCols = 1024;
// Small batches (2..15 activation rows, e.g. batched decode): 3 weight rows x 8 activation
// rows (24 accumulators; each weight vector converted once for 8 rows at batch 8: -30%
// cycles against 2 x 6 and 2 x 2).
constexpr int kBatchRows = 3, kBatchTile = 8, kBlockBatchTile = 8;
// Block types at small batches: 2 weight rows x 8 activation rows (16 accumulators; each
// x vector loaded once for both rows).
constexpr int kBlockBatchRows = 2;
inline V vzero() { return _mm512_setzero_ps(); }
inline V vload(const float* p) { return _mm512_load_ps(p); }
inline V vloadu(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, V v) { _mm512_store_ps(p, v); }
inline void vstoreu(float* p, V v) { _mm512_storeu_ps(p, v); }
inline V vset1(float f) { return _mm512_set1_ps(f); }
inline V vfma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
inline float vhsum(V v) {  // pairwise halves: 16 -> 8 -> 4 -> 2 -> 1
  __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// {vhsum(a), vhsum(b), vhsum(c), vhsum(d)} with the same additions (lane i + i+8, then
// + i+4, + i+2, + i+1), a quarter of the shuffles: the GEMM tiles' epilogue.
inline __m128 vhsum4(V a, V b, V c, V d) {
  // 128-bit quarters q0..q3: q0+q2 and q1+q3 of a and b, then of c and d.
  const V ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  const V cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 2, 3, 2)));
  // (q0+q2) + (q1+q3): one quarter per vector, [a b c d].
  V t = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
  t = _mm512_add_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(1, 0, 3, 2)));  // p0+p2, p1+p3
  t = _mm512_add_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(2, 3, 0, 1)));  // + the neighbour
  return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), t));
}

struct LoadF32 {
  static constexpr int kElemBytes = 4;
  static V load(const uint8_t* row, int64_t i) { return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i); }
  static float one(const uint8_t* row, int64_t i) { return reinterpret_cast<const float*>(row)[i]; }
  static const uint8_t* addr(const uint8_t* row, int64_t i) { return row + 4 * i; }
};
struct LoadBF16 {
  static constexpr int kElemBytes = 2;
  static V load(const uint8_t* row, int64_t i) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static float one(const uint8_t* row, int64_t i) { return blocks::bf16_to_float(blocks::load_u16(row + 2 * i)); }
  static const uint8_t* addr(const uint8_t* row, int64_t i) { return row + 2 * i; }
};
struct LoadF16 {
  static constexpr int kElemBytes = 2;
  static V load(const uint8_t* row, int64_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i)));
  }
  static float one(const uint8_t* row, int64_t i) { return blocks::half_to_float(blocks::load_u16(row + 2 * i)); }
  static const uint8_t* addr(const uint8_t* row, int64_t i) { return row + 2 * i; }
};

// A block's f16 scale d (and min m, the next f16) as broadcast vectors: converted straight
// from memory (the 8 bytes are inside every block) and spread by lane, not per value
// through a general register (3 port-5 uops each; port 5 also runs vpermps and vpmovzx).
inline __m128 scales_at(const uint8_t* p) { return _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
inline V scale_one(const uint8_t* p) { return _mm512_broadcastss_ps(scales_at(p)); }
inline void scale_pair(const uint8_t* p, V& d, V& m) {
  const __m128 dm = scales_at(p);
  d = _mm512_broadcastss_ps(dm);
  m = _mm512_broadcastss_ps(_mm_movehdup_ps(dm));
}
inline V iota16() { return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
// The 16 bytes at p, one per 32-bit lane.
inline __m512i bytes16(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// Block dequantizers (see kernels_avx2.cpp for the exactness argument; the tables hold
// the same values: table[q] = the one rounding of d*q (+ m) the direct way gives).
struct BlockQ8_0 {
  static constexpr int64_t kBytes = 34, kSubs = 1;
  static constexpr int kDecodeRows = 8;
  static void sub(const uint8_t* b, V w[2]) {
    const V d = scale_one(b);
    #pragma GCC unroll 16
    for (int j = 0; j < 2; ++j)
      w[j] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + 16 * j)))));
  }
};
// 4-bit codes: values 0..15 are the low nibbles of bytes q[0..16), 16..31 the high ones.
inline void nibbles_by_table(const uint8_t* q, V table, V w[2]) {
  const __m512i v = bytes16(q);
  w[0] = _mm512_permutexvar_ps(v, table);  // index = bits 0..3 = the low nibble
  w[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table);
}
struct BlockQ4_0 {
  static constexpr int64_t kBytes = 18, kSubs = 1;
  static constexpr int kDecodeRows = 8;
  static void sub(const uint8_t* b, V w[2]) {
    nibbles_by_table(b + 2, _mm512_mul_ps(scale_one(b), _mm512_sub_ps(iota16(), _mm512_set1_ps(8))), w);
  }
};
struct BlockQ4_1 {
  static constexpr int64_t kBytes = 20, kSubs = 1;
  static constexpr int kDecodeRows = 8;
  static void sub(const uint8_t* b, V w[2]) {
    V d, m;
    scale_pair(b, d, m);
    nibbles_by_table(b + 4, _mm512_fmadd_ps(d, iota16(), m), w);
  }
};
// Sub-blocks 2p (low nibbles) and 2p+1 (high nibbles) of the 32 code bytes at 16 + 32p:
// each 16 bytes widened once for both (vpermps reads only the index's low 4 bits).
struct BlockQ4_K {
  static constexpr int64_t kBytes = 144, kSubs = 8;
  static constexpr int kDecodeRows = 8;
  static constexpr bool kUnrollPairs = false;
  static void scales(const uint8_t* b, KScales& k) { k_scales(b, k); }
  static void pair(const uint8_t* b, int p, const KScales& k, V lo[2], V hi[2]) {
    const V tlo = _mm512_fmsub_ps(_mm512_set1_ps(k.dm[4 * p]), iota16(), _mm512_set1_ps(k.dm[4 * p + 1]));
    const V thi = _mm512_fmsub_ps(_mm512_set1_ps(k.dm[4 * p + 2]), iota16(), _mm512_set1_ps(k.dm[4 * p + 3]));
    const uint8_t* q = b + 16 + 32 * p;
    #pragma GCC unroll 16
    for (int j = 0; j < 2; ++j) {
      const __m512i v = bytes16(q + 16 * j);
      lo[j] = _mm512_permutexvar_ps(v, tlo);
      hi[j] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), thi);
    }
  }
};
// 5-bit codes through a 32-entry table (lo: codes 0..15, hi: 16..31): nibble | 16 where
// the lane's bit in `high` is set.
inline V code5(__m512i nib, __mmask16 high, V lo, V hi) {
  const __m512i idx = _mm512_mask_or_epi32(nib, high, nib, _mm512_set1_epi32(16));
  return _mm512_permutex2var_ps(lo, idx, hi);
}
template <bool kMin>
inline void q5_sub(const uint8_t* b, V w[2]) {
  V d, m = _mm512_setzero_ps();
  if constexpr (kMin) scale_pair(b, d, m);
  else d = scale_one(b);
  const V i0 = iota16(), i1 = _mm512_add_ps(iota16(), _mm512_set1_ps(16));
  V lo, hi;
  if constexpr (kMin) {
    lo = _mm512_fmadd_ps(d, i0, m), hi = _mm512_fmadd_ps(d, i1, m);
  } else {
    const V off = _mm512_set1_ps(16);
    lo = _mm512_mul_ps(d, _mm512_sub_ps(i0, off)), hi = _mm512_mul_ps(d, _mm512_sub_ps(i1, off));
  }
  const uint8_t* p = b + (kMin ? 4 : 2);
  const __m512i v = bytes16(p + 4), m15 = _mm512_set1_epi32(15);
  // qh's halves straight from memory into mask registers (kmovw k, m16 is a load; from a
  // general register it is a port-5 uop, and port 5 is this decoder's bottleneck).
  const auto mask_at = [](const uint8_t* q) { return _load_mask16(reinterpret_cast<__mmask16*>(const_cast<uint8_t*>(q))); };
  w[0] = code5(_mm512_and_si512(v, m15), mask_at(p), lo, hi);
  w[1] = code5(_mm512_srli_epi32(v, 4), mask_at(p + 2), lo, hi);
}
struct BlockQ5_0 {
  static constexpr int64_t kBytes = 22, kSubs = 1;
  static constexpr int kDecodeRows = 8;
  static void sub(const uint8_t* b, V w[2]) { q5_sub<false>(b, w); }
};
struct BlockQ5_1 {
  static constexpr int64_t kBytes = 24, kSubs = 1;
  static constexpr int kDecodeRows = 8;
  static void sub(const uint8_t* b, V w[2]) { q5_sub<true>(b, w); }
};
// As Q4_K, with bit s of qh[l] (the 32 bytes at 16) the 5th bit of value l of sub-block s:
// the 32-entry table's index is the nibble with that bit above it (vpermt2ps reads index
// bits 0..4). qh is widened once per block (k.qh4: qh[l] << 4, one per 32-bit lane), then
// shifted right by 2p or 2p+1 per pair: bit 4 is bit 2p or 2p+1 of qh[l].
struct BlockQ5_K {
  static constexpr int64_t kBytes = 176, kSubs = 8;
  static constexpr int kDecodeRows = 8;
  static constexpr bool kUnrollPairs = true;
  static void scales(const uint8_t* b, KScales& k) {
    k_scales(b, k);
    #pragma GCC unroll 2
    for (int j = 0; j < 2; ++j)
      _mm512_store_si512(reinterpret_cast<__m512i*>(k.qh4) + j, _mm512_slli_epi32(bytes16(b + 16 + 16 * j), 4));
  }
  static void pair(const uint8_t* b, int p, const KScales& k, V lo[2], V hi[2]) {
    V t[2][2];  // [sub-block 2p or 2p+1][codes 0..15 or 16..31]
    #pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const V ds = _mm512_set1_ps(k.dm[4 * p + 2 * h]), ms = _mm512_set1_ps(k.dm[4 * p + 2 * h + 1]);
      t[h][0] = _mm512_fmsub_ps(ds, iota16(), ms);
      t[h][1] = _mm512_fmsub_ps(ds, _mm512_add_ps(iota16(), _mm512_set1_ps(16)), ms);
    }
    const uint8_t* q = b + 48 + 32 * p;
    const __m512i m15 = _mm512_set1_epi32(15);
    const __m128i sh_lo = _mm_cvtsi32_si128(2 * p), sh_hi = _mm_cvtsi32_si128(2 * p + 1);
    constexpr int kSelect = 0xE4;  // ternary logic: c ? a : b, bit by bit (c = 15: the nibble)
    #pragma GCC unroll 16
    for (int j = 0; j < 2; ++j) {
      const __m512i v = bytes16(q + 16 * j), qh = _mm512_load_si512(reinterpret_cast<const __m512i*>(k.qh4) + j);
      const __m512i il = _mm512_ternarylogic_epi32(v, _mm512_srl_epi32(qh, sh_lo), m15, kSelect);
      const __m512i ih = _mm512_ternarylogic_epi32(_mm512_srli_epi32(v, 4), _mm512_srl_epi32(qh, sh_hi), m15, kSelect);
      lo[j] = _mm512_permutex2var_ps(t[0][0], il, t[0][1]);
      hi[j] = _mm512_permutex2var_ps(t[1][0], ih, t[1][1]);
    }
  }
};

// Q6_K: w = (d*sc)*(q - 32), the scalar dequantizer's products (d*sc exact, one rounding),
// sub-blocks 2p and 2p+1 from one pass over their code bytes (q6_codes).
struct BlockQ6_K {
  static constexpr int64_t kBytes = 210, kSubs = 8;
  static constexpr int kDecodeRows = 8;
  static constexpr bool kUnrollPairs = false;
  static void scales(const uint8_t* b, KScales& k) { q6_scales(b, k); }
  static void pair(const uint8_t* b, int p, const KScales& k, V lo[2], V hi[2]) {
    __m256i cl, ch;
    q6_codes(b, p, cl, ch);
    const float* d = k.d6 + 4 * p;  // sub-block 2p: d[0], d[1]; 2p+1: d[2], d[3]
    #pragma GCC unroll 2
    for (int j = 0; j < 2; ++j) {
      lo[j] = _mm512_mul_ps(_mm512_set1_ps(d[j]), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(j ? _mm256_extracti128_si256(cl, 1) : _mm256_castsi256_si128(cl))));
      hi[j] = _mm512_mul_ps(_mm512_set1_ps(d[2 + j]), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(j ? _mm256_extracti128_si256(ch, 1) : _mm256_castsi256_si128(ch))));
    }
  }
};

}  // namespace
}  // namespace nunchaku::engine

#include "engine/kernels_simd.hpp"
#include "engine/kernels_q8_simd.hpp"

namespace nunchaku::engine {
const KernelSet kAvx512Kernels = {simd_matmul_rows, simd_attn_scores, simd_attn_mix, simd_store_f16,
                                  simd_matmul_rows_q8k};
bool avx512_compiled() { return true; }
}  // namespace nunchaku::engine

#else  // not built with AVX-512 flags: AVX2 or scalar kernels are used

namespace nunchaku::engine {
const KernelSet kAvx512Kernels = {};
bool avx512_compiled() { return false; }
}  // namespace nunchaku::engine

#endif
