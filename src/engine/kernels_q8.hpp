// Fast math (opt-in: `run --fast-math`, EngineOptions::fast_math): matmuls over K-quant
// weights with the activations rounded to 8 bits, llama.cpp's arithmetic for them. Each
// activation row is quantized once per matmul into Q8_K blocks (ggml's quantize_row_q8_K:
// per 256 values a float scale d = max / -127 of the value of largest magnitude, codes
// round(x / d) clamped to 127); a Q4_K weight row then meets it in exact integer dot
// products per sub-block (unsigned 4-bit codes times signed 8-bit codes, times the 6-bit
// scale), and only the per-block scales are floats. The default path (kernels.hpp) is
// exact fp32 over the dequantized weights; this one trades that for ~2x fewer cycles per
// weight (docs/engine.md, "Fast math", has the measured accuracy cost).
//
// The arithmetic, identical on every ISA (scalar, AVX2 and AVX-512 give the same bits) and
// every batch size: per (weight row, activation row) 8 float lanes acc[l], zero; per block
// k, with d, dmin the weight block's f16 scales, sc[j], m[j] its sub-blocks' 6-bit scales
// and mins, q4 its codes, q8 / dx / bs the activation block's codes, scale and 32-code sums:
//   iv[l] = sum_j sc[j] * sum_{i<4} q4[32j + 4l + i] * q8[32j + 4l + i]   (exact int32)
//   mv[l] = m[2l] * bs[2l] + m[2l+1] * bs[2l+1] for l < 4, else 0          (exact int32)
//   acc[l] = fma(dx * d, float(iv[l]), acc[l]);  acc[l] = fma(-(dx * dmin), float(mv[l]), acc[l])
// and the result is (acc[l] + acc[l+4]) summed as ((0 + 2) + (1 + 3)).
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/kernels.hpp"
#include "memory/cpu_kernel_buffers.hpp"

namespace nunchaku::engine {

// Weights the fast-math matmul reads (Q4_K); others take the exact path.
bool fast_math_supports(DType t);

// One activation row of `cols` values (a multiple of 256) as Q8_K, in cpu_q8k_row_bytes(cols)
// bytes at a 64-byte boundary: codes [cols] int8, then d [cols/256] float, then bs [cols/32]
// int16 (the sums of each 32 codes).
struct Q8KRow {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const int16_t* bs = nullptr;
};
inline Q8KRow q8k_row(const uint8_t* base, int64_t cols) {
  return {reinterpret_cast<const int8_t*>(base), reinterpret_cast<const float*>(base + cols),
          reinterpret_cast<const int16_t*>(base + cols + cols / 256 * 4)};
}
void quantize_q8k(const float* x, int64_t cols, uint8_t* out);

// y[b*ldy + r] = W[r] . xq[b] for r in [r0, r1), b in [0, B), activation rows ldxq bytes
// apart (cpu_q8k_row_bytes(w.cols)); w.dtype must be one fast_math_supports.
void matmul_rows_q8k(const WeightMatrix& w, const uint8_t* xq, size_t ldxq, int64_t B, float* y, int64_t ldy,
                     int64_t r0, int64_t r1);

}  // namespace nunchaku::engine
