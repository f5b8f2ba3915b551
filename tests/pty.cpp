#include "tests/pty.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "tests/helpers.hpp"

namespace nunchaku::test {

PtyResult run_on_pty(const std::vector<std::string>& args, bool both, const std::string& stdin_file, unsigned short cols) {
  int master = -1, slave = -1;
  winsize ws{};
  ws.ws_row = 24;
  ws.ws_col = cols;
  REQUIRE(::openpty(&master, &slave, nullptr, nullptr, cols ? &ws : nullptr) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int in = ::open(stdin_file.c_str(), O_RDONLY);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(in, 0);
    ::dup2(both ? slave : null, 1);
    ::dup2(slave, 2);
    ::close(master);
    std::vector<char*> argv{const_cast<char*>(NUNCHAKU_BINARY)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(NUNCHAKU_BINARY, argv.data());
    ::_exit(127);
  }
  ::close(slave);
  PtyResult r;
  char buf[4096];
  for (ssize_t n; (n = ::read(master, buf, sizeof buf)) > 0;) r.text.append(buf, size_t(n));  // EIO once the child is gone
  ::close(master);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

size_t widest_on_terminal(const std::string& raw) {
  const std::string text = checkout_as_dot(raw);  // as widest(): not where the tree was cloned
  size_t w = 0;
  for (size_t at = 0; at <= text.size();) {
    size_t end = text.find_first_of("\r\n", at);
    if (end == std::string::npos) end = text.size();
    w = std::max(w, columns(text.substr(at, end - at)));
    at = end + 1;
  }
  return w;
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  const char* old = std::getenv(name);
  had_ = old != nullptr;
  if (had_) old_ = old;
  if (value) ::setenv(name, value, 1);
  else ::unsetenv(name);
}

ScopedEnv::~ScopedEnv() {
  if (had_) ::setenv(name_.c_str(), old_.c_str(), 1);
  else ::unsetenv(name_.c_str());
}

}  // namespace nunchaku::test
