// The expert kernels for AVX2 + FMA + F16C (kernels_experts_simd.hpp over 8-float vectors).
// This file alone is compiled with -mavx2 -mfma -mf16c and -ffp-contract=off
// (CMakeLists.txt); kernels_experts.cpp calls into it only when AVX2 is the active ISA.
#include "engine/kernels_experts_impl.hpp"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

namespace nunchaku::engine {
namespace {

using V = __m256;
constexpr int kW = 8;
// MXFP4 tiles (registers: 16): 8 rows x 1 at batch 1 (8 independent chains hide the add
// latency), 4 x 2 from batch 2 (8 accumulators, 4 weight and 2 x vectors per 8 mul-adds).
constexpr int kMxDecodeRows = 8, kMxRows = 4, kMxBatch = 2;
inline V vzero() { return _mm256_setzero_ps(); }
inline V vloadu(const float* p) { return _mm256_loadu_ps(p); }
inline void vstoreu(float* p, V v) { _mm256_storeu_ps(p, v); }
inline V vset1(float f) { return _mm256_set1_ps(f); }
inline V vadd(V a, V b) { return _mm256_add_ps(a, b); }
inline V vmul(V a, V b) { return _mm256_mul_ps(a, b); }
inline V widen_bf16(const uint8_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline V widen_f16(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

}  // namespace
}  // namespace nunchaku::engine

#include "engine/kernels_experts_simd.hpp"

namespace nunchaku::engine {
const ExpertKernelSet kAvx2ExpertKernels = {simd_input_major_rows, simd_mxfp4_rows};
}  // namespace nunchaku::engine

#else  // not built with AVX2 flags: the scalar kernels are used

namespace nunchaku::engine {
const ExpertKernelSet kAvx2ExpertKernels = {};
}  // namespace nunchaku::engine

#endif
