// Exports of a plan over several nodes (--nodes N --gpus G): vLLM tensor x pipeline parallel
// with its Ray and multiprocessing launch lines (docs/plan.md, "Several nodes").
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "memory/estimate.hpp"
#include "memory/multinode.hpp"

namespace nunchaku {

struct VllmStageCharge {
  PipelineStage stage;
  uint64_t rank_total = 0;      // what each GPU of this node holds (weights + KV + the rest)
  uint64_t kv_capacity = 0;     // KV blocks vLLM would allocate per rank: budget - everything else
  int64_t kv_tokens = 0;        // of the export's max_model_len's KV layout, in tokens (blocks of 16)
};

struct VllmCluster {
  int tensor_parallel = 1, pipeline_parallel = 1;
  int64_t max_model_len = 0;
  double gpu_memory_utilization = kVllmGpuMemoryUtilization;
  double cpu_offload_gb = 0;          // per GPU
  std::string offload_flags;          // "--cpu-offload-gb X" (MoE: "... --cpu-offload-params experts"), "" when it fits
  uint64_t budget = 0;                // per GPU, as estimate's verdict
  std::vector<VllmStageCharge> stages;
  int64_t largest_max_model_len = 0;  // one sequence in the smallest stage's KV room (vLLM's start-up check)
  int64_t largest_max_num_seqs = 0;   // sequences of max_model_len at once
  int fewest_nodes = 0;               // of G GPUs each that hold it without --cpu-offload-gb; 0 = none up to 64
  bool fits = false;                  // every rank within budget without CPU offload
  std::string engine_args;            // "--tensor-parallel-size 8 --pipeline-parallel-size 2 ..."
  std::vector<std::string> ray_lines, mp_lines;  // in order: what to run on which node
  std::vector<std::string> notes;
};

// `e`: the vLLM estimate at --nodes N (split_vllm_pipeline applied); `model`: what vllm serve
// is given; `nodes_fit(n)`: whether n nodes of the same GPUs fit (re-estimated by the caller).
VllmCluster vllm_cluster(const Estimate& e, uint64_t vram, const std::vector<uint64_t>& device_total, const std::string& model,
                         const std::function<bool(int)>& nodes_fit);

// DeepSpeed over nodes: a hostfile with placeholder host names (`node0 slots=8` ... for the
// user to replace), the `deepspeed --hostfile ...` line and the no-SSH form (the same command
// on every node with --no_ssh --node_rank K --master_addr --master_port). `script` is the
// training script placeholder; the config is `config_file`.
struct DeepSpeedLaunch {
  std::string hostfile;
  std::vector<std::string> lines;  // shell text: comments and commands, the ssh launch then the no-SSH one
};
DeepSpeedLaunch deepspeed_launch(const Workload& w, const std::string& config_file, const std::string& hostfile_name);

}  // namespace nunchaku
