// Diagnostics on stderr, off by default: `-v` (info), `-vv` (debug) or NUNCHAKU_LOG=debug|info|
// warn|error|off. Never on stdout, never instead of an Error: what a command reports is
// its output; the log says what it did on the way (files opened, plan decisions, phase
// timings, thread counts). Lines read "nunchaku: info +SECONDS: message" (seconds since the
// log was configured in main) or "nunchaku: warning: message". spdlog writes them (only
// log.cpp includes it).
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>

namespace nunchaku::log {

enum class Level { Debug = 0, Info = 1, Warn = 2, Error = 3, Off = 4 };

// Level from NUNCHAKU_LOG (default warn), lowered one step per -v. Throws Error
// ("usage.log_level", exit 2) for a NUNCHAKU_LOG that is not a level.
void configure(int verbose);
void set_level(Level level);
Level level();
bool enabled(Level level);
void write(Level level, std::string_view message);

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::Debug)) write(Level::Debug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::Info)) write(Level::Info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::Warn)) write(Level::Warn, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace nunchaku::log
