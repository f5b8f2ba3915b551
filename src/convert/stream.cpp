#include "convert/stream.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unistd.h>
#include <cstring>
#include <numeric>

#include "convert/elements.hpp"
#include "convert/names.hpp"
#include "convert/output.hpp"
#include "core/error.hpp"

namespace nunchaku::convert {

namespace {
uint64_t elem_bytes(DType t) {  // plain types only
  const auto& d = dtype_info(t);
  return d.block_bytes / d.block_elems;
}
}  // namespace

uint64_t view_span_bytes(const TensorInfo& t) {
  if (t.strides.empty()) return t.nbytes;
  if (t.numel() == 0) return 0;
  uint64_t last = 0;
  for (size_t i = 0; i < t.shape.size(); ++i) last += uint64_t(t.shape[i] - 1) * uint64_t(t.strides[i]);
  return (last + 1) * elem_bytes(t.dtype);
}

TensorReader::TensorReader(const Checkpoint& ck, uint64_t buffer_bytes)
    : ck_(ck), budget_(std::max<uint64_t>(buffer_bytes, 4096)) {
  for (const auto& f : ck.files) files_.push_back(File::open_read_only(f.path));
}

void TensorReader::read(const TensorInfo& t, DType out, const Sink& sink, RowPermute perm) {
  if (perm.heads > 0) {
    // Whole heads of output rows are gathered, then handed on in permuted row order.
    const uint64_t rows = uint64_t(t.shape.at(0)), head_rows = rows / uint64_t(perm.heads);
    const uint64_t row_bytes = dtype_nbytes(out, t.numel()).value_or(0) / rows, head_bytes = head_rows * row_bytes;
    head_.clear();
    permuted_.resize(head_bytes);
    auto flush = [&] {
      for (uint64_t r = 0; r < head_rows; ++r)
        std::memcpy(permuted_.data() + r * row_bytes,
                    head_.data() + qk_source_row(r, head_rows, perm.to_gguf) * row_bytes, row_bytes);
      sink(permuted_.data(), head_bytes);
      head_.clear();
    };
    auto gather = [&](const uint8_t* d, size_t n) {
      while (n > 0) {
        const size_t k = std::min<size_t>(n, head_bytes - head_.size());
        head_.insert(head_.end(), d, d + k);
        d += k, n -= k;
        if (head_.size() == head_bytes) flush();
      }
    };
    if (t.strides.empty()) read_contiguous(t, out, gather);
    else read_view(t, out, gather);
    return;
  }
  if (t.strides.empty()) read_contiguous(t, out, sink);
  else read_view(t, out, sink);
}

void TensorReader::write_to(const TensorInfo& t, DType to, OutFile& out, const std::function<void(uint64_t)>& on_bytes,
                            RowPermute perm) {
  if (perm.heads > 0) {
    read(t, to, [&](const uint8_t* d, size_t n) {
      out.write(d, n);
      if (on_bytes) on_bytes(bytes_read());
    }, perm);
    return;
  }
  if (to == t.dtype && t.strides.empty()) {
    copy_raw(t, out, [&] { if (on_bytes) on_bytes(bytes_read()); });
    return;
  }
  read(t, to, [&](const uint8_t* d, size_t n) {
    out.write(d, n);
    if (on_bytes) on_bytes(bytes_read());
  });
}

void TensorReader::copy_raw(const TensorInfo& t, OutFile& out, const std::function<void()>& on_chunk) {
  const File& f = files_[t.file];
  if (t.offset > f.size() || t.nbytes > f.size() - t.offset)
    throw Error("io.short_read", "tensor data past the end of the file", {.file = f.path(), .tensor = t.name, .offset = t.offset});
  const uint64_t step = std::min<uint64_t>(budget_, 1ull << 30);
  for (uint64_t done = 0; done < t.nbytes;) {
    check_interrupted();
    loff_t in = loff_t(t.offset + done);
    const ssize_t n = ::copy_file_range(f.fd(), &in, out.fd(), nullptr, std::min<uint64_t>(step, t.nbytes - done), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == ENOSPC || errno == EDQUOT)) out.fail_write(errno);
    if (n < 0 && done == 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
      read(t, t.dtype, [&](const uint8_t* d, size_t k) {  // no kernel copy here: through the buffer
        out.write(d, k);
        if (on_chunk) on_chunk();
      });
      return;
    }
    if (n <= 0)
      throw Error("io.read", n == 0 ? "file ended early" : std::string("copy failed: ") + std::strerror(errno),
                  {.file = f.path(), .tensor = t.name, .offset = t.offset + done}, n == 0 ? Exit::BadInput : Exit::Internal);
    done += uint64_t(n), bytes_read_ += uint64_t(n);
    out.note_copied(uint64_t(n));
    if (on_chunk) on_chunk();
  }
}

