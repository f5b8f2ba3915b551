// How much device (and host) memory a workload needs, as named components
// with their formulas, plus per-module costs a planner charges to devices.
// Every formula and its source is in docs/estimate.md; the numbers are exact
// where the inputs allow (weights from the tensor index, KV cache from the
// config) and documented approximations elsewhere (activations, slack).
//
// For `plan`: a device that holds modules M pays
//     Σ_{m∈M} modules[m].weight_bytes + modules[m].kv_bytes + modules[m].train_bytes
//   + activations (once, if it runs any layer) + logits (if it holds the head)
//   + every overhead (per device).
// per_gpu_total is that sum when the model is split evenly over `gpus`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/checkpoint.hpp"
#include "memory/quant.hpp"
#include "memory/workload.hpp"
#include "model/model.hpp"

namespace nunchaku {

struct Component {
  std::string name;     // stable key: "weights", "kv_cache", "activations", "logits", "gradients",
                        // "optimizer_states", "master_weights", "cuda_context", ...
  uint64_t bytes = 0;   // per GPU (or host, for Estimate::host)
  std::string formula;  // the formula with this workload's numbers filled in
  bool overhead = false;  // a fixed per-device cost, overridable with --overhead NAME=SIZE
};

// One module of the layout (embedding, layer i, final norm, head, other) under the workload.
struct ModuleCost {
  std::string name;
  ModuleKind kind = ModuleKind::Other;
  int64_t layer = -1;
  uint64_t parameters = 0;
  uint64_t weight_bytes = 0;     // after --dtype / --quant (GGUF: as stored unless re-quantized)
  uint64_t kv_bytes = 0;         // this layer's KV cache for batch × context (0 for non-layers)
  uint64_t trainable_parameters = 0;
  uint64_t train_bytes = 0;      // gradients + master weights + optimizer states + adapter weights,
                                 // unpartitioned (ZeRO-0) and on the GPU (no offload)
  uint64_t stream_bytes = 0;     // nunchaku's streaming slot for it (stream_slot_bytes, the file
                                 // layout as stored); 0 when no checkpoint was given
  uint64_t stream_piece_bytes = 0;  // its routed experts' piece slot (stream_piece_bytes); 0 if none
  // Routed experts inside this layer (part of weight_bytes): a plan may keep them on another
  // device than the rest of the layer (llama.cpp --n-cpu-moe). expert_module is the
  // framework's module that holds them ("model.layers.3.mlp.experts"; "" for GGUF names).
  uint64_t expert_bytes = 0;
  std::string expert_module;
  // nunchaku on a GPU: the layer's mixture of experts, kept in host memory and run by the CPU
  // (not in weight_bytes; estimate's moe_weights host line), and the routed experts' share of it.
  uint64_t cpu_moe_bytes = 0, cpu_moe_expert_bytes = 0;
  // The layer's other parts as device_map keys that do not contain expert_module
  // ("model.layers.3.self_attn", "model.layers.3.mlp.gate", ...): accelerate cannot place a
  // module on one device and one of its submodules on another.
  std::vector<std::string> sibling_modules;
  // False for a component the runtime does not hold in memory (a vision tower under nunchaku's
  // engine, which runs the language model alone): charged nothing, and left out of device maps.
  bool loaded = true;
};

struct Estimate {
  ModelSpec spec;                // as used (head_dim filled in)
  Workload workload;             // resolved: context, prefill_chunk, lora_targets, runtime filled in
  Runtime runtime = Runtime::Nunchaku;
  Target target = Target::Cuda;  // "per GPU" components are per CPU process when Target::Cpu
  double usable_fraction = 1.0;  // of the budget the runtime lets itself use (vLLM: 0.92)
  // Overheads the runtime allocates before it measures its budget, so they sit outside
  // usable_fraction × vram (vLLM: CUDA context, cuBLAS handles); they count in the total.
  uint64_t outside_budget = 0;
  std::vector<std::string> runtime_model;  // attention kernel, prefill, KV layout, preallocation
  bool context_defaulted = false;  // context was min(model max, 4096)
  DType weight_dtype = DType::F16;   // --dtype or the dominant stored float dtype
  DType compute_dtype = DType::F16;  // activations
  DType kv_dtype = DType::F16;
  bool mixed_precision = false;  // training with 16-bit weights: fp32 master copy
  uint64_t parameters = 0;       // logical parameters of what the runtime loads (quantized stores unpacked, no MTP)
  uint64_t active_parameters = 0;  // per token: routed experts counted top_k / experts (= parameters when dense)
  // Weight bytes one decoded token reads (batch 1): every non-expert byte, routed experts × top_k / experts.
  uint64_t weight_bytes_per_token = 0;
  std::vector<std::string> guessed;  // terms taken from generic rules (unknown family, unmodelled parts)
  uint64_t trainable_parameters = 0;
  uint64_t largest_layer_parameters = 0;  // largest leaf module (DeepSpeed's ZeRO-3 term)
  uint64_t kv_bytes_per_token = 0;        // all layers, one sequence, ignoring windows
  uint64_t activation_bytes = 0;          // per device that runs layers (peak transient or saved)
  // nunchaku on GPUs: what a device running layers on the CPU pays instead (the CPU
  // backend's run state: attention scores, kernel thread buffers); 0 = activation_bytes.
  uint64_t cpu_activation_bytes = 0;
  uint64_t logits_bytes = 0;              // on the device that holds the head
  // llama.cpp: its compute buffer as it reserves it (its "compute buffer size" log line: the
  // graph of u tokens, every one an output). On the CPU `activations` charges the pages of it
  // the run writes (docs/measured_llamacpp.md, "The whole process"); on a GPU all of it.
  uint64_t llamacpp_compute_buffer = 0;
  // llama.cpp on the CPU: its own state beside the buffers it logs (the cpu_runtime overhead),
  // and that term in words.
  uint64_t llamacpp_state = 0;
  std::string llamacpp_state_formula;
  // PyTorch on the CPU: what glibc's heap keeps of freed blocks at the peak (the glibc_heap
  // overhead, docs/estimate.md), and the term it is, in words.
  uint64_t heap_retained = 0;
  std::string heap_retained_formula;
  std::vector<Component> gpu;    // per GPU, in table order
  std::vector<Component> host;   // CPU RAM (offload, DeepSpeed's host estimate); may be empty
  // --nodes > 1: bytes per step that cross a node's network link (or stay inside a node, named
  // so), each with its formula and, with --interconnect, the time at that bandwidth (multinode.hpp).
  std::vector<Component> network;
  std::vector<ModuleCost> modules;
  uint64_t per_gpu_total = 0;
  uint64_t host_total = 0;
  std::vector<std::string> notes;  // assumptions worth reading (defaults taken, terms dropped)

