#include "core/file.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <mutex>
#include <vector>

#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.hpp"
#include "core/text.hpp"

namespace nunchaku {

File File::open_read_only(const std::string& path) {
  install_mapped_read_guard();
  // O_NONBLOCK: a FIFO (or a device that waits) is opened at once and refused below, never
  // waited on; for a regular file the flag changes nothing and is cleared anyway.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    int e = errno;
    throw Error("io.open", std::string("cannot open: ") + std::strerror(e), {.file = path});
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool fifo = S_ISFIFO(st.st_mode), dir = S_ISDIR(st.st_mode);
    ::close(fd);
    throw Error("io.open", fifo ? "not a regular file (a FIFO)" : dir ? "not a regular file (a directory)" : "not a regular file",
                {.file = path});
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
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

// ---- watched files -------------------------------------------------------------------
namespace {

struct Watched {
  std::string path;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  int refs = 0;
};
std::mutex g_watch_mutex;
std::map<std::pair<uint64_t, uint64_t>, Watched> g_watched;  // by (device, inode)
std::map<const void*, std::pair<uint64_t, uint64_t>> g_mapped;  // mapping -> its file's key

int64_t mtime_ns(const struct stat& st) { return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec; }

// Adds a reference to f's entry (created from its state now); {0, 0} when fstat fails.
std::pair<uint64_t, uint64_t> watch(const File& f) {
  struct stat st {};
  if (::fstat(f.fd(), &st) != 0) return {};
  const std::pair<uint64_t, uint64_t> key{uint64_t(st.st_dev), uint64_t(st.st_ino)};
  std::lock_guard lock(g_watch_mutex);
  Watched& w = g_watched[key];
  if (w.refs++ == 0) w = {f.path(), uint64_t(st.st_size), mtime_ns(st), 1};
  return key;
}

void unwatch(const std::pair<uint64_t, uint64_t>& key) {
  if (key == std::pair<uint64_t, uint64_t>{}) return;
  std::lock_guard lock(g_watch_mutex);
  auto it = g_watched.find(key);
  if (it != g_watched.end() && --it->second.refs <= 0) g_watched.erase(it);
}

void watch_mapping(const void* p, const File& f) {
  const auto key = watch(f);
  std::lock_guard lock(g_watch_mutex);
  g_mapped[p] = key;
}

}  // namespace

FileWatch::FileWatch(const File& f) : key_(watch(f)) {}
FileWatch& FileWatch::operator=(FileWatch&& o) noexcept {
  if (this != &o) {
    unwatch(key_);
    key_ = o.key_;
    o.key_ = {};
  }
  return *this;
}
FileWatch::~FileWatch() { unwatch(key_); }

void unmap_read_only(void* p, size_t len) {
  std::pair<uint64_t, uint64_t> key{};
  {
    std::lock_guard lock(g_watch_mutex);
    auto it = g_mapped.find(p);
    if (it != g_mapped.end()) key = it->second, g_mapped.erase(it);
  }
  unwatch(key);
  ::munmap(p, len ? len : 1);
}

void check_watched_files() {
  std::vector<std::pair<std::pair<uint64_t, uint64_t>, Watched>> files;
  {
    std::lock_guard lock(g_watch_mutex);
    files.assign(g_watched.begin(), g_watched.end());
  }
  for (const auto& [key, w] : files) {
    struct stat st {};
    if (::stat(w.path.c_str(), &st) != 0 || uint64_t(st.st_dev) != key.first || uint64_t(st.st_ino) != key.second)
      continue;  // gone or replaced by another file: what is mapped or open is the old one, unchanged
    if (uint64_t(st.st_size) == w.size && mtime_ns(st) == w.mtime_ns) continue;
    throw Error("io.changed_in_place",
                uint64_t(st.st_size) != w.size
                    ? fmt::format("the file changed while it was in use: {} bytes when opened, {} now", w.size, st.st_size)
                    : std::string("the file changed while it was in use (rewritten in place: its modification time moved)"),
                {.file = w.path,
                 .hint = "results computed from it from now on would be wrong; replace a checkpoint with a new file "
                         "and a rename (mv), never by writing over it"});
  }
}

void* map_read_only(const File& f, uint64_t offset, size_t len, bool populate, const std::string& tensor) {
  struct stat st {};
  const uint64_t now = ::fstat(f.fd(), &st) == 0 ? uint64_t(st.st_size) : f.size();
  if (offset > now || len > now - offset)
    throw Error("io.short_read",
                "wanted bytes [" + std::to_string(offset) + ", +" + std::to_string(len) + ") but the file has " +
                    std::to_string(now) + " bytes",
                {.file = f.path(), .tensor = tensor, .offset = now,
                 .hint = "the file was truncated or changed after it was indexed"});
  void* p = ::mmap(nullptr, len ? len : 1, PROT_READ, MAP_PRIVATE | (populate ? MAP_POPULATE : 0), f.fd(),
                   static_cast<off_t>(offset));
  if (p != MAP_FAILED) watch_mapping(p, f);
  if (p == MAP_FAILED) {
    const int e = errno;
    throw Error("io.mmap",
                "mapping " + std::to_string(len) + " bytes at byte " + std::to_string(offset) +
                    " failed: " + std::strerror(e),
                {.file = f.path(), .tensor = tensor, .offset = offset,
                 .hint = e == ENOMEM ? "out of address space or memory map count; use --copy, lower --cpu-ram, or "
                                       "raise ulimit -v / vm.max_map_count"
                                     : ""},
                e == ENOMEM ? Exit::OutOfMemory : Exit::BadInput);
  }
  return p;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}


// ---- SIGBUS on mapped reads ------------------------------------------------------------
// Everything the handler touches is async-signal-safe in practice: raw syscalls (open,
// read, close, mmap, sigaction) and lock-free atomics on static storage.
namespace {

struct sigaction g_previous {};
std::atomic<bool> g_installed{false};
uintptr_t g_page = 4096;  // set once before the handler is installed
std::atomic<int> g_fault_state{0};  // 0 none, 1 being written, 2 recorded
char g_fault_file[4096];
uint64_t g_fault_offset = 0;

uint64_t parse_hex(const char*& p, const char* end) {
  uint64_t v = 0;
  for (; p < end; ++p) {
    const char c = *p;
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) break;
    v = v * 16 + uint64_t(d);
  }
  return v;
}

// One line of /proc/self/maps: "start-end perms offset dev inode   path".
bool parse_maps_line(const char* p, const char* end, uintptr_t addr, uintptr_t* lo, uintptr_t* hi, uint64_t* off,
                     const char** path, const char** path_end) {
  *lo = parse_hex(p, end);
  if (p == end || *p++ != '-') return false;
  *hi = parse_hex(p, end);
  if (addr < *lo || addr >= *hi) return false;
  auto skip_field = [&] {
    while (p < end && *p == ' ') ++p;
    while (p < end && *p != ' ') ++p;
  };
  skip_field();  // perms
  while (p < end && *p == ' ') ++p;
  *off = parse_hex(p, end);
  skip_field();  // dev
  skip_field();  // inode
  while (p < end && *p == ' ') ++p;
  *path = p;
  *path_end = end;
  return true;  // in range; a file mapping when *path starts with '/'
}

// Finds the file mapping holding addr in /proc/self/maps.
// *mapped: some mapping (a file's or not) holds addr.
bool find_file_mapping(uintptr_t addr, uintptr_t* lo, uintptr_t* hi, uint64_t* off, char* path, size_t path_cap,
                       bool* mapped) {
  *mapped = false;
  const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[8192];
  size_t have = 0;
  bool found = false;
  for (;;) {
    const ssize_t r = ::read(fd, buf + have, sizeof buf - have);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    have += size_t(r);
    size_t start = 0;
    for (size_t i = 0; i < have; ++i) {
      if (buf[i] != '\n') continue;
      const char *pb = nullptr, *pe = nullptr;
      if (!found && !*mapped && parse_maps_line(buf + start, buf + i, addr, lo, hi, off, &pb, &pe)) {
        *mapped = true;
        if (pb < pe && *pb == '/') {
          const size_t n = std::min(size_t(pe - pb), path_cap - 1);
          std::memcpy(path, pb, n);
          path[n] = 0;
          found = true;
        }
      }
      start = i + 1;
    }
    if (found || *mapped) break;
    if (start == 0) have = 0;  // a line longer than the buffer: not ours to parse
    else {
      std::memmove(buf, buf + start, have - start);
      have -= start;
    }
  }
  ::close(fd);
  return found;
}

void on_sigbus(int sig, siginfo_t* info, void* uctx) {
  const int saved_errno = errno;
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  uintptr_t lo = 0, hi = 0;
  uint64_t off = 0;
  char path[4096];
  bool handled = false, mapped = false;
  if (info->si_code == BUS_ADRERR && find_file_mapping(addr, &lo, &hi, &off, path, sizeof path, &mapped)) {
    const uintptr_t page = addr & ~(g_page - 1);
    // Everything from the faulting page to the end of the mapping lies past the file's
    // new end: zeros over all of it, so one fault per mapping, not one per page.
    void* p = ::mmap(reinterpret_cast<void*>(page), hi - page, PROT_READ, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    handled = p != MAP_FAILED;
    int expected = 0;
    if (handled && g_fault_state.compare_exchange_strong(expected, 1)) {
      std::memcpy(g_fault_file, path, sizeof g_fault_file);
      g_fault_offset = off + (addr - lo);
      g_fault_state.store(2, std::memory_order_release);
    }
  }
  // Another thread faulting on the same mapping got there first and already put zeros
  // over this address: the access succeeds when retried.
  if (!handled && mapped && info->si_code == BUS_ADRERR && g_fault_state.load(std::memory_order_acquire) != 0)
    handled = true;
  errno = saved_errno;
  if (handled) return;
  // Not a file mapping: whoever handled SIGBUS before us (or the default: the process
  // dies with SIGBUS when the access is retried).
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) return g_previous.sa_sigaction(sig, info, uctx);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    return g_previous.sa_handler(sig);
  }
  ::signal(SIGBUS, SIG_DFL);
}

void report_untaken_fault() {
  if (auto f = take_mapped_read_fault()) {
    const std::string line = "nunchaku: " + printable(f->file, kMessageShown) + ": at byte " +
                             std::to_string(f->offset) +
                             ": a mapped read failed (the file shrank while it was in use)\n";
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
    std::_Exit(static_cast<int>(Exit::BadInput));
  }
}

}  // namespace

