// IEEE binary16 and bfloat16 conversions of the emulator's __half / __nv_bfloat16, written
// here on purpose (not src/io/convert.cpp's): tests/test_cuda.cpp compares the conversion
// kernel against that CPU twin, so the two must stay independent implementations.
#include <cstdint>
#include <cstring>

#include "cuda/emu/cuda_emu.hpp"

namespace nk_emu {
namespace {
uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
// x >> shift rounded to nearest, ties to even (shift in 1..31).
uint32_t shift_rne(uint32_t x, int shift) {
  const uint32_t q = x >> shift, rem = x & ((1u << shift) - 1), half = 1u << (shift - 1);
  return q + ((rem > half || (rem == half && (q & 1))) ? 1 : 0);
}
}  // namespace

uint16_t float_to_half_rn(float f) {
  const uint32_t x = bits(f), a = x & 0x7fffffffu;
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  if (a > 0x7f800000u) return uint16_t(sign | 0x7fffu);  // NaN (canonical, as the device's)
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 (Inf included): Inf
  if (a >= 0x38800000u) {                                  // normal half: rebias, round 13 bits
    const uint32_t r = shift_rne(a, 13) - (112u << 10);
    return uint16_t(sign | r);
  }
  // Half subnormal (or zero): the value in units of 2^-24 is m * 2^(e - 126).
  const int e = int(a >> 23);
  if (e == 0) return sign;  // float zero or subnormal: far below 2^-25
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const int shift = 126 - e;  // >= 14 here
  if (shift > 31) return sign;
  return uint16_t(sign | shift_rne(m, shift));
}

float half_to_float(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  float v;
  if (e == 0) v = std::ldexp(float(m), -24);
  else if (e == 31) v = m ? __uint_as_float(0x7fc00000u) : __uint_as_float(0x7f800000u);
  else v = std::ldexp(float(m + 1024), e - 25);
  return (h & 0x8000) ? -v : v;
}

uint16_t float_to_bf16_rn(float f) {
  const uint32_t x = bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t(((x >> 16) & 0x8000u) | 0x7fffu);
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace nk_emu
