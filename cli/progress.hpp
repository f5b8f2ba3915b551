// The one progress line of the CLI (inspect --verify, load, convert, run), redrawn in place
// on stderr: a bar, percent, done / total, rate, elapsed and the time left (no ETA before
// the first sample), or for an open-ended count (run's requests) the count, a rate and
// elapsed. Drawn only when stderr is a terminal and the command is not quiet; at most 10
// times a second, the first call at once; clear() erases it (before anything else is
// written to a terminal that may share stderr and stdout, and at the end).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "cli/help.hpp"
#include "core/units.hpp"

namespace nunchaku::cli {

class Progress {
 public:
  // `what`: "loading", "verifying", ... `wanted`: false for --quiet/--json.
  explicit Progress(std::string what, bool wanted = true)
      : what_(std::move(what)), on_(wanted && ::isatty(STDERR_FILENO)), t0_(std::chrono::steady_clock::now()) {}
  ~Progress() { clear(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  bool on() const { return on_; }

  // Bytes done of total.
  void bytes(uint64_t done, uint64_t total) {
    if (!due(done >= total)) return;
    const double s = elapsed();
    const double rate = s > 0 ? double(done) / s : 0;
    const double frac = total ? std::min(1.0, double(done) / double(total)) : 0;
    std::string tail = fmt::format(" {:3.0f}% {} / {}", frac * 100, format_bytes(done), format_bytes(total));
    if (done > 0 && rate > 0) tail += fmt::format("  {:.2f} GB/s  ETA {}", rate / 1e9, seconds_text(double(total - std::min(done, total)) / rate));
    draw(frac, tail);
  }

  // An open-ended count ("3 requests done"), with a rate of `units` ("tok/s") when given.
  void count(const std::string& done_text, uint64_t units = 0, const char* per_s = "") {
    if (!due(false)) return;
    const double s = elapsed();
    line(fmt::format("{}: {}{}  {}", what_, done_text, *per_s && s > 0 ? fmt::format(", {:.1f} {}", double(units) / s, per_s) : "",
                     seconds_text(s)));
  }

  void clear() {
    if (!on_ || shown_ == 0) return;
    fmt::print(stderr, "\r{:{}}\r", "", std::min(shown_, std::max<size_t>(output_width(STDERR_FILENO), 2) - 1));
    std::fflush(stderr);
    shown_ = 0;
  }

 private:
  static std::string seconds_text(double s) {
    return s < 60 ? fmt::format("{:.0f} s", s) : fmt::format("{}m{:02}s", int(s) / 60, int(s) % 60);
  }
  double elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
  bool due(bool last) {
    if (!on_) return false;
    const double s = elapsed();
    if (drawn_ && !last && s - last_ < 0.1) return false;
    drawn_ = true;
    last_ = s;
    return true;
  }
  void draw(double frac, const std::string& tail) {
    const size_t width = output_width(STDERR_FILENO);
    const size_t fixed = what_.size() + 3 + tail.size();
    const size_t bar = width > fixed + 10 ? std::min<size_t>(width - fixed - 1, 30) : 0;
    std::string b;
    if (bar) {
      const size_t full = static_cast<size_t>(frac * double(bar));
      b = " [" + std::string(full, '#') + std::string(bar - full, '.') + "]";
    }
    line(what_ + b + tail);
  }
  // At most width - 1 columns, so the cursor never reaches the last column and a redraw
  // stays on its line (the padding that erases a longer previous state too).
  void line(std::string text) {
    const size_t room = std::max<size_t>(output_width(STDERR_FILENO), 2) - 1;
    text.resize(std::min(text.size(), room));
    const size_t pad = std::min(std::max(text.size(), shown_), room);
    fmt::print(stderr, "\r{:{}}", text, pad);
    std::fflush(stderr);
    shown_ = pad;
  }

  std::string what_;
  bool on_;
  std::chrono::steady_clock::time_point t0_;
  bool drawn_ = false;
  double last_ = 0;
  size_t shown_ = 0;
};

}  // namespace nunchaku::cli
