#include "tests/unix_child.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/helpers.hpp"

namespace nunchaku::test {

using nlohmann::json;
namespace fs = std::filesystem;

// stdin_path/stdout_path: "" = a pipe, "-" = closed; stderr goes to err_path.
Child spawn(const std::vector<std::string>& args, const std::string& stdin_path, const std::string& stdout_path,
            const std::string& err_path, const ChildLimits& limits) {
  int in_p[2] = {-1, -1}, out_p[2] = {-1, -1};
  if (stdin_path.empty()) REQUIRE(::pipe(in_p) == 0);
  if (stdout_path.empty()) REQUIRE(::pipe(out_p) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::signal(SIGPIPE, SIG_DFL);
    // Open everything first: a closed 0 or 1 must stay closed, not be reused by an open.
    const int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int in_fd = stdin_path.empty() ? in_p[0] : stdin_path == "-" ? -1 : ::open(stdin_path.c_str(), O_RDONLY);
    const int out_fd = stdout_path.empty()    ? out_p[1]
                       : stdout_path == "-" ? -1
                                             : ::open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(err_fd, 2);
    if (in_fd >= 0) ::dup2(in_fd, 0);
    if (out_fd >= 0) ::dup2(out_fd, 1);
    for (int fd : {in_p[0], in_p[1], out_p[0], out_p[1], err_fd, in_fd, out_fd})
      if (fd > 2) ::close(fd);
    if (in_fd < 0) ::close(0);
    if (out_fd < 0) ::close(1);
    // 126: this host cannot run the binary as that user (no root to switch, or a checkout
    // that user cannot reach, as a mode-0700 `mktemp -d` clone): callers skip, saying so.
    if (limits.user && (::setgid(limits.user) != 0 || ::setuid(limits.user) != 0)) ::_exit(126);
    if (limits.user && ::access(NUNCHAKU_BINARY, X_OK) != 0) ::_exit(126);
    if (limits.address_space) {
      rlimit rl{limits.address_space, limits.address_space};
      ::setrlimit(RLIMIT_AS, &rl);
    }
    if (limits.file_size) {  // writes past it fail with EFBIG (SIGXFSZ ignored, as across exec)
      ::signal(SIGXFSZ, limits.file_size_signal ? SIG_DFL : SIG_IGN);
      rlimit rl{limits.file_size, limits.file_size};
      ::setrlimit(RLIMIT_FSIZE, &rl);
    }
    if (limits.processes) {
      rlimit rl{limits.processes, limits.processes};
      ::setrlimit(RLIMIT_NPROC, &rl);
    }
    std::vector<char*> argv{const_cast<char*>(NUNCHAKU_BINARY)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(NUNCHAKU_BINARY, argv.data());
    ::_exit(127);
  }
  Child c;
  c.pid = pid;
  if (stdin_path.empty()) ::close(in_p[0]), c.to_child = in_p[1];
  if (stdout_path.empty()) ::close(out_p[1]), c.from_child = out_p[0];
  return c;
}

Child spawn(const std::vector<std::string>& args, const std::string& stdin_path, const std::string& stdout_path,
            const std::string& err_path, rlim_t as_limit, rlim_t fsize_limit) {
  return spawn(args, stdin_path, stdout_path, err_path, ChildLimits{.address_space = as_limit, .file_size = fsize_limit});
}

// Exit code (128 + signal when killed); kills it after `timeout_s` (a failure).
int wait_exit(pid_t pid, double timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      FAIL("the child did not exit in time");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Waits until `pid` has a handler for `sig` (SigCgt in /proc/PID/status), so a signal sent
// now is seen by nunchaku and not by the default action of a process still starting (a
// loaded machine can take longer than any fixed sleep). False after `timeout_s`.
bool wait_catches(pid_t pid, int sig, double timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    std::ifstream st("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(st, line);)
      if (line.rfind("SigCgt:", 0) == 0 && (std::stoull(line.substr(7), nullptr, 16) >> (sig - 1)) & 1) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// One line from `fd` (without the newline); "" on EOF or after `timeout_s`.
std::string read_line(int fd, double timeout_s) {
  std::string line;
  char c;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    if (::read(fd, &c, 1) != 1) return line;
    if (c == '\n') return line;
    line += c;
  }
  return line;
}

void write_all(int fd, const std::string& s) { REQUIRE(::write(fd, s.data(), s.size()) == ssize_t(s.size())); }

std::vector<json> jsonl(const std::string& text) {
  std::vector<json> v;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) v.push_back(json::parse(line));  // throws (a failure) on a torn line
  return v;
}

// Files other than `keep` in `dir`: leftovers such as temporaries.
std::vector<std::string> others_in(const fs::path& dir, const std::vector<std::string>& keep) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (std::find(keep.begin(), keep.end(), n) == keep.end()) v.push_back(n);
  }
  return v;
}

// A long-running batch: many requests that each decode up to 200 tokens (prefill: long
// prompts and one generated token, run with --prefill-chunk 1, so most time is prefill).
// A prefill prompt is about 195 tokens: it must fit kModel's 256-token context, or every
// request fails at once and the batch ends before a signal can reach it.
std::string long_input(int n, bool prefill) {
  std::string s, words;
  for (int i = 0; i < 16; ++i) words += "once upon a time ";
  for (int i = 0; i < n; ++i)
    s += json({{"prompt", (prefill ? words : "Once upon a time ") + std::to_string(i)}, {"max_tokens", prefill ? 1 : 200}}).dump() + "\n";
  return s;
}

// Waits until a temporary beside `out` holds at least one complete line; the timeout only
// ends a run that is broken, so it is far longer than the wait ever is (a few ms alone).
bool wait_for_first_result(const fs::path& dir, double timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().filename().string().find(".nunchaku-") != std::string::npos &&
          test::read_text(e.path().string()).find('\n') != std::string::npos)
        return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

}  // namespace nunchaku::test
