// Request lines from a file descriptor as they arrive, for `nunchaku run`.
//
// Reads with poll() + read() (never O_NONBLOCK on a shared descriptor), so a line typed on
// a terminal or written by `tail -f` is available as soon as its newline is. Memory is
// bounded: a line longer than max_line_bytes is not kept, only counted (the caller turns
// it into that request's error). A UTF-8 BOM at the very start is dropped, a trailing
// '\r' is dropped, blank lines are skipped. Waiting wakes every 100 ms to look at the
// interrupt flag (core/interrupt.hpp).
#pragma once

#include <cstddef>
#include <string>

namespace nunchaku {

struct InputLine {
  std::string text;         // the line (empty when too_long)
  size_t line_no = 0;       // 1-based
  bool too_long = false;
  size_t bytes = 0;         // the line's full length
};

enum class LineStatus { Line, NotYet, End };

class LineInput {
 public:
  // `name` is used in messages ("stdin" or the path). Error io.read (exit 2) when `fd`
  // is closed, a directory, or a device other than a terminal or /dev/null.
  LineInput(int fd, std::string name, size_t max_line_bytes);

  // wait = false: a line only if one can be had without blocking; wait = true: blocks
  // until a line, the end of input, or an interruption (End). Error io.read on a read error.
  LineStatus next(bool wait, InputLine& out);
  void set_max_line(size_t bytes) { max_line_ = bytes; }
  bool ended() const { return eof_ && buf_.empty() && discarded_ == 0; }

 private:
  bool take_line(InputLine& out);  // a complete line from buf_, skipping blank ones
  bool fill(int timeout_ms);       // one read if poll says ready; false when nothing came

  int fd_;
  std::string name_;
  size_t max_line_;
  std::string buf_;
  size_t scan_ = 0;          // buf_[0, scan_) holds no newline
  bool eof_ = false, first_ = true, discarding_ = false;
  size_t discarded_ = 0;     // bytes of the over-long line dropped so far
  size_t line_no_ = 0;
};

}  // namespace nunchaku
