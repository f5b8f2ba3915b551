// `inspect --verify`: read every tensor's bytes once, in file order, to prove
// the checkpoint is readable end to end, and count NaN/Inf in floating tensors.
// Unlike indexing this reads all data; it uses large sequential preads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "format/checkpoint.hpp"

namespace nunchaku {

struct TensorCheck {
  size_t tensor = 0;       // index into Checkpoint::tensors
  uint64_t nan = 0;
  uint64_t inf = 0;
  bool counted = false;    // false when the dtype has no NaN/Inf or the view is strided
};

struct VerifyReport {
  uint64_t bytes_read = 0;
  double seconds = 0;
  std::vector<TensorCheck> tensors;   // one per tensor, same order as Checkpoint::tensors
  uint64_t tensors_with_nan = 0;
  uint64_t tensors_with_inf = 0;
  uint64_t nonzero_padding_bytes = 0;  // GGUF: non-zero bytes in alignment padding between tensors
  std::vector<std::string> problems;   // human-readable findings (non-fatal)
};

// Throws Error("io.*") naming file, tensor and offset when a range cannot be read.
// `progress(done_bytes, total_bytes)` is called now and then from the calling thread.
VerifyReport verify_checkpoint(const Checkpoint& ck,
                               const std::function<void(uint64_t, uint64_t)>& progress = {});

// NaN/Inf count of `n` elements of a floating dtype (F16, BF16, F32, F64, F8_E4M3, F8_E5M2).
// Returns false (and leaves counts) for dtypes without NaN/Inf encodings.
bool count_nonfinite(DType t, const uint8_t* data, uint64_t n, uint64_t& nan, uint64_t& inf);

}  // namespace nunchaku
