// More than one machine: --nodes N of --gpus G GPUs each (--vram per GPU). Which runtimes
// span nodes and how each rank and node is charged: docs/estimate.md, "Several nodes".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "memory/estimate.hpp"

namespace nunchaku {

// "8 GPUs", or "2 nodes × 8 GPUs (16 ranks)".
std::string ranks_text(const Workload& w);

// Per rank and per node of an estimate: {num_nodes, num_gpus_per_node, num_ranks,
// rank_bytes (= total_bytes), node_gpu_bytes (every GPU of one node), node_host_bytes
// (host_total_bytes: the host components are per node), network, fsdp (fsdp_json: null unless
// --runtime fsdp)}.
nlohmann::json topology_json(const Estimate& e);

// --nodes > 1: e.network, the bytes one step moves, per node link, each with its formula
// (docs/estimate.md, "Several nodes"): vLLM's pipeline activations across nodes (decode and
// prefill steps) and its tensor-parallel all-reduce, which stays inside a node; DeepSpeed's
// gradient reduce (ZeRO 0-2) or parameter gathers + gradient reduce-scatter (ZeRO-3); FSDP's
// full-shard gathers + reduce-scatter, or hybrid shard's gradient all-reduce across nodes. With
// --interconnect, each crossing line says how long it takes at that bandwidth.
void add_cross_node_traffic(Estimate& e);

// DeepSpeed or FSDP training: what a rank holds, in words, for the verdict ("model states
// 73.25 GiB (ZeRO-3 over 2 nodes × 8 GPUs (16 ranks)), activations + logits 3.6 GiB, overheads
// 0.8 GiB per GPU"; FSDP adds its all-gathered units); "" for other runtimes.
std::string rank_breakdown(const Estimate& e);

// vLLM over nodes: tensor parallel over the G GPUs of a node (TP = --gpus), pipeline parallel
// over the nodes (PP = --nodes), as vLLM's docs advise. Layers per stage as vLLM's
// get_pp_indices (vllm/distributed/utils.py): L / PP each, the remainder one more each for
// the stages before the last (from the second-to-last backwards).
std::vector<int64_t> vllm_pp_partition(int64_t layers, int pp);

// One pipeline stage (a node) of a vLLM TP x PP layout: layers [first, first + count), what
// each of its TP ranks holds.
struct PipelineStage {
  int64_t first_layer = 0, num_layers = 0;
  uint64_t weight_bytes = 0;  // per rank: the stage's layers (+ embedding on the first, norm and
                              // head on the last; a tied head is a copy there) / TP
  uint64_t kv_bytes = 0;      // per rank: the stage's KV / min(TP, KV heads) (MLA: not split)
};
std::vector<PipelineStage> vllm_stages(const Estimate& e, int tp, int pp);

// estimate() for vLLM with --nodes > 1: the weights and kv_cache lines become the fullest
// stage's per rank. Throws usage.nodes when TP does not divide the attention heads or PP
// exceeds the layers (vLLM refuses both).
void split_vllm_pipeline(Estimate& e);

}  // namespace nunchaku
