// The CLI's face: help text (sections, placeholders instead of CLI11's type tags, the
// help flag last) and parse errors turned into `nunchaku: error: ... (hint: ...)` with
// "did you mean" for options and subcommands.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/error.hpp"

namespace nunchaku::cli {

// Help sections, in the order a reader wants them.
inline constexpr const char* kInput = "Input";
inline constexpr const char* kHardware = "Devices";
inline constexpr const char* kWorkload = "Workload";
inline constexpr const char* kInference = "Inference";
inline constexpr const char* kTraining = "Training";
inline constexpr const char* kQuantization = "Quantization";
inline constexpr const char* kPlanning = "Planning";
inline constexpr const char* kOutput = "Output";
inline constexpr const char* kPlacement = "Placement";
inline constexpr const char* kLoading = "Loading";
inline constexpr const char* kSampling = "Sampling";
inline constexpr const char* kConversion = "Conversion";

// Columns every table, help line and progress line written to `fd` fits in: the terminal's
// width (TIOCGWINSZ), else $COLUMNS when it is a number >= 40, else 80 on a terminal; kNoWrap
// for a pipe or file without $COLUMNS (nothing is wrapped or cut to a width there).
inline constexpr size_t kNoWrap = size_t(1) << 16;
size_t output_width(int fd = 1);

// `text` laid out as help prose in `width` columns: lines that start with a space (examples,
// lists) are kept as they are (wrapped under their own indent + 4 when wider); the other
// lines are joined into paragraphs, a paragraph ending at an empty line, an indented line or
// a line that starts with a label ("Exit codes: ..."), and each paragraph is wrapped.
std::string reflow(const std::string& text, size_t width);

// `text` broken at spaces into lines of at most `width` columns, each line after the first
// prefixed with `indent` spaces (the caller prints the first line's own prefix, `indent` wide).
std::string wrap(const std::string& text, size_t width, size_t indent = 0);

// The formatter for the app and every subcommand added after it (set it first).
void use_help_format(CLI::App& app);
// Called last by each add_*(): adds -v/--verbose (counted into verbosity()) and moves
// -h,--help to the end of the Output section.
void finish_help(CLI::App* cmd);
// How many times -v was given, anywhere on the command line.
int& verbosity();

// The candidate closest to `word` by edit distance (a swap of neighbours counts once),
// or "" when none is close enough to be what was meant.
std::string closest(std::string_view word, const std::vector<std::string>& candidates);

// The subcommands' names, in the order help lists them.
std::vector<std::string> command_names(const CLI::App& app);
// "unknown command 'inspec'" (hint: did you mean inspect?).
Error unknown_command(const CLI::App& app, const std::string& word);

// A CLI11 parse failure as the Error main prints (exit 2), naming the subcommand and,
// for an unknown option or subcommand, the closest known one.
Error usage_error(const CLI::App& app, const CLI::ParseError& e);

}  // namespace nunchaku::cli
