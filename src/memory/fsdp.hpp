// PyTorch FSDP as a training runtime (`--runtime fsdp`, launched by accelerate or torchrun):
// what each rank holds under FSDP2's fully_shard as accelerate 1.16 applies it (one unit per
// decoder layer, the input embedding, the final norm + head, the root), full shard over every
// rank of every node or hybrid shard (within a node, replicated across nodes), with or
// without CPU offload. Formulas and the torch sources they come from: docs/estimate.md,
// "FSDP".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "memory/estimate_detail.hpp"

namespace nunchaku {

std::string_view fsdp_strategy_name(FsdpStrategy s);  // "full", "hybrid"
FsdpStrategy parse_fsdp_strategy(std::string_view s);  // Error usage.fsdp_strategy (exit 2)

// Ranks one parameter is sharded over: every rank (full), the GPUs of a node (hybrid).
uint64_t fsdp_shard_ranks(const Workload& w);

// FSDP2 pads dim 0 to a multiple of the shard ranks S: every rank stores ceil(dim0 / S) rows
// (torch/distributed/fsdp/_fully_shard/_fsdp_param.py, FSDPParam._init_sharded_param:
// padded_sharded_size = chunks[0].size() of torch.chunk(param, S, dim=0)). Rank 0 holds a full
// chunk, so its local shard is exactly that; the last ranks' may be shorter or empty.
// Elements of one rank's shard of a tensor of `numel` elements whose dim 0 is `dim0`.
uint64_t fsdp_local_numel(uint64_t numel, uint64_t dim0, uint64_t shard_ranks);

// Usage errors of a workload naming --runtime fsdp or --fsdp-strategy (resolved runtime `r`).
void check_fsdp_workload(const Workload& w, Runtime r);

// FSDP's per-rank model states in place of DeepSpeed's: rewrites the weights line (the rank's
// padded shards) and adds gradients, master_weights, optimizer_states and fsdp_unsharded (the
// all-gathered units), and with --offload params the host line per node. `optimizer` is the
// optimizer's bytes of each trainable tensor unsharded (parallel to `trainable`).
void add_fsdp_model_states(Estimate& e, const std::vector<estimate_detail::TrainTensor>& trainable,
                           const std::vector<uint64_t>& optimizer);

// The wrapped units' parameters as fsdp2_prepare_model makes them (accelerate 1.16): one per
// decoder layer, the input embedding (when not tied), the final norm + head (+ the embedding
// when tied), the root's leftovers. For the table and the tests.
struct FsdpUnit {
  std::string name;            // "model.layers.3", "embedding", "norm + head", "root"
  uint64_t parameters = 0;
  uint64_t gathered_bytes = 0; // all-gathered in the compute dtype (frozen weights as stored)
  uint64_t grad_bytes = 0;     // its unsharded gradients (reduce dtype = compute dtype)
};
std::vector<FsdpUnit> fsdp_units(const Estimate& e);

// "FSDP full shard over 2 nodes × 8 GPUs (16 ranks)", "FSDP hybrid shard (8 GPUs of a node,
// replicated over 2 nodes)".
std::string fsdp_layout_text(const Workload& w);

// JSON topology.fsdp: {strategy, shard_ranks, replicas, offload, cpu_offload_moves} or null.
nlohmann::json fsdp_json(const Estimate& e);

}  // namespace nunchaku
