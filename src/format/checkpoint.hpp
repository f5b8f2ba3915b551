// The index of a checkpoint: which tensors exist, where their bytes are.
// Building it never reads tensor data (cost O(headers)). Every later stage
// (model grouping, estimate, plan, load, run) consumes this struct.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/dtype.hpp"

namespace nunchaku {

enum class Format { Safetensors, GGUF, PyTorch };
std::string_view format_name(Format f);  // "safetensors", "gguf", "pytorch"

struct FileInfo {
  std::string path;  // as opened (absolute or relative to the cwd)
  uint64_t bytes = 0;
};

struct TensorInfo {
  std::string name;            // full name as stored ("model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight")
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // PyTorch order (outermost first); GGUF dims are reversed into this order
  std::vector<int64_t> strides;  // in elements, PyTorch order; empty when contiguous
  uint32_t file = 0;           // index into Checkpoint::files
  uint64_t offset = 0;         // absolute byte offset of the first element in that file
  uint64_t nbytes = 0;         // bytes of data this tensor views (exact, block quantization included)
  // PyTorch only: storage key and offset (in elements) within that storage; tensors
  // sharing a storage key alias the same bytes (tied weights, views).
  std::string storage;
  uint64_t storage_offset = 0;

  uint64_t numel() const;      // product of shape (1 for a scalar)
};

struct Checkpoint {
  Format format = Format::Safetensors;
  std::string path;                  // what the user passed
  std::vector<FileInfo> files;
  std::vector<TensorInfo> tensors;   // in file order, then offset order
  // Format metadata: safetensors "__metadata__" (merged over shards), GGUF KVs
  // (large arrays summarised), PyTorch non-tensor leaves. Always an object.
  nlohmann::json metadata = nlohmann::json::object();
  std::string config_path;           // config.json beside the weights, "" if none
  std::vector<std::string> warnings; // non-fatal findings (e.g. index total_size off)

  uint64_t total_bytes() const;      // sum of tensor nbytes (shared storages counted per tensor)
  uint64_t total_parameters() const; // sum of numel
  const TensorInfo* find(std::string_view name) const;  // linear scan; nullptr if absent
};

}  // namespace nunchaku
