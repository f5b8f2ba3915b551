#include "cli/option_ranges.hpp"

#include <charconv>
#include <string>

#include <fmt/format.h>

namespace nunchaku::cli {

std::span<const OptionRange> option_ranges() {
  static constexpr OptionRange table[] = {
      {"--batch", 1, int64_t{1} << 24},          // estimate/plan: sequences per pass
      {"--batch-size", 1, int64_t{1} << 24},     // run
      {"--context", 1, int64_t{1} << 31},        // tokens per sequence
      {"--prefill-chunk", 1, int64_t{1} << 31},  // tokens per prefill pass
      {"--gpus", 1, 65536},
      {"--nodes", 1, 4096},
      {"--threads", 1, 65536},  // more than the hardware is capped with a warning
      {"--max-pending", 1, int64_t{1} << 30},
      {"--lora-rank", 1, 65536},
      {"--zero", 0, 3},
  };
  return table;
}

namespace {

CLI::Validator range_check(const OptionRange& r) {
  return CLI::Validator(
      [r](std::string& s) -> std::string {
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || end != s.data() + s.size()) return "";  // the conversion words that error
        if (v >= r.lo && v <= r.hi) return "";
        return fmt::format("{} is out of range {}..{}", s, r.lo, r.hi);
      },
      "", "range");
}

}  // namespace

void apply_option_ranges(CLI::App& app) {
  for (CLI::App* cmd : app.get_subcommands({}))
    for (const OptionRange& r : option_ranges())
      if (CLI::Option* opt = cmd->get_option_no_throw(r.flag)) opt->check(range_check(r));
}

}  // namespace nunchaku::cli
