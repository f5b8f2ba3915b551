// libFuzzer target for the escaping function and the UTF-8 sanitizer (core/text.hpp):
// whatever the bytes, printable() is valid UTF-8 with no control byte, within its cap
// (+ "..."), and escaping it again changes nothing; utf8_replace_invalid() is valid UTF-8 and
// keeps valid input as it is.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/text.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string s(reinterpret_cast<const char*>(data), size);
  const size_t cap = size ? data[0] % 64 + 8 : 200;
  const std::string p = nunchaku::printable(s, cap);
  if (nunchaku::first_invalid_utf8(p) != std::string::npos) __builtin_trap();
  if (p.size() > cap + 3) __builtin_trap();
  for (unsigned char c : p)
    if (c < 0x20 || c == 0x7F) __builtin_trap();
  const std::string whole = nunchaku::printable(s, size * 12 + 16);
  if (nunchaku::printable(whole, whole.size() + 16) != whole) __builtin_trap();
  const std::string clean = nunchaku::utf8_replace_invalid(s);
  if (nunchaku::first_invalid_utf8(clean) != std::string::npos) __builtin_trap();
  if (nunchaku::first_invalid_utf8(s) == std::string::npos && clean != s) __builtin_trap();
  return 0;
}
