// AVX2 + FMA + F16C kernels. This file alone is compiled with -mavx2 -mfma -mf16c
// (CMakeLists.txt); kernels.cpp calls into it only after the CPU says it has them. The
// kernels themselves are kernels_simd.hpp over 8-float vectors; here are the vector
// primitives, the weight loaders and the block dequantizers for AVX2.
// No std templates here, so no AVX2 copy of a shared inline function reaches the linker.
#include "engine/kernels_impl.hpp"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include "engine/quant_blocks.hpp"
#include "engine/kernels_kscales.hpp"

namespace nunchaku::engine {
namespace {

using V = __m256;
constexpr int kW = 8, kSubVecs = 32 / kW;
// Prefill GEMM register tile: 2 weight rows x 6 activation rows (12 accumulators of 16
// registers; 3 rows x 6 spill, -25%; 4 x 3 spill, +85% cycles). Rows of 1024 columns or
// more take 3 x 4 (session 15, bench_kernels batch 128, F16 and Q8_0 over 2048 and 8192
// columns: 6-9% fewer cycles; not BF16, see kWideTile); over 576 columns 3 x 4 took 1-4%
// more, so narrow rows keep 2 x 6; 1 x 10 and 1 x 12 took twice the cycles. Column blocks
// of 768 (beat 512 and 1024 on 2048-column rows; same speed on 768-column ones).
constexpr int kGemmTileRows = 2, kGemmTileBatch = 6;
constexpr int kGemmWideRows = 3, kGemmWideBatch = 4;
constexpr int64_t kGemmWideCols = 1024, kGemmCols = 768;
// Small batches (2..15 activation rows): 2 weight rows x 6 activation rows (1 x 8 and
// 2 x 4 + 2 x 4 measured no better at batch 8).
constexpr int kBatchRows = 2, kBatchTile = 6, kBlockBatchTile = 4;
// Block types at small batches: 2 weight rows x 4 activation rows (each x vector loaded
// once for both rows: -16% cycles at batch 8; 2 x 3 was slower: +20%).
constexpr int kBlockBatchRows = 2;
inline V vzero() { return _mm256_setzero_ps(); }
inline V vload(const float* p) { return _mm256_load_ps(p); }
inline V vloadu(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, V v) { _mm256_store_ps(p, v); }
inline void vstoreu(float* p, V v) { _mm256_storeu_ps(p, v); }
inline V vset1(float f) { return _mm256_set1_ps(f); }
inline V vfma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline float vhsum(V v) { return hsum8(v); }

// {vhsum(a), vhsum(b), vhsum(c), vhsum(d)} with the same additions (lane i + i+4, then
// + i+2, + i+1), fewer shuffles: the GEMM tiles' epilogue.
inline __m128 vhsum4(V a, V b, V c, V d) {
  V ab = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));  // [a, b] halves summed
  V cd = _mm256_add_ps(_mm256_permute2f128_ps(c, d, 0x20), _mm256_permute2f128_ps(c, d, 0x31));
  ab = _mm256_add_ps(ab, _mm256_permute_ps(ab, _MM_SHUFFLE(1, 0, 3, 2)));  // p0+p2, p1+p3
  cd = _mm256_add_ps(cd, _mm256_permute_ps(cd, _MM_SHUFFLE(1, 0, 3, 2)));
  ab = _mm256_add_ps(ab, _mm256_permute_ps(ab, _MM_SHUFFLE(2, 3, 0, 1)));  // + the neighbour
  cd = _mm256_add_ps(cd, _mm256_permute_ps(cd, _MM_SHUFFLE(2, 3, 0, 1)));
  const V t = _mm256_unpacklo_ps(ab, cd);  // a c . . | b d . .
  return _mm_unpacklo_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

// kWideTile: the GEMM takes the 3 x 4 tile on wide rows (BF16's widening needs a shift and
// a temporary: 1-2.5% more cycles with 3 x 4 at 2048 and 8192 columns, so it keeps 2 x 6).
struct LoadF32 {
  static constexpr int kElemBytes = 4;
  static constexpr bool kWideTile = true;
  static V load(const uint8_t* row, int64_t i) { return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i); }
  static float one(const uint8_t* row, int64_t i) { return reinterpret_cast<const float*>(row)[i]; }
  static const uint8_t* addr(const uint8_t* row, int64_t i) { return row + 4 * i; }
};
struct LoadBF16 {
  static constexpr int kElemBytes = 2;
  static constexpr bool kWideTile = false;
  static V load(const uint8_t* row, int64_t i) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  // The decode tile's (one activation row): the same values as load, the 16 bytes
  // broadcast to both lanes (a load) and each u16 moved to the top of its 32-bit lane by
  // one vpshufb, instead of vpmovzxwd + vpslld: one FP-pipe op per 8 values, not two
  // (session 30, bench_kernels 64x2048 batch 1: 6.41 -> 7.38 best, 6.27 -> 7.05 median;
  // in the 2 x 6 small-batch tile it was slower, 10.7 -> 9.1 at batch 8, so that keeps load).
  static V load_decode(const uint8_t* row, int64_t i) {
    const __m256i h = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
    const __m256i up = _mm256_setr_epi8(-1, -1, 0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, 6, 7,
                                        -1, -1, 8, 9, -1, -1, 10, 11, -1, -1, 12, 13, -1, -1, 14, 15);
    return _mm256_castsi256_ps(_mm256_shuffle_epi8(h, up));
  }
  static float one(const uint8_t* row, int64_t i) { return blocks::bf16_to_float(blocks::load_u16(row + 2 * i)); }
  static const uint8_t* addr(const uint8_t* row, int64_t i) { return row + 2 * i; }
};
struct LoadF16 {
  static constexpr int kElemBytes = 2;
  static constexpr bool kWideTile = true;
  static V load(const uint8_t* row, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
  }
  static float one(const uint8_t* row, int64_t i) { return blocks::half_to_float(blocks::load_u16(row + 2 * i)); }
  static const uint8_t* addr(const uint8_t* row, int64_t i) { return row + 2 * i; }
};

