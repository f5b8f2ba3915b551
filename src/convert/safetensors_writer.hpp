// One safetensors file as python safetensors writes it: 8-byte little-endian header
// length, a JSON header ({"__metadata__": {"format": "pt"}} first, then each tensor's
// dtype, shape and data_offsets) padded with spaces to a multiple of 8, then the data.
// Tensors are laid out by element size, largest first (each stays aligned to it), and
// in input-file order otherwise, so the input is read as sequentially as possible.
#pragma once

#include <functional>
#include <string>

#include "convert/plan.hpp"
#include "convert/stream.hpp"

namespace nunchaku::convert {

// The order `shard`'s tensors are laid out in the file.
std::vector<size_t> safetensors_layout(const ConvertPlan& plan, const Shard& shard, const Checkpoint& ck);

// Writes the shard to `tmp_path` (`shown` in messages); returns the file's size.
// on_bytes(reader.bytes_read()) after each chunk (progress).
uint64_t write_safetensors(const std::string& tmp_path, const std::string& shown, const ConvertPlan& plan,
                           const Shard& shard, const Checkpoint& ck, TensorReader& reader,
                           const std::function<void(uint64_t)>& on_bytes);

}  // namespace nunchaku::convert
