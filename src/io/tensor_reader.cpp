#include "io/tensor_reader.hpp"

#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include "core/error.hpp"
#include "core/trace.hpp"
#include "io/memory_counters.hpp"

namespace nunchaku {
namespace {

Error short_read(const ReadFile& f, uint64_t at, const TensorAt& tensor_at, const std::string& detail) {
  return Error("load.short_read", "file ended at byte " + std::to_string(at) + " while reading tensor data" + detail,
               {.file = f.file.path(), .tensor = tensor_at ? tensor_at(at) : "", .offset = at,
                .hint = "the file was truncated or changed after it was indexed"});
}

}  // namespace

ReadFile::ReadFile(const std::string& path, bool direct) : file(File::open_read_only(path)) {
  if (direct) direct_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT | O_NONBLOCK);
  struct stat a {}, b {};  // the same file as `file` (the path may have been replaced meanwhile)
  if (direct_fd >= 0 && (::fstat(direct_fd, &b) != 0 || ::fstat(file.fd(), &a) != 0 || a.st_dev != b.st_dev ||
                         a.st_ino != b.st_ino)) {
    ::close(direct_fd);
    direct_fd = -1;
  }
}

ReadFile::~ReadFile() {
  if (direct_fd >= 0) ::close(direct_fd);
}

void read_exact(const ReadFile& f, uint64_t off, uint8_t* dst, uint64_t n, const TensorAt& tensor_at) {
  size_t got;
  try {
    got = f.file.read_some_at(off, dst, n);
  } catch (const Error& e) {
    uint64_t at = e.context().offset.value_or(off);
    throw e.with_defaults({.tensor = tensor_at ? tensor_at(at) : ""});
  }
  if (got != n)
    throw short_read(f, off + got, tensor_at,
                     " (wanted " + std::to_string(n) + " bytes at " + std::to_string(off) + ")");
}

const uint8_t* read_direct(const ReadFile& f, uint64_t off, uint64_t n, uint8_t* buf, uint64_t& bytes_read,
                           const TensorAt& tensor_at) {
  const uint64_t a0 = align_down(off, kIoPage), a1 = align_up(off + n, kIoPage);
  uint64_t done = 0;
  while (done < a1 - a0) {
    ssize_t r = ::pread(f.direct_fd, buf + done, a1 - a0 - done, static_cast<off_t>(a0 + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EINVAL && done == 0) return nullptr;
      throw Error("io.read", std::string("read failed: ") + std::strerror(errno),
                  {.file = f.file.path(), .tensor = tensor_at ? tensor_at(a0 + done) : "", .offset = a0 + done});
    }
    if (r == 0) break;
    done += static_cast<uint64_t>(r);
  }
  bytes_read += done;
  if (a0 + done < off + n) throw short_read(f, a0 + done, tensor_at, "");
  return buf + (off - a0);
}

namespace {

std::atomic<uint64_t> g_bytes_read{0};

uint64_t read_range_once(const ReadFile& f, uint64_t off, uint64_t n, uint8_t* dst, Slack slack, const TensorAt& tensor_at) {
  if (n == 0) return 0;
  if (f.direct_fd >= 0 && slack == Slack::Pages) {
    uint64_t got = 0;
    if (read_direct(f, off, n, dst - off % kIoPage, got, tensor_at)) return got;
  }
  uint64_t head = 0;  // bytes done with O_DIRECT (whole pages, straight into place)
  if (f.direct_fd >= 0 && slack == Slack::None && off % kIoPage == 0) {
    head = n / kIoPage * kIoPage;
    ssize_t r = head ? ::pread(f.direct_fd, dst, head, static_cast<off_t>(off)) : 0;
    if (r != static_cast<ssize_t>(head)) head = 0;  // refused or short: redo buffered (reports the error)
  }
  read_exact(f, off + head, dst + head, n - head, tensor_at);
  return n;
}

}  // namespace

uint64_t read_range(const ReadFile& f, uint64_t off, uint64_t n, uint8_t* dst, Slack slack, const TensorAt& tensor_at) {
  trace::Span span("read", "io");
  const uint64_t got = read_range_once(f, off, n, dst, slack, tensor_at);
  g_bytes_read.fetch_add(got, std::memory_order_relaxed);
  return got;
}

uint64_t file_bytes_read() { return g_bytes_read.load(std::memory_order_relaxed); }

}  // namespace nunchaku
