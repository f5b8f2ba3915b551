// Overflow-checked arithmetic for sizes read from untrusted files.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace nunchaku {

[[nodiscard]] inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

[[nodiscard]] inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Saturating: UINT64_MAX on overflow (a size no budget can hold, so "does not fit" stays true).
[[nodiscard]] inline uint64_t sat_mul(uint64_t a, uint64_t b) { return checked_mul(a, b).value_or(UINT64_MAX); }
[[nodiscard]] inline uint64_t sat_add(uint64_t a, uint64_t b) { return checked_add(a, b).value_or(UINT64_MAX); }
template <class... T>
[[nodiscard]] inline uint64_t sat_prod(uint64_t a, T... rest) {
  ((a = sat_mul(a, static_cast<uint64_t>(rest))), ...);
  return a;
}

// Product of dims; nullopt on overflow or a negative dim. Empty shape = scalar = 1.
[[nodiscard]] inline std::optional<uint64_t> checked_numel(std::span<const int64_t> shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    auto m = checked_mul(n, static_cast<uint64_t>(d));
    if (!m) return std::nullopt;
    n = *m;
  }
  return n;
}

}  // namespace nunchaku
