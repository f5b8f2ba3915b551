// Element conversion for `convert`: any float or ggml-quantized input to F32, and F32 to
// the output types (F32, F16, BF16, Q8_0). Rounding is to nearest, ties to even (the
// scalar functions of io/convert.hpp); dequantization gives the values gguf-py's
// dequantize gives (float32 arithmetic in the same order); Q8_0 is ggml's reference
// quantizer (quantize_row_q8_0_ref: d = amax/127, q = roundf(x * (1/d)), d stored as F16).
#pragma once

#include <cstdint>

#include "format/dtype.hpp"

namespace nunchaku::convert {

// Input types to_f32 accepts: F64, F32, F16, BF16 and the quantized types below.
bool can_read_as_float(DType t);
// Output types from_f32 writes.
bool can_write_from_float(DType t);

// `n` elements of `from` (n a multiple of its block size) into f32 values.
void to_f32(DType from, const uint8_t* src, float* dst, uint64_t n);
// `n` f32 values (n a multiple of the block size of `to`) into `to`.
void from_f32(DType to, const float* src, uint8_t* dst, uint64_t n);

// One ggml Q8_0 block (32 values -> 34 bytes) as quantize_row_q8_0_ref writes it.
void quantize_q8_0_block(const float* x, uint8_t* out);

}  // namespace nunchaku::convert
