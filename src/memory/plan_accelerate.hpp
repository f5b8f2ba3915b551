// `plan --compat accelerate`: the device map accelerate's infer_auto_device_map would
// compute (accelerate 1.x, fallback_allocation off, clean_result on), reproduced on the
// module tree torch would build for the checkpoint. It walks the tree breadth-first,
// puts whole modules on the current device while they fit (less the size of the largest
// remaining unsplittable layer on the "main" devices: the first GPU and the CPU), splits
// modules that do not fit into their parameters and children unless their class is
// unsplittable, keeps tied parameters together, and moves on (GPUs, cpu, disk) when a
// module neither fits nor splits. It reserves nothing for KV cache or activations —
// that is accelerate's behaviour, and charge_plan() shows what such a map really needs.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "format/checkpoint.hpp"
#include "memory/plan.hpp"
#include "model/model.hpp"

namespace nunchaku {

// nn.Module tree: node 0 is the root (name ""). Children lists are in torch's order:
// params = named_parameters(recurse=False), children = named_children(),
// buffers = named_buffers(recurse=False).
struct TorchNode {
  std::string name;      // full dotted name
  bool tensor = false;   // a parameter or buffer (a leaf of the tree)
  bool no_split = false; // class in no_split_module_classes (decoder layers)
  uint64_t bytes = 0;    // tensors: numel × element size (0 for an alias of a tied parameter)
  std::vector<size_t> params, children, buffers;
};

struct TorchTree {
  std::vector<TorchNode> nodes;
  std::vector<std::vector<std::string>> tied;  // find_tied_parameters(): sorted name groups

  size_t add(size_t parent, std::string local, bool tensor, uint64_t bytes = 0, bool buffer = false);
  size_t child(size_t parent, const std::string& local);  // the child module, created when absent
};

// The tree for a checkpoint: modules from the tensor names, ordered as the layout orders
// its modules (embedding, layers, norm, head); decoder layers unsplittable; the rotary
// embedding buffer (inv_freq, fp32) that HF decoder models register under model.rotary_emb;
// an aliased head as a zero-size parameter tied to the embedding. Sizes as accelerate's
// compute_module_sizes: with `dtype`, floats cost min(dtype size, their own).
TorchTree torch_tree(const Checkpoint& ck, const ModelLayout& layout, std::optional<DType> dtype);

// Whether transformers builds this model with a parameter-free model.rotary_emb module (HF
// decoder families read from config.json with model.layers.N naming).
bool has_hf_rotary_module(const ModelLayout& layout);

// A device of accelerate's map: GPU ordinal, "cpu" or "disk".
using AccelerateMap = std::vector<std::pair<std::string, Device>>;  // in assignment order

// infer_auto_device_map(model, max_memory): `max_memory` in key order (GPUs first, then the CPU
// if given). "disk" is always the last device. Cleaned like clean_device_map.
AccelerateMap infer_auto_device_map(const TorchTree& tree, const std::vector<std::pair<Device, uint64_t>>& max_memory);

// The plan for --compat accelerate: the map above, each layout module on the device of its
// longest covering key, charged with charge_plan(). `map` receives accelerate's keys.
DevicePlan plan_accelerate(const Checkpoint& ck, const ModelLayout& layout, const Estimate& e, const PlanRequest& r,
                           AccelerateMap* map = nullptr);

}  // namespace nunchaku
