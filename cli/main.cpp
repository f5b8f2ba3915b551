// nunchaku: one executable, one subcommand per file in cli/. This is the only
// place that catches errors: it prints one line and maps them to exit codes
// (0 ok, 1 internal, 2 bad input/usage, 3 OOM).
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/help.hpp"
#include "cli/option_ranges.hpp"
#include "core/alloc.hpp"
#include "core/log.hpp"
#include "core/error.hpp"
#include "cli/version.hpp"
#include "core/units.hpp"

namespace {

// "cannot write stdout: <OS message>": exit 2 for a closed stdout (`>&-`, as run's check
// before it starts), 1 for every other failure (a full disk, EIO, EFBIG).
int stdout_failed(int err) {
  fmt::print(stderr, "nunchaku: error: cannot write stdout: {}\n", std::strerror(err ? err : EIO));
  return err == EBADF ? 2 : 1;
}

// Every command's output is flushed and closed here and the result checked, so an output
// too short to fill stdio's buffer (a --version, a device map) that the disk refused is
// never exit 0. A closed stdout that was never written to is not an error.
int finish_stdout(int rc) {
  errno = 0;
  const bool failed = std::fflush(stdout) != 0 || std::ferror(stdout);
  int flush_err = errno;
  // An earlier write failed (an output larger than stdio's buffer) and later calls left errno
  // 0: a closed stdout still says so.
  if (failed && flush_err == 0 && ::fcntl(STDOUT_FILENO, F_GETFD) == -1) flush_err = errno;
  if (failed) return rc != 0 ? rc : stdout_failed(flush_err);
  if (::close(STDOUT_FILENO) != 0 && errno != EBADF) return rc != 0 ? rc : stdout_failed(errno);
  return rc;
}

// A large output fails inside fmt::print (std::system_error) while stdout's error flag is set.
bool stdout_broke() { return std::ferror(stdout) != 0; }

// The soft limit on open files raised to the hard one: a checkpoint of many shards is opened
// whole (a shell's default soft limit is 1024, the hard one usually far higher).
void raise_open_file_limit() {
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
}

// stdout into a file or a device (not a pipe or a terminal, whose readers see output as it
// comes) gets a buffer larger than any short output, so a refused write happens at the
// final fflush with errno still the OS's reason instead of in an earlier write whose errno
// later calls overwrote (a --help or a device map on a full disk said "Input/output error").
void buffer_file_stdout() {
  struct stat st {};
  if (::fstat(STDOUT_FILENO, &st) != 0 || ::isatty(STDOUT_FILENO)) return;
  if (!S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode)) return;
  static char buffer[1 << 16];
  std::setvbuf(stdout, buffer, _IOFBF, sizeof buffer);
}

int run_main(int argc, char** argv);

}  // namespace

int main(int argc, char** argv) {
  // A write past `ulimit -f` fails with EFBIG and is reported, instead of SIGXFSZ killing
  // the process with a temporary left behind (core/interrupt.hpp does the same per guard).
  ::signal(SIGXFSZ, SIG_IGN);
  raise_open_file_limit();
  buffer_file_stdout();
  return finish_stdout(run_main(argc, argv));
}

namespace {

int run_main(int argc, char** argv) {
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

  // In workflow order: look, size, plan, load, run (and how fast: bench; what it feeds: tokenize), convert.
  nunchaku::cli::Action action;
  nunchaku::cli::add_inspect(app, action);
  nunchaku::cli::add_estimate(app, action);
  nunchaku::cli::add_plan(app, action);
  nunchaku::cli::add_load(app, action);
  nunchaku::cli::add_run(app, action);
  nunchaku::cli::add_bench(app, action);
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
  } catch (const std::system_error& e) {
    if (stdout_broke()) return stdout_failed(e.code().value());
    std::fflush(stdout);
    fmt::print(stderr, "nunchaku: internal error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "nunchaku: internal error: {}\n", e.what());
    return 1;
  }
}

}  // namespace