  uint64_t component(std::string_view name) const;  // bytes of a GPU component, 0 if absent
};

// Throws Error("estimate.*", exit 2) when the workload is invalid for the model
// (no spec, batch 0, offload without ZeRO, ...).
// Runtime, attention kernel and KV dtype of the workload: nunchaku for inference unless
// named; training: deepspeed with --zero, else transformers.
Estimate estimate(const Checkpoint& ck, const ModelLayout& layout, const Workload& w);

// What estimate() reads from the checkpoint alone, whatever the workload: per module (parallel
// to ModelLayout::modules) its charged tensors with their logical parameters and quantizer
// role, which are routed experts, the largest leaf module, the device-map siblings of its
// experts, and the streaming slot and piece bytes. Built once by callers that estimate one
// checkpoint many times (plan's fixes, the fit searches), so each estimate costs the tensor
// count, not the names' parsing.
struct EstimateBasis {
  struct Tensor {
    size_t index = 0;       // into Checkpoint::tensors
    uint64_t logical = 0;   // parameters (quantized stores by the values they hold)
    TensorRole role = TensorRole::Other;
    bool routed = false;    // a routed expert's weight in a decoder layer
  };
  struct Part {
    std::vector<Tensor> tensors;  // tied aliases left out
    uint64_t parameters = 0;
    uint64_t largest_leaf = 0;    // parameters of the largest leaf module (DeepSpeed's "layer")
    std::string expert_module;    // "model.layers.3.mlp.experts." when it holds routed experts
    std::vector<std::string> sibling_modules;
    uint64_t stream_bytes = 0, stream_piece_bytes = 0;
    uint64_t stored_bytes = 0, stored_expert_bytes = 0;  // Σ nbytes of `tensors` (and of the routed ones)
    uint64_t stored_moe_bytes = 0;  // of its mixture of experts (is_expert_part_role): what a CUDA run keeps on the host
  };
  std::vector<Part> modules;
  bool tied_embeddings = false;  // no head module: the embedding is the output projection
  DType stored = DType::F32;     // the float dtype holding most bytes (estimate_detail::dominant_dtype)
};
EstimateBasis estimate_basis(const Checkpoint& ck, const ModelLayout& layout);
// estimate() with the basis of (ck, layout) already built.
Estimate estimate(const Checkpoint& ck, const ModelLayout& layout, const Workload& w, const EstimateBasis& basis);
// The runtimes that model this mode (inference: nunchaku, transformers, vllm, llama.cpp;
// training: transformers, deepspeed), for --runtime all.
std::vector<Runtime> runtimes_for(Mode m);

// KV cache bytes of one layer for `tokens` per sequence × `batch` sequences:
// 2 × n_kv_heads × head_dim × min(window, tokens) × batch × bytes, or for MLA
// (kv_lora_rank + qk_rope_head_dim) × tokens × batch × bytes.
// How a runtime sizes a cached layer: sliding/chunked layers hold window + window_extra
// cells rounded up to window_pad (llama.cpp: + n_ubatch, padded to 256); MLA layers hold the
// latent, or the expanded K and V where the runtime decompresses them (transformers);
// full_windows: sliding layers hold every token as full ones (llama.cpp --swa-full);
// state_dtype: the dtype of recurrent layers' state where the runtime fixes it (llama.cpp:
// f32 whatever the KV type), else the KV dtype.
struct KvCells {
  int64_t window_extra = 0;
  uint64_t window_pad = 1;
  bool mla_expanded = false;
  bool full_windows = false;
  std::optional<DType> state_dtype;
};
// KV cache (or recurrent state) of decoder layer `layer` for `tokens` positions per sequence.
uint64_t kv_layer_bytes(const ModelSpec& spec, int64_t layer, int64_t tokens, int64_t batch, DType kv_dtype,
                        const KvCells& cells = {});
// Per position, every attention layer holding every token (recurrent state excluded).
uint64_t kv_cache_bytes_per_token(const ModelSpec& spec, DType kv_dtype);
uint64_t kv_cache_bytes(const ModelSpec& spec, int64_t tokens, int64_t batch, DType kv_dtype);

// Default sizes of the named overheads (cuda_context, cublas_workspace). allocator_slack
// is derived from the workload (see docs) unless overridden.
std::vector<std::string> overhead_names();

// vLLM's defaults as the estimate models them and the vllm export passes them (vLLM 0.33,
// docs/estimate.md): CacheConfig.gpu_memory_utilization; the profile run's
// max_num_batched_tokens and max_num_seqs (EngineArgs.get_batch_defaults: they depend on the
// GPU, so the export pins the ones estimated).
constexpr double kVllmGpuMemoryUtilization = 0.92;
constexpr int64_t kVllmMaxNumBatchedTokens = 8192;
constexpr int64_t kVllmMaxNumSeqs = 256;

// llama.cpp's defaults (llama-cli / llama-server, common/common.h): n_batch 2048, n_ubatch 512.
constexpr int64_t kLlamaCppBatch = 2048;
constexpr int64_t kLlamaCppUbatch = 512;

struct Verdict {
  uint64_t vram = 0;          // smallest device given
  uint64_t budget = 0;        // what the runtime may use of it: min(vram, vram × usable_fraction + outside_budget)
  bool fits = false;
  uint64_t margin = 0;        // headroom when it fits, shortfall when not
  std::string text;           // "fits, 2.10 GiB headroom" / "OOM by 3.40 GiB"
};
Verdict verdict(const Estimate& e, uint64_t vram);

// "To make it fit": combinations of changes (batch, context, attention kernel, KV dtype,
// quantization, checkpointing, LoRA, 8-bit optimizer, ZeRO stage + offload, GPU count),
// tried cheapest first, each re-estimated with the same model; a combination is kept when
// it leaves `margin` × budget free and no cheaper kept one is a subset of it.
struct Suggestion {
  std::string what;      // "flash attention + fp8 KV cache", ...
  std::string flags;     // the command-line change: "--attention flash --kv-dtype fp8"
  int cost = 0;          // how much the user gives up (0 = nothing; docs/estimate.md)
  uint64_t per_gpu_total = 0;
  uint64_t headroom = 0;
};
// `basis`: estimate_basis(ck, layout) when the caller has it (else built here).
std::vector<Suggestion> suggest_fits(const Checkpoint& ck, const ModelLayout& layout, const Workload& w,
                                     uint64_t vram, double margin = 0.05, size_t max_suggestions = 5,
                                     const EstimateBasis* basis = nullptr);

nlohmann::json to_json(const Estimate& e);
nlohmann::json to_json(const Verdict& v);
nlohmann::json to_json(const std::vector<Suggestion>& s);

}  // namespace nunchaku
