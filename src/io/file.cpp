#include "io/file.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.hpp"

namespace nunchaku {

File File::open_read_only(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    throw Error("io.open", std::string("cannot open: ") + std::strerror(e), {.file = path});
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("io.open", "not a regular file", {.file = path});
  }
  File f;
  f.path_ = path;
  f.fd_ = fd;
  f.size_ = static_cast<uint64_t>(st.st_size);
  return f;
}

File::File(File&& o) noexcept : path_(std::move(o.path_)), fd_(o.fd_), size_(o.size_) { o.fd_ = -1; }

File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = o.fd_;
    size_ = o.size_;
    o.fd_ = -1;
  }
  return *this;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

size_t File::read_some_at(uint64_t offset, void* buf, size_t n) const {
  size_t done = 0;
  auto* p = static_cast<char*>(buf);
  while (done < n) {
    ssize_t r = ::pread(fd_, p + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      throw Error("io.read", std::string("read failed: ") + std::strerror(e),
                  {.file = path_, .offset = offset + done});
    }
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

void File::read_at(uint64_t offset, void* buf, size_t n) const {
  if (offset > size_ || n > size_ - offset)
    throw Error("io.short_read",
                "wanted " + std::to_string(n) + " bytes but the file has " +
                    std::to_string(size_) + " bytes",
                {.file = path_, .offset = offset, .hint = "the file is truncated"});
  size_t got = read_some_at(offset, buf, n);
  if (got != n)
    throw Error("io.short_read", "file ended after " + std::to_string(got) + " of " + std::to_string(n) + " bytes",
                {.file = path_, .offset = offset + got, .hint = "the file is truncated"});
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace nunchaku
