// nunchaku: one executable, one subcommand per file in cli/. This is the only
// place that catches errors: it prints one line and maps them to exit codes
// (0 ok, 1 internal, 2 bad input/usage, 3 OOM).
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "cuda/device_info.hpp"
#include "core/units.hpp"

namespace {

void print_version() {
  fmt::print("nunchaku {}\n", NUNCHAKU_VERSION);
  fmt::print("CUDA: {}\n", nunchaku::cuda::compiled_in() ? "compiled in" : "not compiled in");
  std::string why;
  auto devs = nunchaku::cuda::list_devices(&why);
  if (devs.empty()) {
    fmt::print("CUDA devices: none ({})\n", why);
    return;
  }
  for (const auto& d : devs)
    fmt::print("CUDA device {}: {} (sm_{}{}), {} total, {} free\n", d.index, d.name, d.cc_major, d.cc_minor,
               nunchaku::format_bytes(d.total_bytes), nunchaku::format_bytes(d.free_bytes));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nunchaku: inspect, size, plan, load and run LLM checkpoints on GPUs that are too small.\n"
               "Exit codes: 0 ok, 1 internal failure, 2 bad input or usage, 3 predicted or actual OOM."};
  app.require_subcommand(0, 1);
  bool version = false;
  app.add_flag("--version", version, "Print the version, whether CUDA was compiled in, and the CUDA devices found");

  nunchaku::cli::Action action;
  nunchaku::cli::add_inspect(app, action);
  nunchaku::cli::add_load(app, action);
  nunchaku::cli::add_estimate(app, action);
  nunchaku::cli::add_plan(app, action);
  nunchaku::cli::add_run(app, action);
  nunchaku::cli::add_convert(app, action);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  if (version) {
    print_version();
    return 0;
  }
  if (!action) {
    std::fputs(app.help().c_str(), stdout);
    return 2;
  }
  try {
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
    fmt::print(stderr,
               "nunchaku: error: out of host memory: an allocation was refused (hint: lower --context, "
               "--batch-size or --cpu-ram; `nunchaku estimate` shows what the run needs)\n");
    return 3;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "nunchaku: internal error: {}\n", e.what());
    return 1;
  }
}
