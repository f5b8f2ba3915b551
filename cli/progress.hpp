// The one progress line of the CLI (load, convert): bytes done of total, rate, and the
// time left, redrawn in place on stderr. Callers decide when (a TTY, not --quiet) and how
// often; a final "\n" ends the line.
#pragma once

#include <cstdint>
#include <string_view>

#include <fmt/format.h>

#include "core/units.hpp"

namespace nunchaku::cli {

inline void print_progress(std::string_view what, uint64_t done, uint64_t total, double seconds) {
  const double rate = seconds > 0 ? double(done) / seconds : 0;
  fmt::print(stderr, "\r{} {} / {}  {:.2f} GB/s  ETA {:.0f} s   ", what, format_bytes(done), format_bytes(total),
             rate / 1e9, rate > 0 ? double(total - done) / rate : 0.0);
}

}  // namespace nunchaku::cli
