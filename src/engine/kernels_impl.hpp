// Internal: the per-ISA entry points behind kernels.hpp (one set per *_isa.cpp file).
#pragma once

#include "engine/kernels.hpp"

namespace nunchaku::engine {

struct KernelSet {
  // matmul over rows [r0, r1) of a F32/BF16/F16/quantized matrix (see matmul_rows).
  void (*matmul_rows)(const WeightMatrix&, const float*, int64_t, int64_t, float*, int64_t, int64_t, int64_t);
  void (*attn_scores)(const float*, const void*, bool, int64_t, int64_t, int64_t, float, float*);
  void (*attn_mix)(const float*, const void*, bool, int64_t, int64_t, int64_t, float*);
  void (*store_f16)(const float*, uint16_t*, int64_t);
  // fast math: matmul_rows_q8k (kernels_q8.hpp)
  void (*matmul_rows_q8k)(const WeightMatrix&, const uint8_t*, size_t, int64_t, float*, int64_t, int64_t, int64_t);
};
void scalar_matmul_rows_q8k(const WeightMatrix& w, const uint8_t* xq, size_t ldxq, int64_t B, float* y, int64_t ldy,
                            int64_t r0, int64_t r1);

// Software prefetch of the weight stream where it comes from DRAM once per step (decode
// tiles, small batches; kernels_simd.hpp): the tile `ahead` tiles past the current one, as
// one sequential stream spread over the current tile's steps, into L1 (T0) or L2 (T1);
// ahead = 0: none. One plan for the 16-bit types, one for Q8_0 (for both, a byte or more
// per weight, the stream is the limit), one for the 4-6-bit blocks (their dequantization
// is), one for fast math's kernels. Chosen once per CPU (kernels.cpp; NUNCHAKU_PREFETCH
// overrides them all).
struct PrefetchPlan {
  int ahead = 2;
  bool to_l2 = false;
};
extern PrefetchPlan g_prefetch_16bit, g_prefetch_wide, g_prefetch_narrow, g_prefetch_fast;

extern const KernelSet kScalarKernels;
extern const KernelSet kAvx2Kernels;  // only call when the CPU has AVX2, FMA and F16C
bool avx2_compiled();                 // false when the compiler could not build that file
extern const KernelSet kAvx512Kernels;  // only call when the CPU has AVX-512 F/BW/VL (and AVX2's set)
bool avx512_compiled();
// kernels_q8_avx512vnni.cpp: fast math with AVX512-VNNI (only call when the CPU has it too).
void avx512vnni_matmul_rows_q8k(const WeightMatrix& w, const uint8_t* xq, size_t ldxq, int64_t B, float* y,
                                int64_t ldy, int64_t r0, int64_t r1);
bool avx512vnni_compiled();

}  // namespace nunchaku::engine
