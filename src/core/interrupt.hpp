// SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGALRM for every subcommand: the first signal sets a flag
// that long loops poll (the loader, verify, run's scheduler) so they stop cleanly, keep what
// is finished and exit 128 + signal (130 SIGINT, 143 SIGTERM, 129 SIGHUP, 138 SIGUSR1,
// 142 SIGALRM); a second signal exits at once, after removing the temporary files
// registered here (async-signal-safe unlink only). SIGXFSZ is caught and ignored, so a
// write past `ulimit -f` fails with EFBIG and is reported as a write error (the temporary
// removed) instead of killing the process. Without an InterruptGuard alive the signals
// keep their previous disposition.
#pragma once

#include <atomic>
#include <string>

#include "core/error.hpp"

namespace nunchaku {

// Installs the handlers for its lifetime (nesting is fine: the outermost one installs,
// the flag is shared); restores the previous ones when the outermost is destroyed.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
};

// The signal that asked to stop, or 0.
int interrupt_signal();
// "SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1" or "SIGALRM".
const char* stop_signal_name(int sig);
inline bool interrupted() { return interrupt_signal() != 0; }
// Set while a stop is requested; for APIs that poll a flag (LoadOptions::cancel).
const std::atomic<bool>& interrupt_flag();
// 128 + the signal (130 when none arrived: an interruption reported by other means).
Exit interrupted_exit();
// Error("interrupted", "interrupted by SIGINT: <what>") with interrupted_exit().
Error interrupted_error(const std::string& what);
// Throws interrupted_error(what) if a stop was requested.
void throw_if_interrupted(const std::string& what);

// Paths a second signal unlinks before exiting (the temporaries of AtomicOutput).
// Registration holds at most 8 paths of up to 4095 bytes; more are simply not removed.
void register_cleanup_path(const std::string& path);
void unregister_cleanup_path(const std::string& path);

// Tests: forget a requested stop.
void reset_interrupt();

}  // namespace nunchaku
