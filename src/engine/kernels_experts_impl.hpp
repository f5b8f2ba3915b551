// Internal: the per-ISA expert kernels behind matmul_expert_rows (kernels_experts.cpp
// dispatches; kernels_experts_<isa>.cpp define them from kernels_experts_simd.hpp).
//
// Their contract, the same on every ISA and the scalar code, to the bit (NaN aside: its
// payload and sign may differ; NaN where the scalar code gives NaN):
// - input-major (F32, F16, BF16): y[b][r] = (((0 + x[b][0] * W[0][r]) + x[b][1] * W[1][r])
//   + ...): inputs in order, one rounding per multiply and per add (no FMA). Vectors span
//   output features, so each output's chain is the scalar one whatever the vector width.
// - MXFP4 (split scales or ggml blocks): per weight row, runs of kMxfp4Run values (the last
//   one shorter, whole 32-value blocks): 8 lanes, lane l += x[j] * v[j] for the run's
//   j = l (mod 8) in order (one rounding per multiply and per add), then the run's sum
//   ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)) added to y, which starts at 0. v[j]
//   is the exact product fp4(code) * 2^(scale - 127) (NaN for scale 255), or its negative
//   zero as +0, which changes no sum: a lane starts at +0 and never becomes -0.
// The files that hold these kernels are compiled with -ffp-contract=off (CMakeLists.txt), so
// no multiply and add is fused behind the code's back.
#pragma once

#include "engine/kernels.hpp"

namespace nunchaku::engine {

constexpr int64_t kMxfp4Run = 256;  // MXFP4 values per partial sum (a multiple of 32)
constexpr int64_t kInputMajorCols = 256;  // output features per pass over an input-major matrix

using ExpertRowsFn = void (*)(const WeightMatrix&, const float*, int64_t, int64_t, float*, int64_t, int64_t, int64_t);
struct ExpertKernelSet {
  ExpertRowsFn input_major_rows = nullptr;  // F32, F16, BF16 stored [cols][rows]
  ExpertRowsFn mxfp4_rows = nullptr;        // w.scales set: HF's split form; null: ggml's blocks
};
// Empty ({}) where the compiler could not build that file; only call one where active_isa()
// is that ISA or above.
extern const ExpertKernelSet kAvx2ExpertKernels;
extern const ExpertKernelSet kAvx512ExpertKernels;
// The ISA whose expert kernels matmul_expert_rows runs now: active_isa(), or Scalar under
// NUNCHAKU_EXPERT_KERNELS=scalar (tests: that the SIMD ones run at all; the bits cannot tell).
Isa expert_kernels_isa();

}  // namespace nunchaku::engine
