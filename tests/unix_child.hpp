// The built nunchaku binary as a child process (fork/exec): pipes or files on its standard
// streams, resource limits, another user, signals; and what the Unix tests read back from
// it (JSONL, leftovers beside an output). Shared by test_run_unix.cpp and test_hardening.cpp.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nunchaku::test {

struct Child {
  pid_t pid = -1;
  int to_child = -1;    // its stdin, when piped
  int from_child = -1;  // its stdout, when piped
};

struct ChildLimits {
  rlim_t address_space = 0;  // RLIMIT_AS; 0: as inherited
  rlim_t file_size = 0;      // RLIMIT_FSIZE; writes past it fail with EFBIG (SIGXFSZ ignored unless below)
  bool file_size_signal = false;  // keep SIGXFSZ's default action (a shell's `ulimit -f`: it kills)
  rlim_t processes = 0;      // RLIMIT_NPROC (threads count); 0: as inherited
  uid_t user = 0;            // run as this user (needs root); 0: as we are
};

// stdin_path/stdout_path: "" = a pipe, "-" = closed; stderr goes to err_path.
Child spawn(const std::vector<std::string>& args, const std::string& stdin_path, const std::string& stdout_path,
            const std::string& err_path, const ChildLimits& limits);
Child spawn(const std::vector<std::string>& args, const std::string& stdin_path, const std::string& stdout_path,
            const std::string& err_path, rlim_t as_limit = 0, rlim_t fsize_limit = 0);

// Exit code (128 + signal when killed); kills it after `timeout_s` (a failure).
int wait_exit(pid_t pid, double timeout_s = 60);
// Waits until `pid` has a handler for `sig` (SigCgt in /proc/PID/status), so a signal sent
// now is seen by nunchaku and not by the default action of a process still starting (a
// loaded machine can take longer than any fixed sleep). False after `timeout_s`.
bool wait_catches(pid_t pid, int sig, double timeout_s = 20);
// One line from `fd` (without the newline); "" on EOF or after `timeout_s`.
std::string read_line(int fd, double timeout_s = 30);
void write_all(int fd, const std::string& s);
std::vector<nlohmann::json> jsonl(const std::string& text);
// Files other than `keep` in `dir`: leftovers such as temporaries.
std::vector<std::string> others_in(const std::filesystem::path& dir, const std::vector<std::string>& keep);
// A long-running batch: many requests that each decode up to 200 tokens (prefill: long
// prompts and one generated token, run with --prefill-chunk 1, so most time is prefill).
// A prefill prompt is about 195 tokens: it must fit run/llama-spm's 256-token context, or
// every request fails at once and the batch ends before a signal can reach it.
std::string long_input(int n, bool prefill = false);
// Waits until a temporary beside an output in `dir` holds at least one complete line; the
// timeout only ends a run that is broken, so it is far longer than the wait ever is.
bool wait_for_first_result(const std::filesystem::path& dir, double timeout_s = 120);

}  // namespace nunchaku::test
