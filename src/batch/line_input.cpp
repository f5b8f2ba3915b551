#include "batch/line_input.hpp"

#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/interrupt.hpp"

namespace nunchaku {
namespace {

Error read_error(const std::string& name, const std::string& why) {
  return Error("io.read", fmt::format("cannot read {}: {}", name, why), {.file = name});
}

bool is_dev_null(const struct stat& st) {
  struct stat n {};
  return ::stat("/dev/null", &n) == 0 && S_ISCHR(n.st_mode) && n.st_rdev == st.st_rdev;
}

}  // namespace

LineInput::LineInput(int fd, std::string name, size_t max_line_bytes)
    : fd_(fd), name_(std::move(name)), max_line_(max_line_bytes) {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw read_error(name_, errno == EBADF ? "it is closed" : std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw read_error(name_, "it is a directory");
  if ((S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) && !::isatty(fd_) && !is_dev_null(st))
    throw read_error(name_, "it is a device, not a file, pipe or terminal");
}

bool LineInput::fill(int timeout_ms) {
  if (eof_) return false;
  pollfd p{fd_, POLLIN, 0};
  int r = ::poll(&p, 1, timeout_ms);
  if (r < 0 && errno != EINTR) throw read_error(name_, std::strerror(errno));
  if (r <= 0) return false;
  char chunk[1 << 16];
  ssize_t n = ::read(fd_, chunk, sizeof chunk);
  if (n < 0) {
    if (errno == EINTR || errno == EAGAIN) return false;
    throw read_error(name_, std::strerror(errno));
  }
  if (n == 0) {
    eof_ = true;
    discarding_ = false;
    return true;
  }
  std::string_view data(chunk, size_t(n));
  while (discarding_ && !data.empty()) {  // the rest of an over-long line: counted, not kept
    size_t nl = data.find('\n');
    discarded_ += nl == std::string_view::npos ? data.size() : nl;
    if (nl == std::string_view::npos) return true;
    data.remove_prefix(nl);  // buf_ restarts at the newline that ends the long line
    discarding_ = false;
  }
  buf_.append(data);
  return true;
}

bool LineInput::take_line(InputLine& out) {
  for (;;) {
    size_t nl = buf_.find('\n', scan_);
    if (nl == std::string::npos) {
      scan_ = buf_.size();
      if (!eof_) {
        if (buf_.size() > max_line_) {  // too long: count the rest, keep none of it
          discarded_ += buf_.size();
          buf_.clear();
          scan_ = 0;
          discarding_ = true;
        }
        return false;
      }
      if (buf_.empty() && discarded_ == 0) return false;
      nl = buf_.size();  // the last line has no newline
    }
    std::string line = buf_.substr(0, nl);
    buf_.erase(0, std::min(nl + 1, buf_.size()));
    scan_ = 0;
    ++line_no_;
    if (first_) {
      first_ = false;
      if (line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (discarded_ == 0 && line.size() > max_line_) {  // came whole within one read
      discarded_ = line.size();
      line.clear();
    }
    if (discarded_ > 0) {
      out = {"", line_no_, true, discarded_ + line.size()};
      discarded_ = 0;
      return true;
    }
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const size_t bytes = line.size();
    out = {std::move(line), line_no_, false, bytes};
    return true;
  }
}

LineStatus LineInput::next(bool wait, InputLine& out) {
  for (;;) {
    if (take_line(out)) return LineStatus::Line;
    if (ended()) return LineStatus::End;
    if (wait && interrupted()) return LineStatus::End;
    if (!fill(wait ? 100 : 0) && !wait) return LineStatus::NotYet;
  }
}

}  // namespace nunchaku
