// A plan in the forms other tools take: accelerate's device_map, llama.cpp's -ngl /
// --tensor-split, vLLM's engine arguments, a DeepSpeed config for training.
#pragma once

#include <cstdint>
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
  int64_t max_model_len = 0;
  double gpu_memory_utilization = kVllmGpuMemoryUtilization;
  std::string command;
  std::vector<std::string> notes;
};
// vLLM shards weights evenly (tensor parallel over the GPUs given) and pre-allocates the
// KV cache in what --gpu-memory-utilization leaves; --cpu-offload-gb moves weights out.
VllmArgs vllm_args(const Estimate& e, const std::vector<uint64_t>& vram, const std::vector<uint64_t>& device_total);

// The least partitioned ZeRO setting (stage 0..3, offload none/optimizer/params) whose
// estimate fits every GPU, as a ds_config.json; "fits": false with the last one tried
// when none does. Needs the estimate inputs because each setting is re-estimated.
nlohmann::json deepspeed_config(const Checkpoint& ck, const ModelLayout& layout, const Workload& w, uint64_t vram);

}  // namespace nunchaku
