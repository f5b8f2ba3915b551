// A plan in the forms other tools take: accelerate's device_map, llama.cpp's -ngl /
// --tensor-split, vLLM's engine arguments, a DeepSpeed config for training.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "memory/plan.hpp"
#include "memory/plan_accelerate.hpp"

namespace nunchaku {

// {"model.embed_tokens": 0, "model.layers.7": 1, "lm_head": "cpu", ...}: every module of
// the layout covered (GPUs as ordinals, "cpu", "disk"), plus the parameter-free
// model.rotary_emb of HF decoder models beside the first layer, so
// from_pretrained(device_map=...) takes it as is.
nlohmann::json accelerate_device_map(const DevicePlan& p, const Estimate& e, const ModelLayout& layout);
nlohmann::json accelerate_device_map(const AccelerateMap& m);

// Ascending layer indices as runs: "0-17, 20".
std::string format_ranges(const std::vector<int64_t>& v);

// The context a llama.cpp or vLLM export runs with (-c, --max-model-len): at most the model's
// maximum, with a note in `notes` saying why when `context` asked for more. plan charges the
// export's plan at this context, so -ngl and --cpu-offload-gb fit what the command runs.
int64_t export_context(const ModelSpec& spec, int64_t context, Runtime r, std::vector<std::string>& notes);

struct LlamaCppArgs {
  int n_gpu_layers = 0;              // -ngl: decoder layers on GPUs, +1 when the output layer is too
  std::vector<size_t> tensor_split;  // layers per GPU (--tensor-split), empty for one GPU
  int cpu_moe_layers = 0;            // --n-cpu-moe N (-1: --cpu-moe; 0: none or -ot)
  std::string command;               // "-ngl 33 --tensor-split 16,17"
  std::vector<std::string> notes;
};
// llama.cpp offloads the LAST n layers (and the output layer once n > n_layer); token
// embeddings stay in host memory. The count is what transfers between the two tools.
LlamaCppArgs llama_cpp_args(const DevicePlan& p, const Estimate& e);

struct VllmArgs {
  int tensor_parallel = 1, pipeline_parallel = 1;
  double cpu_offload_gb = 0;         // per GPU
  uint64_t cpu_offload_bytes = 0;    // per GPU, exactly (cpu_offload_gb is it in GiB, rounded down to 1e-6)
  // MoE: --cpu-offload-params experts, and the layers whose routed experts vLLM then keeps in
  // host memory (on the first GPU; each pipeline stage offloads its own first layers').
  bool experts_only = false;
  std::vector<int64_t> expert_layers;
  int64_t max_model_len = 0;
  double gpu_memory_utilization = kVllmGpuMemoryUtilization;
  std::string command;
  std::vector<std::string> notes;
};
// vLLM shards weights evenly (tensor parallel over the GPUs given) and pre-allocates the
// KV cache in what --gpu-memory-utilization leaves; --cpu-offload-gb moves weights out. For a
// model with routed experts the offload is the experts of the first layers alone
// (--cpu-offload-params experts) when they cover it, as vLLM's UVA offloader selects them.
VllmArgs vllm_args(const Estimate& e, const std::vector<uint64_t>& vram, const std::vector<uint64_t>& device_total);

// vLLM's UVA offloader with --cpu-offload-params experts (vllm/model_executor/offloader/uva.py):
// each GPU walks its decoder layers from its first, moving every parameter with an `experts`
// name segment (routed experts only: shared_expert(s) and the router are other segments) while
// less than --cpu-offload-gb is moved. The least whole-layer prefix covering `short_by` bytes
// per GPU: its bytes (the largest over the pipeline stages) and layers (of the first stage);
// nullopt when every layer's experts together are less than `short_by` on some GPU.
struct ExpertOffload {
  uint64_t bytes = 0;
  std::vector<int64_t> layers;
};
std::optional<ExpertOffload> vllm_expert_offload(const Estimate& e, int tp, int pp, uint64_t short_by);
// The offload flags for `short_by` bytes per GPU appended to v.command (v.tensor_parallel and
// v.pipeline_parallel set): --cpu-offload-gb, with --cpu-offload-params experts when the
// routed experts of the first layers cover it (vllm_expert_offload), and the notes that say
// what vLLM then moves. Nothing when short_by is 0.
void vllm_offload(const Estimate& e, uint64_t short_by, VllmArgs& v);

// The least partitioned ZeRO setting (stage 0..3, offload none/optimizer/params) whose
// estimate fits every GPU, as a ds_config.json; "fits": false with the last one tried
// when none does. Needs the estimate inputs because each setting is re-estimated.
nlohmann::json deepspeed_config(const Checkpoint& ck, const ModelLayout& layout, const Workload& w, uint64_t vram);

}  // namespace nunchaku
