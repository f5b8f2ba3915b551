// CPU dtype conversion for `load --dtype`: the CPU twin of cuda/convert.cu.
// Contract (both twins): round to nearest, ties to even; overflow goes to ±Inf;
// F16 subnormals are produced and read exactly; NaN stays NaN with its sign
// (the payload is not part of the contract: CUDA intrinsics canonicalise it).
// Supported pairs: BF16<->F16, F32->F16, F32->BF16, and any type to itself.
#pragma once

#include <cstdint>
#include <cstring>

#include "format/dtype.hpp"

namespace nunchaku {

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float f32_from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

uint16_t f32_to_f16(uint32_t f32bits);
uint16_t f32_to_bf16(uint32_t f32bits);
uint32_t f16_to_f32(uint16_t h);       // exact
inline uint32_t bf16_to_f32(uint16_t b) { return uint32_t(b) << 16; }  // exact
inline uint16_t bf16_to_f16(uint16_t b) { return f32_to_f16(bf16_to_f32(b)); }
inline uint16_t f16_to_bf16(uint16_t h) { return f32_to_bf16(f16_to_f32(h)); }

// True when `from` -> `to` is a supported pair (identity included).
bool conversion_supported(DType from, DType to);
// Element size in bytes of the pairs above (2 or 4); 0 for anything else.
uint32_t convert_elem_bytes(DType t);

// Converts `n` elements; src and dst must not overlap. Unaligned pointers are fine.
// Throws Error("load.unsupported_conversion", exit 2) for an unsupported pair.
void convert_cpu(DType from, DType to, const void* src, void* dst, uint64_t n);

}  // namespace nunchaku
