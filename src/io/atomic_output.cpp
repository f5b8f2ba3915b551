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

Error write_error(const std::string& path, const std::string& why, Exit exit = Exit::BadInput) {
  return Error("io.write", fmt::format("cannot write {}: {}", path, why), {.file = path}, exit);
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

// `path` with every symlink of its last component followed, dangling ones too (the name a
// new file gets). Relative link texts are relative to the link's directory.
std::string resolve_links(const std::string& path) {
  std::string p = path;
  for (int hops = 0; hops <= 40; ++hops) {
    char buf[4096];
    const ssize_t n = ::readlink(p.c_str(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINVAL || errno == ENOENT) return p;  // not a link, or nothing there: the name itself
      throw write_error(path, std::strerror(errno));
    }
    if (size_t(n) >= sizeof buf) throw write_error(path, std::strerror(ENAMETOOLONG));
    fs::path t(std::string(buf, size_t(n)));
    p = t.is_absolute() ? t.string() : (fs::path(p).parent_path() / t).string();
  }
  throw write_error(path, std::strerror(ELOOP));
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

std::string temp_name_beside(const std::string& target) {
  fs::path p(target);
  fs::path dir = p.parent_path();
  std::string name = "." + p.filename().string() + ".nunchaku-" + random_suffix();
  return dir.empty() ? name : (dir / name).string();
}

AtomicOutput::AtomicOutput(std::string path, AtomicOptions opts) : path_(std::move(path)), opts_(opts) {
  if (path_ == "-") {
    open_in_place("stdout");
    return;
  }
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0) {  // follows every link, /proc/self/fd/N too
    if (S_ISDIR(st.st_mode)) throw write_error(path_, "it is a directory");
    if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
      open_in_place(path_);
      return;
    }
    if (!S_ISREG(st.st_mode))
      throw write_error(path_, "it is not a regular file, a character device or a FIFO",
                        Exit::BadInput);
    check_not_input(path_);
    target_ = resolve_links(path_);
    struct stat tst {};
    if (::stat(target_.c_str(), &tst) != 0 || tst.st_dev != st.st_dev || tst.st_ino != st.st_ino)
      throw write_error(path_, fmt::format("its symlinks lead to {}, which is not the file it names now", target_));
    create_temporary(true, st.st_mode & 07777);
    return;
  }
  if (errno != ENOENT) throw write_error(path_, std::strerror(errno));  // ELOOP, EACCES, ENOTDIR, ...
  target_ = resolve_links(path_);  // a new name (or a dangling link to one)
  create_temporary(false, 0);
}

void AtomicOutput::open_in_place(const std::string& shown) {
  int fd = path_ == "-" ? ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3)
                        : ::open(path_.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);  // a FIFO waits for its reader
  if (fd < 0) throw write_error(shown, std::strerror(errno));
  struct stat st {};
  if (path_ != "-" && (::fstat(fd, &st) != 0 || !(S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)))) {
    ::close(fd);  // replaced between the stat and the open: never write a file in place
    throw write_error(shown, "it changed while it was being opened");
  }
  f_ = ::fdopen(fd, "wb");
  if (!f_) {
    const int err = errno;
    ::close(fd);
    throw write_error(shown, std::strerror(err));
  }
}

void AtomicOutput::create_temporary(bool replacing, mode_t mode) {
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp_ = temp_name_beside(target_);
    fd = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) throw write_error(path_, std::strerror(errno));
  }
  if (fd < 0) throw write_error(path_, "no free temporary name beside it");
  register_cleanup_path(tmp_);
  if (replacing) ::fchmod(fd, mode);  // keep the replaced file's mode
  replacing_ = replacing;
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
  if (in_place()) return;
  ::unlink(tmp_.c_str());
  unregister_cleanup_path(tmp_);
}

// A new name is created without replacing what appeared meanwhile; a regular file (new or
// replaced) is renamed over only while it is still a regular file.
void AtomicOutput::rename_into_place() {
  if (!replacing_) {
    if (::renameat2(AT_FDCWD, tmp_.c_str(), AT_FDCWD, target_.c_str(), RENAME_NOREPLACE) == 0) return;
    if (errno != EEXIST && errno != EINVAL && errno != ENOSYS) throw write_error(path_, std::strerror(errno), Exit::Internal);
  }
  struct stat st {};
  if (::lstat(target_.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw write_error(path_, "it is no longer a regular file; nothing was replaced", Exit::Internal);
  if (::rename(tmp_.c_str(), target_.c_str()) != 0) throw write_error(path_, std::strerror(errno), Exit::Internal);
}

void AtomicOutput::commit() {
  std::FILE* f = f_;
  f_ = nullptr;
  if (!f) throw write_error(path_, "already committed", Exit::Internal);
  errno = 0;
  int err = 0;
  if (std::fflush(f) != 0 || std::ferror(f)) err = errno ? errno : EIO;
  if (!err && opts_.durable && !in_place() && ::fsync(::fileno(f)) != 0) err = errno;
  if (std::fclose(f) != 0 && !err) err = errno;
  if (in_place()) {
    if (err) throw write_error(path_ == "-" ? "stdout" : path_, std::strerror(err), Exit::Internal);
    return;
  }
  try {
    if (err) throw write_error(path_, std::strerror(err), Exit::Internal);
    rename_into_place();
  } catch (...) {
    ::unlink(tmp_.c_str());
    unregister_cleanup_path(tmp_);
    throw;
  }
  unregister_cleanup_path(tmp_);
  if (opts_.durable) fsync_dir_of(target_);
}

void write_file_atomically(const std::string& path, std::string_view text) {
  InterruptGuard guard;
  AtomicOutput out(path);
  if (!text.empty() && std::fwrite(text.data(), 1, text.size(), out.file()) != text.size())
    throw write_error(path, std::strerror(errno), Exit::Internal);
  throw_if_interrupted(fmt::format("{} not written", path));
  out.commit();
}

}  // namespace nunchaku
