// A read-only file handle with positional reads. Checkpoints are only ever
// opened O_RDONLY. Short reads and I/O errors throw nunchaku::Error naming the
// file and the byte offset. Thread-safe for concurrent read_at calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace nunchaku {

class File {
 public:
  // Throws Error("io.open") with the errno text if the file cannot be opened.
  static File open_read_only(const std::string& path);

  File() = default;
  File(File&& o) noexcept;
  File& operator=(File&& o) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  int fd() const { return fd_; }

  // Reads exactly n bytes at `offset`; throws Error("io.short_read") if the
  // range is past the end of the file, Error("io.read") on an I/O error.
  void read_at(uint64_t offset, void* buf, size_t n) const;
  // Reads up to n bytes; returns the count (0 at end of file).
  size_t read_some_at(uint64_t offset, void* buf, size_t n) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// A read-only private mapping of [offset, offset + len) of `f` (offset page-aligned; MAP_POPULATE when
// `populate`). The range is checked against the file's size now (mapping past the end
// would fault); ENOMEM is Error("io.mmap", exit 3: an actual out-of-memory), any other
// failure exit 2. The file is watched (below) while mapped: unmap with unmap_read_only(p, len).
void* map_read_only(const File& f, uint64_t offset, size_t len, bool populate, const std::string& tensor = {});
void unmap_read_only(void* p, size_t len);

// ---- checkpoint files changed in place ---------------------------------------------
// A file rewritten in place while it is mapped (or read again and again, as a streamed
// run does) silently changes the weights under a run. A watched file's device, inode, size
// and modification time are kept from when it was first watched; check_mapped_reads()
// stats each watched path and throws Error("io.changed_in_place", exit 2) naming the file
// when the same inode has another size or mtime. A file replaced by rename (mv, a
// download tool) is harmless (the mapping and descriptor keep the old inode) and is not
// reported. One stat per watched file per check.
class FileWatch {
 public:
  FileWatch() = default;
  explicit FileWatch(const File& f);
  FileWatch(FileWatch&& o) noexcept : key_(o.key_) { o.key_ = {}; }
  FileWatch& operator=(FileWatch&& o) noexcept;
  FileWatch(const FileWatch&) = delete;
  FileWatch& operator=(const FileWatch&) = delete;
  ~FileWatch();

 private:
  std::pair<uint64_t, uint64_t> key_{};  // (device, inode); {0, 0}: none
};
// Throws io.changed_in_place for the first watched file that changed (check_mapped_reads calls it).
void check_watched_files();

// ---- reads of file mappings that fail -------------------------------------------
// A file that shrinks while it is mapped makes reads of the lost pages raise SIGBUS.
// The first File::open_read_only installs a SIGBUS handler that, for a fault inside a
// file mapping, maps zero pages over the rest of that mapping (so the reading code,
// on any thread, finishes with garbage instead of dying), records the first fault
// (file, byte offset) and returns. Code that reads mappings calls
// check_mapped_reads() after each operation and so reports exit 2 instead of using the
// garbage. A fault nobody took is reported at exit (exit code 2). A SIGBUS outside file
// mappings goes to the previous handler (default: the process dies as before).
struct MappedReadFault {
  std::string file;      // the mapped file (absolute, as /proc/self/maps names it)
  uint64_t offset = 0;   // byte offset in that file of the first failed read
};

void install_mapped_read_guard();  // idempotent; File::open_read_only calls it
// The first fault since the last take, or none; clears it.
std::optional<MappedReadFault> take_mapped_read_fault();
// Throws Error("io.mapped_read", exit 2) naming file, offset and (through the namer
// below) the tensor whose bytes hold that offset, if a fault was recorded; then
// check_watched_files().
void check_mapped_reads();
// Names the tensor stored at byte `offset` of checkpoint file `file` ("" when unknown);
// format/open.cpp sets it (re-reading that file's header, only when a fault is reported).
using MappedTensorNamer = std::string (*)(const std::string& file, uint64_t offset);
void set_mapped_tensor_namer(MappedTensorNamer namer);

bool is_directory(const std::string& path);
bool is_regular_file(const std::string& path);

}  // namespace nunchaku
