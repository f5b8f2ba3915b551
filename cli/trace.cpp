// nunchaku trace FILE --svg OUT: a trace written by `load --trace` or `run --trace` as a
// static SVG timeline (core/timeline_picture.hpp), for CI logs and READMEs. Thin adapter:
// file -> JSON -> timeline_svg -> the one output writer.
#include <memory>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/help.hpp"
#include "core/error.hpp"
#include "core/file.hpp"
#include "core/timeline_picture.hpp"
#include "io/atomic_output.hpp"

namespace nunchaku::cli {
namespace {

struct TraceCliOptions {
  std::string path, svg;
};

nlohmann::json read_trace(const std::string& path) {
  File f = File::open_read_only(path);
  if (f.size() > (uint64_t(4) << 30))
    throw Error("trace.too_large", fmt::format("{} is {} bytes; a trace over 4 GiB is not read", path, f.size()), {.file = path});
  std::string text(f.size(), '\0');
  f.read_at(0, text.data(), text.size());
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error("trace.json", fmt::format("not JSON: {}", e.what()), {.file = path, .offset = e.byte ? e.byte - 1 : 0});
  } catch (const nlohmann::json::exception&) {  // out_of_range 406: a number beyond double range
    throw Error("trace.json", "not a trace: a number beyond the range of a double", {.file = path});
  }
}

int run_trace(const TraceCliOptions& o) {
  note_input_path(o.path);
  check_not_input(o.svg);
  const std::string svg = timeline_svg(read_trace(o.path), o.path);
  write_file_atomically(o.svg, svg);
  fmt::print(stderr, "wrote {} (svg)\n", o.svg);
  return 0;
}

}  // namespace

void add_trace(CLI::App& app, Action& action) {
  auto o = std::make_shared<TraceCliOptions>();
  auto* cmd = app.add_subcommand("trace", "Draw a trace of load --trace / run --trace as an SVG timeline with peaks and predictions");
  cmd->footer(
      "Lanes: the phases of each thread; panels: each sampled counter, its peak marked, its prediction dashed.\n"
      "Exit codes: 0 written, 2 unreadable or malformed trace, or bad usage.\n"
      "Example:\n"
      "  nunchaku run model.gguf --trace run.json < prompts.txt && nunchaku trace run.json --svg run.svg");
  cmd->add_option("FILE", o->path, "Trace file (Chrome Trace Event JSON written by nunchaku)")->required();
  cmd->add_option("--svg", o->svg, "Write the timeline as SVG to this file")->required()->group(kOutput);
  finish_help(cmd);
  cmd->callback([o, &action] { action = [o] { return run_trace(*o); }; });
}

}  // namespace nunchaku::cli
