// Per-format readers. Each parses headers only (never tensor data) from a
// Source and returns a one-file Checkpoint whose files[0] is {src.path(), src.size()}.
// All throw nunchaku::Error with a code "<format>.<rule>" naming the broken rule.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "format/checkpoint.hpp"
#include "core/source.hpp"

namespace nunchaku {

// safetensors.cpp — a single .safetensors file.
Checkpoint read_safetensors(const Source& src);
// The same reader without its one-pass scan of the usual header: every header takes the
// checked path (tests hold the two to one result).
Checkpoint read_safetensors_checked(const Source& src);

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
// Appends `part` (a one-file or merged Checkpoint) to `into`: files in order, tensor
// file indices and PyTorch storage keys remapped, metadata keys the earlier parts lack
// added. `first` takes the format from `part`; later parts must match it.
void append_shard(Checkpoint& into, Checkpoint&& part, bool first);

// gguf_split.cpp — split GGUF (llama.cpp gguf-split / gguf-py GGUFWriter shards):
// "<prefix>-0000K-of-0000N.gguf", K = 1..N.
struct GgufSplitName {
  std::string prefix;  // path up to "-0000K-of-0000N.gguf"
  uint32_t no = 0;     // K, 1-based as in the name
  uint32_t count = 0;  // N
};
std::optional<GgufSplitName> parse_gguf_split_name(const std::string& path);
std::string gguf_split_path(const std::string& prefix, uint32_t no, uint32_t count);
// A GGUF file; when it is one part of a split GGUF (by its name or its split.count
// metadata), every part, checked for consistency and merged in part order: one
// Checkpoint whose files are the parts and whose metadata is the first part's.
Checkpoint read_gguf_parts(const std::string& path);

}  // namespace nunchaku
