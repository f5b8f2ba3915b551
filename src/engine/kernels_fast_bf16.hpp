// Fast math for BF16 weights (opt-in: `run --fast-math`, with the K-quant path of
// kernels_q8.hpp): the activations are rounded to bf16 once per matmul, and a weight row
// meets them in `vdpbf16ps` (AVX512_BF16), llama.cpp's arithmetic for BF16 weights on such
// CPUs: twice the multiply-adds per instruction of the exact path's fp32 FMAs, no
// conversion of the weights. Only where the CPU has AVX512_BF16 and the AVX-512 kernels
// are active; elsewhere BF16 weights stay exact (fast_math_path says which).
//
// The arithmetic (the instruction's, spelled out by the scalar twin, bit for bit; checked
// against the hardware by tests/test_fast_bf16.cpp), per (weight row w, activation row x),
// cols a multiple of 32: 16 float lanes acc[l] = +0; per step j (columns 32j .. 32j+31)
// and lane l, with c = 32j + 2l, daz() reading a subnormal input as zero of its sign and
// ftz() writing a subnormal result as zero of its sign:
//   acc[l] = ftz(fma(daz(w[c+1]), daz(x[c+1]), daz(acc[l])))   (the odd column first)
//   acc[l] = ftz(fma(daz(w[c]),   daz(x[c]),   acc[l]))
// (a product of two bf16 values is exact in fp32, so each step rounds once); the result is
// the lanes summed as s8[i] = acc[i] + acc[i+8], s4[i] = s8[i] + s8[i+4], s2[i] = s4[i] +
// s4[i+2], s2[0] + s2[1]. The same bits at every batch size and for any row range.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/kernels.hpp"

namespace nunchaku::engine {

// x[0..n) rounded to bf16, to nearest with ties to even (NaN stays a quiet NaN of its sign;
// subnormals are kept: the dot product reads them as zero).
void round_bf16_row(const float* x, int64_t n, uint16_t* out);

// Built in, the CPU has AVX512_BF16 and the AVX-512 kernels are active.
bool fast_bf16_available();

// y[b*ldy + r] = W[r] . x[b] for r in [r0, r1), b in [0, B): W BF16 with cols % 32 == 0,
// activation rows ldx elements apart (round_bf16_row's). The AVX512_BF16 kernel where
// fast_bf16_available(), else the scalar twin (tests).
void matmul_rows_bf16x(const WeightMatrix& w, const uint16_t* x, int64_t ldx, int64_t B, float* y, int64_t ldy,
                       int64_t r0, int64_t r1);
// The scalar twin (the arithmetic above, lane by lane), for tests.
void scalar_matmul_rows_bf16x(const WeightMatrix& w, const uint16_t* x, int64_t ldx, int64_t B, float* y, int64_t ldy,
                              int64_t r0, int64_t r1);

// kernels_fast_bf16_avx512bf16.cpp (only call where fast_bf16_available()).
void avx512bf16_matmul_rows_bf16x(const WeightMatrix& w, const uint16_t* x, int64_t ldx, int64_t B, float* y,
                                  int64_t ldy, int64_t r0, int64_t r1);
bool avx512bf16_compiled();

}  // namespace nunchaku::engine
