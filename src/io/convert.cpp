#include "io/convert.hpp"

#include <string>

#include "core/error.hpp"

namespace nunchaku {

uint16_t f32_to_f16(uint32_t x) {
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));  // quiet NaN
  if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 rounds past 65504: Inf
  if (ax < 0x38800000u) {                                   // below 2^-14: F16 subnormal or zero
    if (ax <= 0x33000000u) return uint16_t(sign);           // <= 2^-25: ties to even (0)
    const uint32_t e = ax >> 23;                            // 102..112
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;                         // result in units of 2^-24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;        // may carry into the smallest normal
    return uint16_t(sign | r);
  }
  uint32_t r = (ax >> 13) - (112u << 10);                   // rebias exponent 127 -> 15
  const uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) ++r;    // a carry into the exponent is right
  return uint16_t(sign | r);
}

uint16_t f32_to_bf16(uint32_t x) {
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);  // ties to even; the max finite rounds to Inf as it should
  return uint16_t(x >> 16);
}

uint32_t f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return sign | 0x7f800000u | (m << 13);
  if (e == 0) {
    if (m == 0) return sign;
    // subnormal: normalise so the leading 1 becomes implicit
    e = 113;
    while (!(m & 0x400u)) { m <<= 1; --e; }
    return sign | (e << 23) | ((m & 0x3ffu) << 13);
  }
  return sign | ((e + 112) << 23) | (m << 13);
}

uint32_t convert_elem_bytes(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16:
    case DType::BF16: return 2;
    default: return 0;
  }
}

bool conversion_supported(DType from, DType to) {
  if (from == to) return true;
  if (convert_elem_bytes(from) == 0 || convert_elem_bytes(to) == 0) return false;
  return to != DType::F32;  // widening to F32 is not a load-time conversion
}

namespace {
template <class F>
void map16(const uint8_t* s, uint8_t* d, uint64_t n, F f) {
  for (uint64_t i = 0; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, s + 2 * i, 2);
    v = f(v);
    std::memcpy(d + 2 * i, &v, 2);
  }
}
template <class F>
void map32to16(const uint8_t* s, uint8_t* d, uint64_t n, F f) {
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t v;
    std::memcpy(&v, s + 4 * i, 4);
    uint16_t o = f(v);
    std::memcpy(d + 2 * i, &o, 2);
  }
}
}  // namespace

void convert_cpu(DType from, DType to, const void* src, void* dst, uint64_t n) {
  auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  if (!conversion_supported(from, to))
    throw Error("load.unsupported_conversion",
                std::string("cannot convert ") + std::string(dtype_name(from)) + " to " + std::string(dtype_name(to)),
                {.hint = "--dtype converts F32/F16/BF16 tensors to fp16 or bf16"});
  if (from == to) {
    std::memcpy(d, s, n * convert_elem_bytes(from));
  } else if (from == DType::BF16 && to == DType::F16) {
    map16(s, d, n, bf16_to_f16);
  } else if (from == DType::F16 && to == DType::BF16) {
    map16(s, d, n, f16_to_bf16);
  } else if (from == DType::F32 && to == DType::F16) {
    map32to16(s, d, n, f32_to_f16);
  } else {
    map32to16(s, d, n, f32_to_bf16);
  }
}

}  // namespace nunchaku
