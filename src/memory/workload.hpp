// What the user wants to do with the model, shared by `estimate` and `plan`:
// the same options mean the same thing in both, and plan charges devices with
// the per-module numbers that estimate() computes from this struct.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "format/dtype.hpp"

namespace nunchaku {

enum class Mode { Infer, Train, LoRA, QLoRA };
enum class Optimizer { AdamW, AdamW8bit, SGD, SGDMomentum, Adafactor, Lion };
enum class Offload { None, Optimizer, Params };  // ZeRO-Offload targets (FSDP: Params, its CPUOffload)
// The program that will run the workload: each allocates differently (docs/estimate.md).
enum class Runtime { Nunchaku, Transformers, Vllm, LlamaCpp, DeepSpeed, Fsdp };
// FSDP's sharding (--fsdp-strategy, src/memory/fsdp.hpp): over every rank of every node
// (FULL_SHARD, fully_shard on a 1-D mesh), or within a node and replicated across nodes
// (HYBRID_SHARD, fully_shard on a (nodes, GPUs) mesh).
enum class FsdpStrategy { Full, Hybrid };
enum class Target { Cuda, Cpu };  // --device: where the workload runs
// Attention kernel: eager materializes the score matrix; sdpa/flash do not.
enum class Attention { Default, Eager, Sdpa, Flash };

std::string_view mode_name(Mode m);            // "infer", "train", "lora", "qlora"
std::string_view optimizer_name(Optimizer o);  // "adamw", "adamw8bit", "sgd", ...
std::string_view offload_name(Offload o);      // "none", "optimizer", "params"
// Throw Error("usage.<option>", exit 2) on an unknown name.
Mode parse_mode(std::string_view s);
Optimizer parse_optimizer(std::string_view s);
Offload parse_offload(std::string_view s);
std::string_view runtime_name(Runtime r);      // "nunchaku", "transformers", "vllm", "llama.cpp", "deepspeed", "fsdp"
Runtime parse_runtime(std::string_view s);     // Error usage.runtime (exit 2)
std::string_view attention_name(Attention a);  // "default", "eager", "sdpa", "flash"
Attention parse_attention(std::string_view s);

// A what-if weight format (--quant). None means "weights as stored (or --dtype)".
enum class QuantScheme { None, Int8, NF4, FP4, GPTQ, AWQ, GGML };

struct QuantSpec {
  QuantScheme scheme = QuantScheme::None;
  int bits = 4;              // GPTQ/AWQ: 2, 3, 4 or 8
  int group_size = 128;      // GPTQ/AWQ: input features per scale/zero group; -1 = one group per row
  bool double_quant = false; // NF4/FP4: bitsandbytes bnb_4bit_use_double_quant
  std::string ggml;          // GGML: llama.cpp ftype name, lower case ("q4_k_m", "q8_0", ...)

  std::string label() const; // "nf4+dq", "gptq-4bit-g128", "q4_k_m", "" for None
};

struct Workload {
  Mode mode = Mode::Infer;
  int64_t batch = 1;
  int64_t context = 0;        // tokens per sequence (prompt + generated); 0 = min(model max, 4096)
  // Images per sequence (--images) and context tokens per image (--image-tokens; 0 = the
  // model's). estimate() adds images x tokens to `context` (the text's) when it resolves it.
  int64_t images = 0;
  int64_t image_tokens = 0;
  bool images_in_context = false;  // set once estimate() has added them
  int64_t prefill_chunk = 0;  // tokens per forward pass during prefill; 0 = the whole context
  std::optional<DType> dtype;     // weight/compute dtype; nullopt = as stored
  std::optional<DType> kv_dtype;  // nullopt = compute dtype (F16 for GGUF, as llama.cpp)
  QuantSpec quant;
  Optimizer optimizer = Optimizer::AdamW;
  bool grad_checkpointing = false;
  bool flash_attention = false;
  bool all_logits = false;    // logits for every position, not just the last
  int64_t lora_rank = 16;
  std::vector<std::string> lora_targets;  // module names ("q_proj"); empty = q_proj,v_proj (PEFT's llama default); "all-linear"
  int gpus = 1;               // GPUs per node (DeepSpeed's num_gpus_per_node)
  int nodes = 1;              // machines of `gpus` GPUs each (--nodes; DeepSpeed's num_nodes)
  uint64_t interconnect = 0;  // bytes per second of a node's link to the others (--interconnect); 0 = not given
  int zero = 0;               // ZeRO stage 0..3 (training modes)
  Offload offload = Offload::None;
  FsdpStrategy fsdp = FsdpStrategy::Full;  // --runtime fsdp: --fsdp-strategy full | hybrid
  // nullopt: nunchaku for inference, deepspeed for training with --zero, else transformers.
  std::optional<Runtime> runtime;
  Target target = Target::Cuda;
  // A plan with no GPU budget places every module in host memory or on disk: nunchaku's
  // mixtures of experts are then not split off a GPU (estimate's moe_weights host line).
  bool no_gpu_placement = false;
  Attention attention = Attention::Default;  // Default: the runtime's own (flash_attention forces Flash)
  int threads = 0;            // nunchaku: CPU threads (attention scratch per thread); 0 = this machine's
  // llama.cpp (docs/estimate.md): its micro-batch n_ubatch (-ub; 0 = its default 512; the
  // logical batch n_batch is --prefill-chunk, default 2048 as llama-cli/llama-server), its
  // --swa-full (sliding-window layers keep a full-size cache), and weight repacking
  // (CPU_REPACK: nullopt = as this CPU qualifies, true = as an AVX-512 CPU, false = llama.cpp's
  // --no-repack).
  int64_t ubatch = 0;
  // Training: the optimizer steps the peak is asked for. 0 = the steady state (every step
  // after the first: the optimizer's states exist during forward and backward); 1 = the first
  // step, whose states are made in step() after backward has freed the activations.
  int64_t steps = 0;
  bool swa_full = false;
  std::optional<bool> repack;
  // Overrides for the named overheads (cuda_context, cublas_workspace, allocator_slack,
  // cpu_runtime, cuda_graphs, glibc_heap).
  std::map<std::string, uint64_t> overheads;

  // Processes with a GPU each over every node (DeepSpeed's total_gpus, vLLM's TP x PP).
  uint64_t ranks() const { return uint64_t(gpus < 1 ? 1 : gpus) * uint64_t(nodes < 1 ? 1 : nodes); }
};

}  // namespace nunchaku
