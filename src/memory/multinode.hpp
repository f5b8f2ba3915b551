// More than one machine: --nodes N of --gpus G GPUs each (--vram per GPU). Which runtimes
// span nodes and how each rank and node is charged: docs/estimate.md, "Several nodes".
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "memory/estimate.hpp"

namespace nunchaku {

// "8 GPUs", or "2 nodes × 8 GPUs (16 ranks)".
std::string ranks_text(const Workload& w);

// Per rank and per node of an estimate: {num_nodes, num_gpus_per_node, num_ranks,
// rank_bytes (= total_bytes), node_gpu_bytes (every GPU of one node), node_host_bytes
// (host_total_bytes: the host components are per node)}.
nlohmann::json topology_json(const Estimate& e);

// DeepSpeed training: what a rank holds, in words, for the verdict ("model states 72.3 GiB
// (ZeRO-3 over 2 nodes × 8 GPUs (16 ranks)), activations + logits 3.6 GiB, overheads 0.8 GiB
// per GPU"); "" for other runtimes.
std::string rank_breakdown(const Estimate& e);

}  // namespace nunchaku
