// nunchaku: one executable, one subcommand per file in cli/. This is the only
// place that catches errors: it prints one line and maps them to exit codes
// (0 ok, 1 internal, 2 bad input/usage, 3 OOM).
#include <algorithm>
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/help.hpp"
#include "cli/option_ranges.hpp"
#include "core/alloc.hpp"
#include "core/log.hpp"
#include "core/error.hpp"
#include "cli/version.hpp"
#include "core/units.hpp"

int main(int argc, char** argv) {
  CLI::App app{"nunchaku: inspect, size, plan, load and run LLM checkpoints on GPUs that are too small.", "nunchaku"};
  nunchaku::cli::use_help_format(app);
  app.require_subcommand(0, 1);
  app.footer(
      "Run `nunchaku help COMMAND` (or `nunchaku COMMAND --help`) for its options.\n"
      "Exit codes: 0 ok, 1 internal failure, 2 bad input or usage, 3 predicted or actual OOM, 130/143 interrupted.\n"
      "Examples:\n"
      "  nunchaku inspect model/\n"
      "  nunchaku estimate model/ --vram 16G --context 8192\n"
      "  nunchaku plan model/ --vram 24G,24G --format accelerate -o device_map.json\n"
      "  printf 'Hello\\n' | nunchaku run model/ --max-tokens 32");
  bool version = false;
  bool version_json = false;
  app.add_flag("--version", version,
               "Print the version, git commit, build type and compiler, whether CUDA was compiled in (toolkit version) "
               "and the devices found, and the CPU engine's instruction set")
      ->group(nunchaku::cli::kOutput);
  app.add_flag("--json", version_json, "With --version: print it as one JSON document")->group(nunchaku::cli::kOutput);

  // In workflow order: look, size, plan, load, run (and what it feeds: tokenize), convert.
  nunchaku::cli::Action action;
  nunchaku::cli::add_inspect(app, action);
  nunchaku::cli::add_estimate(app, action);
  nunchaku::cli::add_plan(app, action);
  nunchaku::cli::add_load(app, action);
  nunchaku::cli::add_run(app, action);
  nunchaku::cli::add_tokenize(app, action);
  nunchaku::cli::add_convert(app, action);
  nunchaku::cli::add_trace(app, action);
  nunchaku::cli::add_completion(app, action);
  nunchaku::cli::apply_option_ranges(app);
  nunchaku::cli::finish_help(&app);

  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    // `nunchaku help [COMMAND]` is `nunchaku [COMMAND] --help`.
    if (!args.empty() && args.front() == "help") {
      args.erase(args.begin());
      const auto names = nunchaku::cli::command_names(app);
      if (!args.empty() && std::find(names.begin(), names.end(), args.front()) == names.end())
        throw nunchaku::cli::unknown_command(app, args.front());
      args.resize(std::min<size_t>(args.size(), 1));
      args.push_back("--help");
    }
    std::reverse(args.begin(), args.end());  // CLI11 takes them last first
    try {
      app.parse(args);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      throw nunchaku::cli::usage_error(app, e);
    }
    nunchaku::log::configure(nunchaku::cli::verbosity());
    if (version) {
      nunchaku::cli::print_version(version_json);
      return 0;
    }
    if (!action) {
      std::fputs(app.help().c_str(), stderr);
      return 2;
    }
    return action();
  } catch (const nunchaku::Error& e) {
    std::fflush(stdout);
    fmt::print(stderr, "nunchaku: error: {}\n", e.what());
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    // An allocation the system refused is an actual OOM (exit 3), not a bug; the sizes
    // that come from input are checked before they are allocated, so what is left is
    // the machine's memory.
    std::fflush(stdout);
    const uint64_t wanted = nunchaku::failed_allocation_bytes();
    fmt::print(stderr,
               "nunchaku: error: out of host memory: an allocation{} was refused (hint: lower --context, "
               "--batch-size or --cpu-ram; `nunchaku estimate` shows what the run needs)\n",
               wanted ? " of " + nunchaku::format_bytes(wanted) : std::string());
    return 3;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "nunchaku: internal error: {}\n", e.what());
    return 1;
  }
}
