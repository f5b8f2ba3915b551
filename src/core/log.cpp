#include "core/log.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <optional>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "core/text.hpp"

namespace nunchaku::log {
namespace {

constexpr std::string_view kNames[] = {"debug", "info", "warn", "error", "off"};

// NUNCHAKU_LOG as a level; nullopt when it is set to something else.
std::optional<Level> env_level() {
  const char* env = std::getenv("NUNCHAKU_LOG");
  if (!env || !*env) return Level::Warn;
  for (size_t i = 0; i < 5; ++i)
    if (kNames[i] == env) return static_cast<Level>(i);
  return std::nullopt;
}

// Until main configures the log, a line from another file's static initializer (the
// engine's NUNCHAKU_ISA check) obeys NUNCHAKU_LOG already. Constant-initialized.
std::atomic<bool> g_configured{false};
std::atomic<Level> g_level{Level::Warn};

std::chrono::steady_clock::time_point start() {
  static const auto t = std::chrono::steady_clock::now();
  return t;
}

std::shared_ptr<spdlog::logger> logger() {
  // stderr, unbuffered, no colours; the pattern adds nothing: write() formats the line.
  static auto l = [] {
    auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    auto lg = std::make_shared<spdlog::logger>("nunchaku", sink);
    lg->set_pattern("%v");
    lg->set_level(spdlog::level::trace);
    lg->flush_on(spdlog::level::trace);
    return lg;
  }();
  return l;
}

}  // namespace

void configure(int verbose) {
  start();
  const std::optional<Level> l = env_level();
  if (!l)
    throw Error("usage.log_level", "NUNCHAKU_LOG=" + std::string(std::getenv("NUNCHAKU_LOG")) + " is not a log level",
                {.hint = "one of debug, info, warn, error, off"});
  const int lowered = static_cast<int>(*l) - verbose;
  set_level(static_cast<Level>(lowered < 0 ? 0 : lowered));
}

void set_level(Level level) {
  g_level = level;
  g_configured = true;
}
Level level() { return g_configured ? g_level.load() : env_level().value_or(Level::Warn); }
bool enabled(Level l) { return l != Level::Off && l >= level(); }

void write(Level level, std::string_view message) {
  const std::string text = printable(message, kMessageShown);
  if (level >= Level::Warn) {  // what a user should read: as every other warning line
    logger()->log(spdlog::level::warn, "nunchaku: {}: {}", level == Level::Warn ? "warning" : "error", text);
    return;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start()).count();
  logger()->log(spdlog::level::info, "nunchaku: {} +{:.3f}s: {}", kNames[static_cast<int>(level)], s, text);
}

}  // namespace nunchaku::log
