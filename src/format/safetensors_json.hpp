// Checks run on untrusted JSON text before it reaches the JSON parser
// (safetensors headers, shard index files).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace nunchaku::detail {

// Strict UTF-8 (no overlongs, no surrogates, <= U+10FFFF), as Rust's
// str::from_utf8 that huggingface/safetensors applies to the header.
// Returns the index of the first invalid byte, or npos.
inline size_t first_invalid_utf8(const uint8_t* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    const uint8_t c = s[i];
    if (c < 0x80) { ++i; continue; }
    size_t len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    else return i;
    if (len > n - i) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string::npos;
}

// Index of the first '{' or '[' (outside strings) nesting deeper than
// max_depth, or npos. Headers and indexes are flat (object, entry, array);
// the limit keeps hostile nesting away from recursive JSON code (dump()).
inline size_t too_deep_at(const uint8_t* s, size_t n, int max_depth) {
  int depth = 0;
  bool in_str = false;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t c = s[i];
    if (in_str) {
      if (c == '\\') ++i;
      else if (c == '"') in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return i;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return std::string::npos;
}

}  // namespace nunchaku::detail