void install_mapped_read_guard() {
  if (g_installed.exchange(true)) return;
  g_page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, &g_previous);
  std::atexit(report_untaken_fault);
}

std::optional<MappedReadFault> take_mapped_read_fault() {
  if (g_fault_state.load(std::memory_order_acquire) != 2) return std::nullopt;
  MappedReadFault f{g_fault_file, g_fault_offset};
  g_fault_state.store(0, std::memory_order_release);
  return f;
}

namespace {
std::atomic<MappedTensorNamer> g_tensor_namer{nullptr};
}  // namespace

void set_mapped_tensor_namer(MappedTensorNamer namer) { g_tensor_namer.store(namer); }

void check_mapped_reads() {
  if (auto f = take_mapped_read_fault()) {
    std::string tensor;
    if (MappedTensorNamer namer = g_tensor_namer.load()) {
      try {
        tensor = namer(f->file, f->offset);
      } catch (...) {  // the header itself may be gone: the file and offset still stand
      }
    }
    throw Error("io.mapped_read", "a read of the mapped file failed: it shrank while it was in use",
                {.file = f->file, .tensor = tensor, .offset = f->offset,
                 .hint = "the checkpoint was truncated or replaced while nunchaku ran; results after this point "
                         "would be wrong"});
  }
  check_watched_files();
}

}  // namespace nunchaku
