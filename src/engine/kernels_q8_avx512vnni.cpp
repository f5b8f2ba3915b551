// Fast math's kernels (kernels_q8_simd.hpp) with AVX512-VNNI: vpdpwssd multiplies the
// int16 pair sums by the sub-block scales and adds them in one instruction (vpmaddwd +
// vpaddd otherwise). Integer arithmetic, so the same bits as the other ISAs. This file
// alone is compiled with -mavx512vnni (CMakeLists.txt); kernels.cpp calls into it only
// when the CPU has AVX-512 F/BW/VL and VNNI and the AVX-512 kernels are in use.
#include "engine/kernels_impl.hpp"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && \
    defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "engine/kernels_q8_simd.hpp"

namespace nunchaku::engine {
void avx512vnni_matmul_rows_q8k(const WeightMatrix& w, const uint8_t* xq, size_t ldxq, int64_t B, float* y,
                                int64_t ldy, int64_t r0, int64_t r1) {
  simd_matmul_rows_q8k(w, xq, ldxq, B, y, ldy, r0, r1);
}
bool avx512vnni_compiled() { return true; }
}  // namespace nunchaku::engine

#else

namespace nunchaku::engine {
void avx512vnni_matmul_rows_q8k(const WeightMatrix&, const uint8_t*, size_t, int64_t, float*, int64_t, int64_t,
                                int64_t) {}
bool avx512vnni_compiled() { return false; }
}  // namespace nunchaku::engine

#endif
