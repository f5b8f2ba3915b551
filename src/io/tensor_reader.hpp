// Reading tensor bytes from checkpoint files: the one read path of the loader and the
// streamed weight provider. A ReadFile holds a buffered descriptor and, where the file
// system allows, an O_DIRECT one (page cache bypassed: reads of weights streamed once per
// step do not grow the page cache). Short reads name the file, the tensor and the offset.
// Thread-safe: pread only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/file.hpp"

namespace nunchaku {

constexpr uint64_t kIoPage = 4096;  // O_DIRECT alignment (offset, length, buffer)
inline uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
inline uint64_t align_down(uint64_t v, uint64_t a) { return v / a * a; }

struct ReadFile {
  File file;
  int direct_fd = -1;  // O_DIRECT descriptor, -1 when off or refused
  FileWatch watch{file};  // a rewrite in place fails the run (core/file.hpp)
  // Opens `path` read-only; with `direct`, also an O_DIRECT descriptor when allowed.
  ReadFile(const std::string& path, bool direct);
  ReadFile(const ReadFile&) = delete;
  ReadFile& operator=(const ReadFile&) = delete;
  ~ReadFile();
};

// Names the tensor at a file offset, for error messages.
using TensorAt = std::function<std::string(uint64_t offset)>;

// pread exactly n bytes at `off` (buffered descriptor), or throw load.short_read (exit 2)
// naming the tensor at the offset where the file ended.
void read_exact(const ReadFile& f, uint64_t off, uint8_t* dst, uint64_t n, const TensorAt& tensor_at);

// O_DIRECT read of the page-aligned superset of [off, off+n) into `buf` (page-aligned,
// room for the aligned range). Returns the pointer to byte `off` in buf, or nullptr when
// the file system refused O_DIRECT for it (the caller falls back to read_exact).
// Adds the bytes read to `bytes_read`. Throws load.short_read when the file ends before off+n.
const uint8_t* read_direct(const ReadFile& f, uint64_t off, uint64_t n, uint8_t* buf, uint64_t& bytes_read,
                           const TensorAt& tensor_at);

// Where read_range may write around [dst, dst + n).
enum class Slack {
  None,   // exactly [dst, dst + n): neighbours are someone else's bytes (a module allocation)
  Pages,  // the page-aligned superset too (dst - off % kIoPage .. up to the next page): a
          // staging buffer or a streaming slot laid out for it
};

// Reads file bytes [off, off + n) to dst, where dst is congruent to off modulo kIoPage
// (page-aligned when off is). With an O_DIRECT descriptor: Slack::Pages reads the whole
// aligned superset with O_DIRECT; Slack::None reads the whole pages from an aligned `off`
// with O_DIRECT and the tail buffered. Everything else, and whatever O_DIRECT refuses, is
// read buffered. Returns the bytes read from the file (page rounding included). Throws
// load.short_read / io.read naming the tensor at the offset.
uint64_t read_range(const ReadFile& f, uint64_t off, uint64_t n, uint8_t* dst, Slack slack, const TensorAt& tensor_at);

}  // namespace nunchaku
