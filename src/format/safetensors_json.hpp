// Checks run on untrusted JSON text before it reaches the JSON parser
// (safetensors headers, shard index files).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/text.hpp"  // first_invalid_utf8, for the same callers

namespace nunchaku::detail {

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