void TensorReader::read_contiguous(const TensorInfo& t, DType out, const Sink& sink) {
  const File& f = files_[t.file];
  if (out == t.dtype) {  // a copy: the whole budget is one read buffer
    in_.resize(std::min<uint64_t>(budget_, t.nbytes));
    for (uint64_t done = 0; done < t.nbytes;) {
      check_interrupted();
      const uint64_t n = std::min<uint64_t>(in_.size(), t.nbytes - done);
      f.read_at(t.offset + done, in_.data(), n);
      bytes_read_ += n;
      sink(in_.data(), n);
      done += n;
    }
    return;
  }
  const auto& di = dtype_info(t.dtype);
  const auto& doi = dtype_info(out);
  const uint64_t unit = std::lcm<uint64_t>(di.block_elems, doi.block_elems);  // elements per step
  const uint64_t unit_cost = unit / di.block_elems * di.block_bytes + unit * 4 + unit / doi.block_elems * doi.block_bytes;
  const uint64_t numel = t.numel();
  const uint64_t step = std::max<uint64_t>(1, budget_ / unit_cost) * unit;
  for (uint64_t e = 0; e < numel;) {
    check_interrupted();
    const uint64_t n = std::min(step, numel - e);
    const uint64_t in_off = e / di.block_elems * di.block_bytes, in_n = n / di.block_elems * di.block_bytes;
    in_.resize(std::max<uint64_t>(in_.size(), in_n));
    f.read_at(t.offset + in_off, in_.data(), in_n);
    bytes_read_ += in_n;
    convert_chunk(t.dtype, out, in_.data(), n, sink);
    e += n;
  }
}

void TensorReader::convert_chunk(DType in, DType out, const uint8_t* src, uint64_t n, const Sink& sink) {
  const auto& doi = dtype_info(out);
  f32_.resize(std::max<uint64_t>(f32_.size(), n));
  to_f32(in, src, f32_.data(), n);
  const uint64_t out_n = n / doi.block_elems * doi.block_bytes;
  out_.resize(std::max<uint64_t>(out_.size(), out_n));
  from_f32(out, f32_.data(), out_.data(), n);
  sink(out_.data(), out_n);
}

void TensorReader::read_view(const TensorInfo& t, DType out, const Sink& sink) {
  const uint64_t span = view_span_bytes(t), es = elem_bytes(t.dtype), numel = t.numel();
  in_.resize(std::max<uint64_t>(in_.size(), span));
  files_[t.file].read_at(t.offset, in_.data(), span);
  bytes_read_ += span;
  gather_.resize(numel * es);
  // Walk the index space in row-major order, copying one element at a time.
  std::vector<int64_t> idx(t.shape.size(), 0);
  for (uint64_t k = 0; k < numel; ++k) {
    uint64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += uint64_t(idx[d]) * uint64_t(t.strides[d]);
    std::memcpy(gather_.data() + k * es, in_.data() + off * es, es);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < t.shape[d]) break;
      idx[d] = 0;
    }
  }
  check_interrupted();
  if (out == t.dtype) sink(gather_.data(), gather_.size());
  else convert_chunk(t.dtype, out, gather_.data(), numel, sink);
}

}  // namespace nunchaku::convert
