// Fast math's BF16 kernel (kernels_fast_bf16.hpp): vdpbf16ps over bf16 weight rows and
// bf16-rounded activation rows. This file alone is compiled with -mavx512bf16
// (CMakeLists.txt); kernels_fast_bf16.cpp calls into it only when the CPU has AVX512_BF16
// and the AVX-512 kernels are active.
#include "engine/kernels_fast_bf16.hpp"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512BF16__) && \
    defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12's _mm512_setzero_* ("__Y may be used uninitialized")
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "engine/kernels_stream.hpp"

namespace nunchaku::engine {
namespace {

// The lanes' sum in the order of the header (and the scalar twin).
inline float lanes_sum(__m512 v) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v),
                                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

// R weight rows x NB activation rows, all columns: R*NB chains of 16 lanes, each weight
// vector (32 values) loaded once for NB rows. Prefetch (decode, the first group of a
// batch): the 16-bit types' plan, g_prefetch_16bit.
template <int R, int NB, bool Prefetch>
inline void bf_tile(const uint8_t* row0, size_t row_bytes, int64_t n, const uint16_t* x, int64_t ldx, float* y,
                    int64_t ldy) {
  __m512 acc[R][NB];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) acc[r][b] = _mm512_setzero_ps();
  TilePrefetch pf(row0, R * row_bytes, R * row_bytes * 32 / size_t(n), g_prefetch_16bit);
  for (int64_t i = 0; i < n; i += 32) {
    if constexpr (Prefetch) pf.next();
    __m512i w[R];
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) w[r] = _mm512_loadu_si512(row0 + size_t(r) * row_bytes + size_t(i) * 2);
    #pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) {
      __m512i xv = _mm512_loadu_si512(x + b * ldx + i);
      if constexpr (R > 1) asm("" : "+v"(xv));  // one load per x vector, not one per product
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][b] = _mm512_dpbf16_ps(acc[r][b], (__m512bh)w[r], (__m512bh)xv);
    }
  }
  #pragma GCC unroll 16
  for (int b = 0; b < NB; ++b)
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) y[b * ldy + r] = lanes_sum(acc[r][b]);
}

// fast_tiles (kernels_stream.hpp): decode tiles of 8 rows (8 independent chains), the
// stream prefetched ahead; batches per chunk of activation rows of at most kChunkBytes, 4
// weight rows (16 KiB at 2048 columns: L1) x 6 activation rows: 24 accumulators, 4 + 6
// loads per 24 vdpbf16ps.
constexpr int kDecodeRows = 8, kBatchRows = 4, kBatchTile = 6;
constexpr size_t kChunkBytes = size_t(384) << 10;

}  // namespace

void avx512bf16_matmul_rows_bf16x(const WeightMatrix& w, const uint16_t* x, int64_t ldx, int64_t B, float* y,
                                  int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t n = w.cols;
  const size_t rb = w.row_bytes;
  const int64_t chunk = chunk_rows<kBatchTile>(kChunkBytes, size_t(ldx) * 2);
  fast_tiles<kDecodeRows, kBatchRows, kBatchTile>(B, r0, r1, chunk, [&](auto rows, auto nb, auto pf, int64_t r, int64_t b) {
    bf_tile<decltype(rows)::value, decltype(nb)::value, decltype(pf)::value>(w.data + size_t(r) * rb, rb, n, x + b * ldx,
                                                                             ldx, y + b * ldy + r, ldy);
  });
}
bool avx512bf16_compiled() { return true; }

}  // namespace nunchaku::engine

#else

namespace nunchaku::engine {
void avx512bf16_matmul_rows_bf16x(const WeightMatrix&, const uint16_t*, int64_t, int64_t, float*, int64_t, int64_t,
                                  int64_t) {}
bool avx512bf16_compiled() { return false; }
}  // namespace nunchaku::engine

#endif
