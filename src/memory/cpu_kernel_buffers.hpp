// The CPU kernels' buffer shapes that engine_memory() charges, defined once here, below the
// engine, so the kernels (engine/kernels.hpp, engine/kernels_simd.hpp) and the accounting
// read the same numbers. Only <cstdint>: the ISA-flagged kernel files include this, and
// they must not instantiate inline std code with AVX-512 flags.
#pragma once

#include <cstdint>

namespace nunchaku {

// From this many activation rows on, a matmul runs as the cache-blocked GEMM
// (engine::kMatmulGemmBatch); fewer rows read each weight row directly.
constexpr int64_t kCpuGemmMinRows = 16;

// The blocked GEMM over block-quantized weights dequantizes this many weight rows at a time
// into a per-thread f32 panel (rows x the matrix's columns), grown to the widest matrix the
// thread has run and kept until the thread ends.
constexpr int64_t kCpuGemmPanelRows = 32;

// Fast math (run --fast-math): a matmul's activation rows rounded to 8 bits for the K-quant
// kernels (engine/kernels_q8.hpp), per row of `cols` values (whole 256-value blocks): the
// codes, a float scale per block and int16 sums per 32 and per 16 codes, padded to 64 bytes.
constexpr uint64_t cpu_q8k_row_bytes(int64_t cols) {
  const uint64_t n = uint64_t(cols + 255) / 256 * 256;
  return (n + n / 256 * 4 + n / 32 * 2 + n / 16 * 2 + 63) / 64 * 64;
}
// ... and rounded to bf16 for the BF16 kernel (engine/kernels_fast_bf16.hpp): `cols`
// 16-bit values per row, padded to 64 bytes.
constexpr uint64_t cpu_bf16x_row_bytes(int64_t cols) { return (uint64_t(cols) * 2 + 63) / 64 * 64; }

}  // namespace nunchaku
