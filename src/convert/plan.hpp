// What `convert` writes, decided before any byte is: the output tensors (name, dtype,
// shape, bytes, the input tensor they come from), the duplicates of shared storages that
// are dropped, and the assignment of tensors to output files. Every check that can refuse
// the conversion runs here, so a refused input leaves nothing behind.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "format/checkpoint.hpp"
#include "convert/names.hpp"
#include "model/model.hpp"

namespace nunchaku::convert {

struct OutTensor {
  std::string name;
  size_t src = 0;               // index into Checkpoint::tensors
  DType dtype = DType::F32;     // as written
  std::vector<int64_t> shape;   // PyTorch order
  uint64_t nbytes = 0;          // as written
  int64_t qk_heads = 0;         // --names: rows permuted within this many heads (0: none)
  bool qk_to_gguf = false;
};

struct Shard {
  std::string file;             // name inside the output directory (or the output file)
  std::vector<size_t> tensors;  // indices into ConvertPlan::tensors, in write order
  uint64_t bytes = 0;           // tensor bytes
};

// A tensor the output needs that the input does not hold (--names gguf: llama3's
// rope_freqs, which llama.cpp reads and transformers computes from config.json).
struct GeneratedTensor {
  std::string name;
  std::vector<float> values;         // F32 vector
};

struct ConvertPlan {
  std::vector<OutTensor> tensors;    // in the model's state_dict order (module order)
  std::vector<GeneratedTensor> generated;  // written after `tensors` (GGUF output only)
  std::vector<std::string> dropped;  // "duplicate=kept" for shared storages written once
  std::vector<std::string> skipped;  // "name: why" for tensors --names does not write
  std::vector<Shard> shards;
};

struct PlanOptions {
  std::optional<DType> dtype;        // float tensors become this; nullopt keeps them
  bool gguf = false;                 // output format GGUF (Q8_0 allowed, quantized kept)
  const std::vector<Rename>* renames = nullptr;  // --names: one per input tensor (names.hpp)
};

// Output tensors in state_dict order; throws Error("convert.*", exit 2) naming the tensor
// for one that cannot be written as asked (an unsupported dtype, a non-contiguous view).
ConvertPlan plan_tensors(const Checkpoint& ck, const ModelLayout& layout, const PlanOptions& o);

// transformers' save_pretrained(max_shard_size=max_bytes) assignment (huggingface_hub's
// split_state_dict_into_shards: in state_dict order, a tensor that would overflow the
// current shard starts a new one; one larger than max_bytes gets a shard of its own).
// One shard is named model.safetensors, n shards model-0000i-of-0000n.safetensors.
// by_name: the tensors in name order (byte order, as Python's sorted), which is what
// transformers 5.x hands to that function.
void shard_by_size(ConvertPlan& plan, uint64_t max_bytes, bool by_name = false);
// One shard per module of the model description (embedding, each layer, norm, head, other).
void shard_by_module(ConvertPlan& plan, const Checkpoint& ck, const ModelLayout& layout);

// Rank of a tensor suffix within its module in the order transformers registers
// parameters (q, k, v, o projections, q/k norms, mlp, then the layer norms); unknown
// suffixes rank after the known ones.
int hf_param_rank(const std::string& suffix);

}  // namespace nunchaku::convert
