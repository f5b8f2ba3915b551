#include "io/atomic_output.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/interrupt.hpp"

namespace nunchaku {
namespace fs = std::filesystem;

namespace {

Error write_error(const std::string& path, const std::string& why) {
  return Error("io.write", fmt::format("cannot write {}: {}", path, why), {.file = path});
}

std::mutex g_inputs_mutex;
std::set<std::pair<dev_t, ino_t>> g_inputs;

void note_stat(const struct stat& st) {
  if (!S_ISREG(st.st_mode)) return;
  std::lock_guard lock(g_inputs_mutex);
  g_inputs.insert({st.st_dev, st.st_ino});
}

std::string random_suffix() {
  static std::mutex m;
  static std::mt19937_64 rng{std::random_device{}() ^ (uint64_t(::getpid()) << 32)};
  std::lock_guard lock(m);
  return fmt::format("{:012x}", rng() & 0xffffffffffffULL);
}

// ".name.nunchaku-<random>" beside the target.
std::string temp_name(const std::string& target) {
  fs::path p(target);
  fs::path dir = p.parent_path();
  std::string name = "." + p.filename().string() + ".nunchaku-" + random_suffix();
  return dir.empty() ? name : (dir / name).string();
}

void fsync_dir_of(const std::string& path) {
  fs::path dir = fs::path(path).parent_path();
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);  // best effort: the rename is durable once the directory is
  ::close(fd);
}

}  // namespace

void note_input_path(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(path, ec)) {
      struct stat fst {};
      if (::stat(e.path().c_str(), &fst) == 0) note_stat(fst);
    }
    return;
  }
  note_stat(st);
}

void note_input_fd(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) == 0) note_stat(st);
}

void clear_noted_inputs() {
  std::lock_guard lock(g_inputs_mutex);
  g_inputs.clear();
}

void check_not_input(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;
  std::lock_guard lock(g_inputs_mutex);
  if (g_inputs.count({st.st_dev, st.st_ino}))
    throw Error("io.output_is_input", fmt::format("refusing to write {}: it is one of this command's input files", path),
                {.file = path, .hint = "choose another output path"});
}

AtomicOutput::AtomicOutput(std::string path, AtomicOptions opts) : path_(std::move(path)), opts_(opts) {
  check_not_input(path_);
  struct stat st {};
  const bool replacing = ::stat(path_.c_str(), &st) == 0;
  if (replacing && S_ISDIR(st.st_mode)) throw write_error(path_, "it is a directory");
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp_ = temp_name(path_);
    fd = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) throw write_error(path_, std::strerror(errno));
  }
  if (fd < 0) throw write_error(path_, "no free temporary name beside it");
  register_cleanup_path(tmp_);
  if (replacing && S_ISREG(st.st_mode)) ::fchmod(fd, st.st_mode & 07777);  // keep the replaced file's mode
  f_ = ::fdopen(fd, "wb");
  if (!f_) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp_.c_str());
    unregister_cleanup_path(tmp_);
    throw write_error(path_, std::strerror(err));
  }
}

AtomicOutput::~AtomicOutput() {
  if (!f_) return;
  std::fclose(f_);
  ::unlink(tmp_.c_str());
  unregister_cleanup_path(tmp_);
}

void AtomicOutput::commit() {
  std::FILE* f = f_;
  f_ = nullptr;
  int err = 0;
  if (std::fflush(f) != 0 || std::ferror(f)) err = errno ? errno : EIO;
  if (!err && opts_.durable && ::fsync(::fileno(f)) != 0) err = errno;
  if (std::fclose(f) != 0 && !err) err = errno;
  if (!err) {
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) err = errno;
  }
  if (err) {
    ::unlink(tmp_.c_str());
    unregister_cleanup_path(tmp_);
    throw write_error(path_, std::strerror(err));
  }
  unregister_cleanup_path(tmp_);
  if (opts_.durable) fsync_dir_of(path_);
}

void write_file_atomically(const std::string& path, std::string_view text) {
  InterruptGuard guard;
  AtomicOutput out(path);
  if (!text.empty() && std::fwrite(text.data(), 1, text.size(), out.file()) != text.size())
    throw write_error(path, std::strerror(errno));
  throw_if_interrupted(fmt::format("{} not written", path));
  out.commit();
}

}  // namespace nunchaku
