// Byte sizes on the command line and in output, and counts of things in output.
//   "16G" = "16GiB" = "16 GiB" = 16*2^30; "16GB" = 16*10^9 (as accelerate); "512M", "1.5T",
//   "4096B" (bytes), "0". Case-insensitive unit letters. A number without a unit is refused
//   (is "16" bytes or GiB?) except 0, which is 0 in every unit. Every size option goes
//   through parse_size_or_throw.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nunchaku {

// nullopt on anything malformed, negative, or past 2^64.
[[nodiscard]] std::optional<uint64_t> parse_size(std::string_view text);
// Same, but throws Error("usage.size" / "usage.size_unit", exit 2) naming the option,
// with the unit hint when the number has no unit.
uint64_t parse_size_or_throw(std::string_view text, std::string_view option);

// "13.48 GiB", "512.0 MiB", "100 B" (binary units, 2 decimals above KiB).
std::string format_bytes(uint64_t bytes);
// "6.74B", "124.4M", "260.1K", "512" parameter counts.
std::string format_count(uint64_t n);
// "1 tensor", "2 tensors", "0 tensors"; `many` for irregular plurals ("1 entry", "3 entries").
// The one place output says how many of something there are.
std::string plural(uint64_t n, std::string_view one, std::string_view many = {});

}  // namespace nunchaku
