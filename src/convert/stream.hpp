// Reads input tensors and hands their converted bytes to a sink, a bounded chunk at a
// time: the working memory (input chunk, f32 values, output chunk) stays within the
// buffer size whatever the tensor's size. Contiguous tensors are read in chunks of whole
// blocks; a strided PyTorch view is read as the storage span it covers (which must fit
// in the buffer: view_span_bytes lets the caller refuse before writing anything).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "format/checkpoint.hpp"
#include "convert/output.hpp"
#include "core/file.hpp"

namespace nunchaku::convert {

using Sink = std::function<void(const uint8_t* data, size_t n)>;

// Q/K rows reordered within each head (convert --names, names.hpp); heads 0 = none.
struct RowPermute {
  int64_t heads = 0;
  bool to_gguf = false;
};

// Bytes of storage a (possibly strided) tensor's elements span.
uint64_t view_span_bytes(const TensorInfo& t);

class TensorReader {
 public:
  TensorReader(const Checkpoint& ck, uint64_t buffer_bytes);
  // The bytes of `t` converted to `out` (t.dtype itself: copied), in order; with `perm`,
  // rows reordered one head at a time (a head's rows are buffered, nothing more).
  void read(const TensorInfo& t, DType out, const Sink& sink, RowPermute perm = {});
  // A contiguous same-dtype tensor copied file to file (copy_file_range: no user-space
  // buffer; read/write through the buffer where the kernel cannot). on_chunk after each chunk.
  void copy_raw(const TensorInfo& t, OutFile& out, const std::function<void()>& on_chunk);
  // `t` as dtype `to` appended to `out`: copied file to file when nothing changes, else
  // converted through the buffer. on_bytes(bytes_read()) after each chunk (progress).
  void write_to(const TensorInfo& t, DType to, OutFile& out, const std::function<void(uint64_t)>& on_bytes,
                RowPermute perm = {});
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  void read_contiguous(const TensorInfo& t, DType out, const Sink& sink);
  void read_view(const TensorInfo& t, DType out, const Sink& sink);
  void convert_chunk(DType in, DType out, const uint8_t* src, uint64_t n, const Sink& sink);

  const Checkpoint& ck_;
  std::vector<File> files_;
  uint64_t budget_;
  std::vector<uint8_t> in_, out_, gather_, head_, permuted_;
  std::vector<float> f32_;
  uint64_t bytes_read_ = 0;
};

}  // namespace nunchaku::convert
