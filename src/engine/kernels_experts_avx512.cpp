// The expert kernels for AVX-512 F/BW/VL (kernels_experts_simd.hpp: input-major matrices
// over 16-float vectors; MXFP4 in 256-bit vectors, whose 8 lanes its sums are defined by,
// with AVX-512's 32 registers for larger tiles). This file alone is compiled with the
// AVX-512 flags and -ffp-contract=off (CMakeLists.txt); kernels_experts.cpp calls into it
// only when AVX-512 is the active ISA. Same bits as the AVX2 and scalar kernels.
#include "engine/kernels_experts_impl.hpp"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX2__) && defined(__FMA__) && \
    defined(__F16C__)
// GCC 12's own AVX-512 headers trip its uninitialized-use warnings (kernels_avx512.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

namespace nunchaku::engine {
namespace {

using V = __m512;
constexpr int kW = 16;
// MXFP4 tiles (registers: 32): 8 rows x 1 at batch 1, 4 x 4 from batch 2 (16 accumulators).
// Not measured: no AVX-512 CPU where these kernels were written.
constexpr int kMxDecodeRows = 8, kMxRows = 4, kMxBatch = 4;
inline V vzero() { return _mm512_setzero_ps(); }
inline V vloadu(const float* p) { return _mm512_loadu_ps(p); }
inline void vstoreu(float* p, V v) { _mm512_storeu_ps(p, v); }
inline V vset1(float f) { return _mm512_set1_ps(f); }
inline V vadd(V a, V b) { return _mm512_add_ps(a, b); }
inline V vmul(V a, V b) { return _mm512_mul_ps(a, b); }
inline V widen_bf16(const uint8_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline V widen_f16(const uint8_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }

}  // namespace
}  // namespace nunchaku::engine

#include "engine/kernels_experts_simd.hpp"

namespace nunchaku::engine {
const ExpertKernelSet kAvx512ExpertKernels = {simd_input_major_rows, simd_mxfp4_rows};
}  // namespace nunchaku::engine

#else  // not built with AVX-512 flags: the AVX2 or scalar kernels are used

namespace nunchaku::engine {
const ExpertKernelSet kAvx512ExpertKernels = {};
}  // namespace nunchaku::engine

#endif
