// The range of every integer option, one table for all subcommands, checked when the
// command line is parsed: a value outside is exit 2 naming the flag. A flag left out keeps
// its default (0 in the options structs often means "not given"). Sampling flags are
// checked against the request fields' table instead (batch/requests.hpp, param_ranges).
#pragma once

#include <cstdint>
#include <span>

#include <CLI/CLI.hpp>

namespace nunchaku::cli {

struct OptionRange {
  const char* flag;
  int64_t lo, hi;
};

std::span<const OptionRange> option_ranges();

// Adds the check to each option of `app`'s subcommands that the table names.
void apply_option_ranges(CLI::App& app);

}  // namespace nunchaku::cli
