#include "core/interrupt.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <iterator>
#include <mutex>

namespace nunchaku {
namespace {

std::atomic<int> g_signal{0};
std::atomic<bool> g_flag{false};

// Cleanup slots: written under g_mutex, read by the handler. A slot is live while its
// `used` flag is set; the path is complete before `used` is published.
constexpr int kSlots = 8;
struct Slot {
  std::atomic<bool> used{false};
  char path[4096] = {};
};
Slot g_slots[kSlots];

std::mutex g_mutex;
int g_depth = 0;
// The signals that ask to stop: each would otherwise kill the process and lose finished
// work. SIGXFSZ (a write past RLIMIT_FSIZE) is caught and ignored instead: the write then
// fails with EFBIG, which the writer reports like any write error.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGALRM};
struct sigaction g_old[std::size(kStopSignals)] {}, g_old_xfsz {};

extern "C" void on_file_size_signal(int) {}

extern "C" void on_stop_signal(int sig) {
  int expected = 0;
  if (!g_signal.compare_exchange_strong(expected, sig)) {
    // Second signal: nothing more is waited for.
    for (auto& s : g_slots)
      if (s.used.load()) ::unlink(s.path);
    static const char msg[] = "\nnunchaku: interrupted again, exiting at once\n";
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(128 + sig);
  }
  g_flag.store(true);
}

}  // namespace

InterruptGuard::InterruptGuard() {
  std::lock_guard lock(g_mutex);
  if (g_depth++ > 0) return;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  // SA_RESTART: a write blocked on a slow reader is resumed, not failed; poll() (what input
  // waits use, with a timeout) returns EINTR regardless, so waits still see the flag at once.
  sa.sa_flags = SA_RESTART;
  for (size_t i = 0; i < std::size(kStopSignals); ++i) sigaction(kStopSignals[i], &sa, &g_old[i]);
  sa.sa_handler = on_file_size_signal;
  sigaction(SIGXFSZ, &sa, &g_old_xfsz);
}

InterruptGuard::~InterruptGuard() {
  std::lock_guard lock(g_mutex);
  if (--g_depth > 0) return;
  for (size_t i = 0; i < std::size(kStopSignals); ++i) sigaction(kStopSignals[i], &g_old[i], nullptr);
  sigaction(SIGXFSZ, &g_old_xfsz, nullptr);
}

const char* stop_signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGUSR1: return "SIGUSR1";
    case SIGALRM: return "SIGALRM";
    default: return "SIGINT";
  }
}

int interrupt_signal() { return g_signal.load(); }
const std::atomic<bool>& interrupt_flag() { return g_flag; }

Exit interrupted_exit() {
  const int sig = g_signal.load();
  return static_cast<Exit>(128 + (sig ? sig : SIGINT));
}

Error interrupted_error(const std::string& what) {
  const int sig = g_signal.load();
  return Error("interrupted", std::string("interrupted by ") + stop_signal_name(sig) + ": " + what, {},
               interrupted_exit());
}

void throw_if_interrupted(const std::string& what) {
  if (interrupted()) throw interrupted_error(what);
}

void register_cleanup_path(const std::string& path) {
  if (path.size() >= sizeof(Slot::path)) return;
  std::lock_guard lock(g_mutex);
  for (auto& s : g_slots)
    if (!s.used.load()) {
      std::memcpy(s.path, path.c_str(), path.size() + 1);
      s.used.store(true);
      return;
    }
}

void unregister_cleanup_path(const std::string& path) {
  std::lock_guard lock(g_mutex);
  for (auto& s : g_slots)
    if (s.used.load() && path == s.path) {
      s.used.store(false);
      return;
    }
}

void reset_interrupt() {
  g_signal.store(0);
  g_flag.store(false);
}

}  // namespace nunchaku
