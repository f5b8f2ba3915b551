#include "core/units.hpp"

#include <cctype>
#include <cmath>
#include <fmt/format.h>

#include "core/error.hpp"

namespace nunchaku {

std::optional<uint64_t> parse_size(std::string_view t) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
  };
  t = trim(t);
  size_t i = 0;
  bool dot = false;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || (t[i] == '.' && !dot))) {
    if (t[i] == '.') dot = true;
    ++i;
  }
  if (i == 0) return std::nullopt;
  std::string num(t.substr(0, i));
  if (num == ".") return std::nullopt;
  std::string unit;
  for (char c : trim(t.substr(i))) unit += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  long double mult = 0;
  static const struct { const char* u; long double m; } kUnits[] = {
      {"", 1}, {"B", 1},  // "" only for 0 (below)
      {"K", 1024.0L}, {"KI", 1024.0L}, {"KIB", 1024.0L}, {"KB", 1e3L},
      {"M", 1048576.0L}, {"MI", 1048576.0L}, {"MIB", 1048576.0L}, {"MB", 1e6L},
      {"G", 1073741824.0L}, {"GI", 1073741824.0L}, {"GIB", 1073741824.0L}, {"GB", 1e9L},
      {"T", 1099511627776.0L}, {"TI", 1099511627776.0L}, {"TIB", 1099511627776.0L}, {"TB", 1e12L},
  };
  for (const auto& u : kUnits)
    if (unit == u.u) mult = u.m;
  if (mult == 0) return std::nullopt;
  long double v = std::strtold(num.c_str(), nullptr) * mult;
  if (unit.empty() && v != 0) return std::nullopt;  // "16": bytes or GiB? Only 0 needs no unit.
  if (!(v >= 0) || v >= 18446744073709551615.0L) return std::nullopt;
  return static_cast<uint64_t>(std::llround(v));
}

namespace {
// "16", "1.5": digits and a dot, nothing else.
bool is_unitless_number(std::string_view t) {
  if (t.empty()) return false;
  for (char c : t)
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.') return false;
  return true;
}
}  // namespace

uint64_t parse_size_or_throw(std::string_view text, std::string_view option) {
  if (auto v = parse_size(text)) return *v;
  if (is_unitless_number(text))
    throw Error("usage.size_unit", fmt::format("{}: '{}' has no unit", option, text),
                {.hint = fmt::format("{0}G = {0} GiB, {0}GB = {0}*10^9 bytes, {0}M = {0} MiB, {0}B = bytes", text)});
  throw Error("usage.size", fmt::format("{}: cannot read '{}' as a size", option, text),
              {.hint = "use e.g. 16G (=16 GiB), 16GiB, 16GB (=16*10^9), 512M"});
}

std::string format_bytes(uint64_t b) {
  static const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (b < 1024) return fmt::format("{} B", b);
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 5) { v /= 1024; ++u; }
  return fmt::format("{:.2f} {}", v, kNames[u]);
}

std::string format_count(uint64_t n) {
  if (n < 1000) return std::to_string(n);
  double v = static_cast<double>(n);
  if (n < 1000000) return fmt::format("{:.1f}K", v / 1e3);
  if (n < 1000000000) return fmt::format("{:.1f}M", v / 1e6);
  if (n < 1000000000000ULL) return fmt::format("{:.2f}B", v / 1e9);
  return fmt::format("{:.2f}T", v / 1e12);
}

std::string plural(uint64_t n, std::string_view one, std::string_view many) {
  if (n == 1) return "1 " + std::string(one);
  return std::to_string(n) + " " + (many.empty() ? std::string(one) + "s" : std::string(many));
}

}  // namespace nunchaku
