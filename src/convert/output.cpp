#include "convert/output.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/interrupt.hpp"

namespace nunchaku::convert {
namespace fs = std::filesystem;

void check_interrupted() { throw_if_interrupted("nothing was written"); }

StagedOutput::StagedOutput(std::string out, bool directory) : out_(std::move(out)), dir_(directory) {
  while (out_.size() > 1 && out_.back() == '/') out_.pop_back();
  std::error_code ec;
  if (fs::exists(fs::symlink_status(out_, ec)))
    throw Error("convert.out_exists", "the output already exists", {.file = out_,
                .hint = "convert never overwrites: remove it or choose another OUT"});
  fs::path p(out_);
  fs::path parent = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  if (!fs::is_directory(parent, ec))
    throw Error("convert.no_parent", "the output's parent directory does not exist", {.file = parent.string()});
  // A fresh random name, created here (mkdir, or a file opened O_EXCL): what is removed on
  // failure is only ever what this process made.
  for (int attempt = 0; attempt < 100 && !created_; ++attempt) {
    tmp_ = temp_name_beside((parent / p.filename()).string());
    if (dir_) {
      created_ = ::mkdir(tmp_.c_str(), 0777) == 0;
    } else {
      const int fd = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
      if ((created_ = fd >= 0)) ::close(fd);
    }
    if (!created_ && errno != EEXIST)
      throw Error("io.write", fmt::format("cannot create {}: {}", tmp_, std::strerror(errno)), {.file = tmp_});
  }
  if (!created_) throw Error("io.write", "no free temporary name beside the output", {.file = out_});
}

StagedOutput::~StagedOutput() {
  if (committed_ || !created_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

std::string StagedOutput::path_for(const std::string& name) const {
  return dir_ ? (fs::path(tmp_) / name).string() : tmp_;
}

void StagedOutput::commit() {
  // RENAME_NOREPLACE: an OUT created while we ran is never replaced.
  if (::renameat2(AT_FDCWD, tmp_.c_str(), AT_FDCWD, out_.c_str(), RENAME_NOREPLACE) != 0) {
    const int e = errno;
    if (e == EEXIST)
      throw Error("convert.out_exists", "the output appeared while converting; nothing was replaced", {.file = out_});
    throw Error("io.write", fmt::format("cannot rename {} to {}: {}", tmp_, out_, std::strerror(e)), {.file = out_},
                Exit::Internal);
  }
  committed_ = true;
}

OutFile::OutFile(const std::string& path, std::string shown_path)
    : shown_(std::move(shown_path)), out_(path, {.durable = false}) {}

void OutFile::write(const void* data, size_t n) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd(), p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail_write(w < 0 ? errno : ENOSPC);
    p += w, n -= size_t(w), off_ += uint64_t(w);
  }
}

void OutFile::fail_write(int e) const {
  if (e == ENOSPC || e == EDQUOT)
    throw Error("convert.disk_full", "no space left on the device; the partial output was removed",
                {.file = shown_, .offset = off_, .hint = "free space or choose an OUT on another file system"},
                Exit::Internal);
  throw Error("io.write", fmt::format("write failed: {}", std::strerror(e)), {.file = shown_, .offset = off_},
              Exit::Internal);
}

void OutFile::close() { out_.commit(); }

}  // namespace nunchaku::convert
