// Per-format readers. Each parses headers only (never tensor data) from a
// Source and returns a one-file Checkpoint whose files[0] is {src.path(), src.size()}.
// All throw nunchaku::Error with a code "<format>.<rule>" naming the broken rule.
#pragma once

#include <string>

#include "format/checkpoint.hpp"
#include "core/source.hpp"

namespace nunchaku {

// safetensors.cpp — a single .safetensors file.
Checkpoint read_safetensors(const Source& src);

// gguf.cpp — GGUF v2/v3 (v1 rejected with a hint).
Checkpoint read_gguf(const Source& src);

// pytorch.cpp — torch.save zip format, legacy pickle format, or old tar format.
Checkpoint read_pytorch(const Source& src);

// shards.cpp — multi-file checkpoints.
// An index JSON (model.safetensors.index.json / pytorch_model.bin.index.json):
// every shard exists and is read, every indexed tensor is in its shard, no
// name is in two shards, total_size checked (a warning if it is off).
Checkpoint read_index(const std::string& index_path);
// A list of shard files of one format merged in the given order; duplicate
// tensor names across files are an error.
Checkpoint merge_shards(const std::string& display_path, const std::vector<std::string>& files);

}  // namespace nunchaku
