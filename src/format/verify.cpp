#include "format/verify.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>

#include "core/error.hpp"
#include "core/interrupt.hpp"
#include "format/zip.hpp"
#include "core/file.hpp"
#include "core/source.hpp"

namespace nunchaku {

bool count_nonfinite(DType t, const uint8_t* p, uint64_t n, uint64_t& nan, uint64_t& inf) {
  switch (t) {
    case DType::F32:
      for (uint64_t i = 0; i < n; ++i) {
        uint32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        if ((v & 0x7f800000u) == 0x7f800000u) ((v & 0x007fffffu) ? nan : inf)++;
      }
      return true;
    case DType::F64:
      for (uint64_t i = 0; i < n; ++i) {
        uint64_t v;
        std::memcpy(&v, p + 8 * i, 8);
        if ((v & 0x7ff0000000000000ull) == 0x7ff0000000000000ull) ((v & 0x000fffffffffffffull) ? nan : inf)++;
      }
      return true;
    case DType::F16:
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        if ((v & 0x7c00u) == 0x7c00u) ((v & 0x03ffu) ? nan : inf)++;
      }
      return true;
    case DType::BF16:
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        if ((v & 0x7f80u) == 0x7f80u) ((v & 0x007fu) ? nan : inf)++;
      }
      return true;
    case DType::F8_E4M3:  // e4m3fn: no Inf, NaN is S.1111.111
      for (uint64_t i = 0; i < n; ++i)
        if ((p[i] & 0x7f) == 0x7f) nan++;
      return true;
    case DType::F8_E5M2:
      for (uint64_t i = 0; i < n; ++i)
        if ((p[i] & 0x7c) == 0x7c) ((p[i] & 0x03) ? nan : inf)++;
      return true;
    default:
      return false;
  }
}

VerifyReport verify_checkpoint(const Checkpoint& ck, const std::function<void(uint64_t, uint64_t)>& progress) {
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  InterruptGuard guard;  // SIGINT/SIGTERM stop the read between chunks (exit 130/143)
  VerifyReport rep;
  rep.tensors.resize(ck.tensors.size());
  const uint64_t total = ck.total_bytes();

  // Visit tensors grouped by file, in offset order, so reads are sequential.
  std::vector<size_t> order(ck.tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto &x = ck.tensors[a], &y = ck.tensors[b];
    return x.file != y.file ? x.file < y.file : x.offset < y.offset;
  });

  // torch.save zip archives: every entry's CRC-32 (tensor data alone would miss a
  // corrupt data.pkl or a storage no tensor views).
  if (ck.format == Format::PyTorch)
    for (const auto& fi : ck.files) {
      FileSource src(fi.path);
      uint8_t magic[4] = {};
      if (src.size() < 4) continue;
      src.read_at(0, magic, 4);
      if (std::memcmp(magic, "PK\x03\x04", 4) == 0) rep.bytes_read += zip::Archive(src).verify_crc32();
    }

  constexpr size_t kChunk = 16u << 20;  // 16 MiB reads: large enough to stream at disk speed
  std::vector<uint8_t> buf(kChunk);
  uint32_t open_index = UINT32_MAX;
  File f;
  uint64_t prev_end = 0;  // end of the previous tensor in this file (for GGUF padding checks)
  for (size_t idx : order) {
    const TensorInfo& t = ck.tensors[idx];
    if (t.file >= ck.files.size())
      throw Error("verify.bad_file_index", "tensor refers to a missing file", {.tensor = t.name}, Exit::Internal);
    if (t.file != open_index) {
      f = File::open_read_only(ck.files[t.file].path);
      open_index = t.file;
      prev_end = 0;
    }
    TensorCheck& tc = rep.tensors[idx];
    tc.tensor = idx;
    // GGUF pads each tensor to general.alignment with zero bytes.
    if (ck.format == Format::GGUF && prev_end != 0 && t.offset > prev_end && t.offset - prev_end < 4096) {
      uint8_t pad[4096];
      size_t n = static_cast<size_t>(t.offset - prev_end);
      f.read_at(prev_end, pad, n);
      for (size_t i = 0; i < n; ++i) rep.nonzero_padding_bytes += pad[i] != 0;
    }
    const auto& di = dtype_info(t.dtype);
    const bool countable = t.strides.empty() && di.block_elems == 1 && di.kind == DTypeKind::Float;
    // Read in whole-element chunks so element boundaries never straddle reads.
    const size_t esz = countable ? di.block_bytes : 1;
    const size_t chunk = kChunk - kChunk % esz;
    uint64_t done = 0;
    try {
      while (done < t.nbytes) {
        throw_if_interrupted(std::to_string(rep.bytes_read) + " of " + std::to_string(total) + " bytes verified");
        size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, t.nbytes - done));
        f.read_at(t.offset + done, buf.data(), n);
        if (countable) tc.counted = count_nonfinite(t.dtype, buf.data(), n / esz, tc.nan, tc.inf);
        done += n;
        rep.bytes_read += n;
        if (progress) progress(rep.bytes_read, total);
      }
    } catch (const Error& e) {
      throw e.with_defaults({.tensor = t.name});
    }
    prev_end = std::max(prev_end, t.offset + t.nbytes);
    if (tc.nan) rep.tensors_with_nan++;
    if (tc.inf) rep.tensors_with_inf++;
    if (tc.nan || tc.inf)
      rep.problems.push_back(t.name + ": " + std::to_string(tc.nan) + " NaN, " + std::to_string(tc.inf) + " Inf");
  }
  if (rep.nonzero_padding_bytes)
    rep.problems.push_back(std::to_string(rep.nonzero_padding_bytes) + " non-zero GGUF padding bytes");
  rep.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return rep;
}

}  // namespace nunchaku
