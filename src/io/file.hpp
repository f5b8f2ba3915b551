// A read-only file handle with positional reads. Checkpoints are only ever
// opened O_RDONLY. Short reads and I/O errors throw nunchaku::Error naming the
// file and the byte offset. Thread-safe for concurrent read_at calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

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

bool is_directory(const std::string& path);
bool is_regular_file(const std::string& path);

}  // namespace nunchaku