// Block dequantizers: kBytes per block, kSubs sub-blocks of 32 values, sub(blk, s, w) ->
// w[0..4) = the 32 values as gguf-py dequantizes them. They are exact products in f32
// (Q8_0/Q4_0/Q5_0: d*q, an 11-bit half times a small integer) or one rounding of an exact
// product plus/minus an exact term (Q4_1/Q5_1: d*q + m; Q4_K/Q5_K: (d*sc)*q - dmin*m),
// which fmadd/fmsub round identically; bytes go straight from memory into vpmovsxbd /
// vpmovzxbd, no shuffles. (Q6_K keeps a fused kernel: its values unpacked this way decoded
// 30% slower.)
// A block's f16 scale d (and min m, the next f16) as broadcast vectors: converted straight
// from memory (vcvtph2ps xmm, m64; the 8 bytes are inside every block) and spread by
// lane; the scalar way (pinsrw + cvtph2ps + broadcast per value) costs 3 port-5 uops per
// value, and port 5 is these decoders' bottleneck. One scale is spread by vbroadcastss
// (register form): on Zen 3 vpermps takes about two FMA-pipe slots (session 29, a copy of
// the Q8_0 decode, 64x2048, one thread: 4.3 -> 4.8 weights per cycle, the same bits).
inline __m256 scales_at(const uint8_t* p) {
  return _mm256_castps128_ps256(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256 scale_one(const uint8_t* p) { return _mm256_broadcastss_ps(_mm256_castps256_ps128(scales_at(p))); }
inline void scale_pair(const uint8_t* p, __m256& d, __m256& m) {
  const __m256 dm = scales_at(p);
  d = _mm256_permutevar8x32_ps(dm, _mm256_setzero_si256());
  m = _mm256_permutevar8x32_ps(dm, _mm256_set1_epi32(1));
}
struct BlockQ8_0 {
  static constexpr int64_t kBytes = 34, kSubs = 1;
  static constexpr int kDecodeRows = 8;  // light enough for 8 rows in 16 registers
  static void sub(const uint8_t* b, __m256 w[4]) {  // 8 bytes at a time straight into vpmovsxbd
    const __m256 d = scale_one(b);
    #pragma GCC unroll 16
    for (int j = 0; j < 4; ++j)
      w[j] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                  _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * j)))));
  }
};
// 4-bit codes: values 0..15 are the low nibbles of bytes q[0..16), 16..31 the high ones.
// Each 8 bytes go straight from memory into vpmovzxbd (port 5 is the bottleneck of these
// decoders: no byte shuffles), then the nibbles are split in 32-bit lanes.
inline void nibbles_widened(const uint8_t* q, __m256i v[4]) {
  const __m256i lo0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)));
  const __m256i lo1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8)));
  const __m256i m15 = _mm256_set1_epi32(15);
  v[0] = _mm256_and_si256(lo0, m15);
  v[1] = _mm256_and_si256(lo1, m15);
  v[2] = _mm256_srli_epi32(lo0, 4);
  v[3] = _mm256_srli_epi32(lo1, 4);
}
// Q4_0: w = d*(q - 8), as fmadd(d, q, -8d): for a finite d, d*q and 8d are exact (an
// 11-bit half times at most 4 bits) and so is their difference, so the one rounding
// changes nothing: the same values as d*(q - 8) with one integer subtraction fewer per 8
// values (bench_kernels, batch 1: 0.301 -> 0.278 tsc/B at 2048 columns, 0.308 -> 0.287 at
// 576). An infinite d gives NaN where d*(q - 8) gives an infinity: garbage either way.
struct BlockQ4_0 {
  static constexpr int64_t kBytes = 18, kSubs = 1;
  static constexpr int kDecodeRows = 4;
  static void sub(const uint8_t* b, __m256 w[4]) {
    const __m256 d = scale_one(b), off = _mm256_mul_ps(d, _mm256_set1_ps(-8.0f));
    __m256i v[4];
    nibbles_widened(b + 2, v);
    #pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) w[g] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(v[g]), off);
  }
};
// Q4_K: sub-blocks 2p and 2p+1 = low and high nibbles of qs[32p ...], 6-bit scale and
// min: w = (d*sc)*q - dmin*m. Each 8 code bytes are widened once for both; the high
// nibbles stay in place (q*16) and meet ds/16: the same exact product, one AND instead of
// a shift (port 0/1 are the bottleneck here).
struct BlockQ4_K {
  static constexpr int64_t kBytes = 144, kSubs = 8;
  static constexpr int kDecodeRows = 4;
  static constexpr bool kUnrollPairs = false;
  static void scales(const uint8_t* b, KScales& k) { k_scales(b, k); }
  static void pair(const uint8_t* b, int p, const KScales& k, __m256 lo[4], __m256 hi[4]) {
    const __m256 dl = _mm256_set1_ps(k.dm[4 * p]), ml = _mm256_set1_ps(k.dm[4 * p + 1]);
    const __m256 dh = _mm256_set1_ps(k.dm16[4 * p + 2]), mh = _mm256_set1_ps(k.dm[4 * p + 3]);
    const __m256i m_lo = _mm256_set1_epi32(0x0F), m_hi = _mm256_set1_epi32(0xF0);
    const uint8_t* q = b + 16 + 32 * p;
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8 * g)));
      lo[g] = _mm256_fmsub_ps(dl, _mm256_cvtepi32_ps(_mm256_and_si256(v, m_lo)), ml);
      hi[g] = _mm256_fmsub_ps(dh, _mm256_cvtepi32_ps(_mm256_and_si256(v, m_hi)), mh);
    }
  }
};
// Q4_1: w = d*q + m (d*q exact, so fmadd rounds where d*q + m does).
struct BlockQ4_1 {
  static constexpr int64_t kBytes = 20, kSubs = 1;
  static constexpr int kDecodeRows = 4;
  static void sub(const uint8_t* b, __m256 w[4]) {
    __m256 d, m;
    scale_pair(b, d, m);
    __m256i v[4];
    nibbles_widened(b + 4, v);
    #pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) w[g] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(v[g]), m);
  }
};
// Q5_0 / Q5_1: value i's 5th bit is bit i of qh; w = d*(q - 16) = fmsub(d, q, 16d) (d*q
// and 16d exact, so one rounding of the exact d*(q - 16), as d*(q - 16) itself), or
// fmadd(d, q, m). Codes in 32-bit lanes as Q4_0's nibbles; the 5th bit moved to bit 4 of
// each lane by one variable shift of qh (pre-shifted left by 4 for bits 0..15).
template <bool kMin>
inline void q5_sub(const uint8_t* b, __m256 w[4]) {
  __m256 d, m;
  if constexpr (kMin) scale_pair(b, d, m);
  else d = scale_one(b), m = _mm256_mul_ps(d, _mm256_set1_ps(16));
  const uint8_t* p = b + (kMin ? 4 : 2);
  const __m256i qh = _mm256_set1_epi32(int(blocks::load_u32(p))), qh4 = _mm256_slli_epi32(qh, 4);
  const __m256i b16 = _mm256_set1_epi32(16);
  __m256i v[4];
  nibbles_widened(p + 4, v);
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {  // values 8g .. 8g+7: bit 8g + lane of qh to bit 4
    const __m256i cnt = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(g < 2 ? 8 * g : 8 * g - 4));
    const __m256i q = _mm256_or_si256(v[g], _mm256_and_si256(_mm256_srlv_epi32(g < 2 ? qh4 : qh, cnt), b16));
    const __m256 f = _mm256_cvtepi32_ps(q);
    w[g] = kMin ? _mm256_fmadd_ps(d, f, m) : _mm256_fmsub_ps(d, f, m);
  }
}
struct BlockQ5_0 {
  static constexpr int64_t kBytes = 22, kSubs = 1;
  // 8 rows, not 4 (session 30, bench_kernels batch 1, alternating runs: 64x2048 2.72 ->
  // 2.85 best, 2.29 -> 2.42 median in a slow run; 8192x8192 from DRAM 2.68 -> 2.86; Q4_0
  // at 8 read no better, Q5_1 +1.5 %, left at 4).
  static constexpr int kDecodeRows = 8;
  static void sub(const uint8_t* b, __m256 w[4]) { q5_sub<false>(b, w); }
};
struct BlockQ5_1 {
  static constexpr int64_t kBytes = 24, kSubs = 1;
  static constexpr int kDecodeRows = 4;
  static void sub(const uint8_t* b, __m256 w[4]) { q5_sub<true>(b, w); }
};
// Q5_K: as Q4_K, with bit s of qh[l] the 5th bit of value l of sub-block s (qh bytes
// widened once for both sub-blocks too).
struct BlockQ5_K {
  static constexpr int64_t kBytes = 176, kSubs = 8;
  static constexpr int kDecodeRows = 4;
  static constexpr bool kUnrollPairs = true;
  static void scales(const uint8_t* b, KScales& k) { k_scales(b, k); }
  static void pair(const uint8_t* b, int p, const KScales& k, __m256 lo[4], __m256 hi[4]) {
    const __m256 dl = _mm256_set1_ps(k.dm[4 * p]), ml = _mm256_set1_ps(k.dm[4 * p + 1]);
    const __m256 dh = _mm256_set1_ps(k.dm[4 * p + 2]), mh = _mm256_set1_ps(k.dm[4 * p + 3]);
    const uint8_t* q = b + 48 + 32 * p;
    const __m256i m15 = _mm256_set1_epi32(15), b16 = _mm256_set1_epi32(16);
    const auto bit_as_16 = [&](__m256i h, int s) {  // bit s of each lane -> 16 or 0
      return _mm256_and_si256(s <= 4 ? _mm256_slli_epi32(h, 4 - s) : _mm256_srli_epi32(h, s - 4), b16);
    };
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8 * g)));
      const __m256i h = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 16 + 8 * g)));
      const __m256i hl = bit_as_16(h, 2 * p), hh = bit_as_16(h, 2 * p + 1);
      lo[g] = _mm256_fmsub_ps(dl, _mm256_cvtepi32_ps(_mm256_or_si256(_mm256_and_si256(v, m15), hl)), ml);
      hi[g] = _mm256_fmsub_ps(dh, _mm256_cvtepi32_ps(_mm256_or_si256(_mm256_srli_epi32(v, 4), hh)), mh);
    }
  }
};
// Q6_K keeps the fused kernel here (see matmul_q6 in kernels_simd.hpp).
using BlockQ6_K = void;

}  // namespace
}  // namespace nunchaku::engine

#include "engine/kernels_simd.hpp"
#include "engine/kernels_q8_simd.hpp"

namespace nunchaku::engine {
const KernelSet kAvx2Kernels = {simd_matmul_rows, simd_attn_scores, simd_attn_mix, simd_store_f16,
                                  simd_matmul_rows_q8k};
bool avx2_compiled() { return true; }
}  // namespace nunchaku::engine

#else  // not built with AVX2 flags (non-x86 compiler): the scalar kernels are used

namespace nunchaku::engine {
const KernelSet kAvx2Kernels = {};
bool avx2_compiled() { return false; }
}  // namespace nunchaku::engine

#endif
