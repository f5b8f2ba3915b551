// Workload options shared by estimate and plan.
#include "cli/workload_options.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "cli/help.hpp"
#include "core/error.hpp"
#include "cuda/device_info.hpp"
#include "format/dtype.hpp"
#include "memory/fsdp.hpp"
#include "memory/quant.hpp"
#include "core/units.hpp"

namespace nunchaku::cli {
namespace {

DType user_dtype(const std::string& s, const char* option) {
  auto d = dtype_from_user(s);
  if (!d) throw Error("usage.dtype", fmt::format("{}: unknown dtype '{}'", option, s), {.hint = "fp32, bf16, fp16, fp8"});
  return *d;
}

}  // namespace

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t p = s.find(sep, start);
    if (p == std::string::npos) p = s.size();
    if (p > start) out.push_back(s.substr(start, p - start));
    start = p + 1;
  }
  return out;
}

namespace {

// "16G", "16G,24G" or "auto" (free memory of the CUDA devices now); 0 stays in the list.
std::vector<uint64_t> read_vram(const std::string& s) {
  std::vector<uint64_t> out;
  if (s.empty()) return out;
  if (s == "auto") {
    std::string why;
    for (const auto& d : cuda::list_devices(&why)) out.push_back(d.free_bytes);
    if (out.empty())
      throw Error("usage.vram_auto", fmt::format("--vram auto: {}", why), {.hint = "give sizes, e.g. --vram 24G"});
    return out;
  }
  if (s.front() == ',' || s.back() == ',' || s.find(",,") != std::string::npos)
    throw Error("usage.size", fmt::format("--vram '{}': an empty size in the list", s),
                {.hint = "one size per GPU, e.g. --vram 16G,24G"});
  for (const auto& part : split(s, ',')) out.push_back(parse_size_or_throw(part, "--vram"));
  if (out.empty()) throw Error("usage.size", "--vram: no size given", {.hint = "e.g. --vram 16G or --vram 16G,24G"});
  return out;
}

}  // namespace

std::vector<uint64_t> parse_vram(const std::string& s) {
  auto out = read_vram(s);
  if (std::find(out.begin(), out.end(), 0) != out.end())
    throw Error("usage.vram_zero", "--vram 0: a GPU with no memory",
                {.hint = "--device cpu estimates a CPU run; `nunchaku plan --vram 0` plans without GPUs"});
  return out;
}

std::vector<uint64_t> parse_vram_for_plan(const std::string& s, std::vector<std::string>& notes) {
  auto out = read_vram(s);
  const auto zeros = std::count(out.begin(), out.end(), 0);
  if (zeros == 0) return out;
  if (zeros < static_cast<long>(out.size()))
    throw Error("usage.vram_zero", fmt::format("--vram {}: a GPU with no memory among the others", s),
                {.hint = "leave that GPU out of the list, or --vram 0 alone for no GPU"});
  notes.push_back("--vram 0: no GPU, planning for the CPU (and disk with --disk)");
  return {};
}

uint64_t parse_bandwidth(const std::string& s, const char* flag) {
  std::string t = s;
  if (t.size() > 2 && t.compare(t.size() - 2, 2, "/s") == 0) t.resize(t.size() - 2);
  for (const char* bits : {"bps", "bit", "b"}) {
    const std::string b = bits;
    if (t.size() > b.size() && t.compare(t.size() - b.size(), b.size(), b) == 0 && std::isalpha(static_cast<unsigned char>(t[t.size() - b.size() - 1]))) {
      // "400Gb": the size parser reads "400GB" (10^9 bytes); a bit is an eighth of that.
      return parse_size_or_throw(t.substr(0, t.size() - b.size()) + "B", flag) / 8;
    }
  }
  return parse_size_or_throw(t, flag);
}

Workload to_workload(const WorkloadOptions& o, size_t n_vram) {
  Workload w;
  w.mode = parse_mode(o.mode);
  w.batch = o.batch;
  w.context = o.context;
  w.prefill_chunk = o.prefill_chunk;
  if (!o.dtype.empty()) w.dtype = user_dtype(o.dtype, "--dtype");
  if (!o.kv_dtype.empty()) w.kv_dtype = user_dtype(o.kv_dtype, "--kv-dtype");
  w.quant = parse_quant(o.quant, o.quant_bits, o.group_size, o.double_quant);
  if (w.quant.scheme == QuantScheme::None && o.double_quant) w.quant.double_quant = true;  // qlora's nf4 base
  w.optimizer = parse_optimizer(o.optimizer);
  w.offload = parse_offload(o.offload);
  w.fsdp = parse_fsdp_strategy(o.fsdp_strategy);
  w.grad_checkpointing = o.grad_ckpt;
  w.flash_attention = o.flash;
  w.all_logits = o.all_logits;
  w.images = o.images;
  w.image_tokens = o.image_tokens;
  w.lora_rank = o.lora_rank;
  w.lora_targets = split(o.lora_targets, ',');
  w.gpus = o.gpus > 0 ? o.gpus : std::max<int>(1, static_cast<int>(n_vram));
  w.nodes = o.nodes;
  if (!o.interconnect.empty()) w.interconnect = parse_bandwidth(o.interconnect);
  w.zero = o.zero;
  if (!o.runtime.empty() && o.runtime != "all") w.runtime = parse_runtime(o.runtime);
  if (o.device == "cpu") w.target = Target::Cpu;
  else if (o.device != "cuda" && o.device != "gpu")
    throw Error("usage.device", fmt::format("--device must be cpu or cuda, not '{}'", o.device));
  w.attention = parse_attention(o.attention);
  if (w.attention == Attention::Flash) w.flash_attention = true;
  w.threads = o.threads;
  w.ubatch = o.ubatch;
  w.steps = o.steps;
  w.swa_full = o.swa_full;
  if (o.no_repack) w.repack = false;
  for (const auto& kv : o.overheads) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      throw Error("usage.overhead", fmt::format("--overhead '{}' is not NAME=SIZE", kv), {.hint = "e.g. --overhead cuda_context=300M"});
    w.overheads[kv.substr(0, eq)] = parse_size_or_throw(kv.substr(eq + 1), "--overhead");
  }
  return w;
}

bool is_all_runtimes(const WorkloadOptions& o) { return o.runtime == "all"; }

void match_gpus(std::vector<uint64_t>& vram, int gpus) {
  if (gpus <= 0 || vram.empty()) return;
  if (vram.size() == 1) {
    vram.assign(static_cast<size_t>(gpus), vram.front());
    return;
  }
  if (vram.size() != static_cast<size_t>(gpus))
    throw Error("usage.gpus", fmt::format("--gpus {} but --vram gives {} sizes", gpus, vram.size()),
                {.hint = "give one size per GPU, or one size and --gpus N"});
}

void add_workload_options(CLI::App* cmd, WorkloadOptions& o) {
  cmd->add_option("--mode", o.mode, "infer | train | lora | qlora")->capture_default_str()->group(kWorkload);
  cmd->add_option("--batch", o.batch, "Sequences per forward pass (training: micro-batch per GPU)")->capture_default_str()->group(kWorkload);
  cmd->add_option("--context", o.context, "Tokens per sequence, prompt + generated (default min(model max, 4096))")->group(kWorkload);
  cmd->add_option("--prefill-chunk", o.prefill_chunk, "Tokens per prefill forward pass (default: the whole context)")->group(kWorkload);
  cmd->add_option("--dtype", o.dtype, "Weight/compute dtype (default: as stored): fp32, bf16, fp16, fp8")->group(kWorkload);
  cmd->add_option("--kv-dtype", o.kv_dtype, "KV cache dtype (default: compute dtype; F16 for GGUF)")->group(kInference);
  cmd->add_option("--quant", o.quant, "What-if weight format: int8, nf4, fp4, gptq, awq, q8_0, q4_0, q4_k_m, ...")->group(kQuantization);
  cmd->add_option("--quant-bits", o.quant_bits, "GPTQ/AWQ bits")->capture_default_str()->group(kQuantization);
  cmd->add_option("--group-size", o.group_size, "GPTQ/AWQ group size (-1 = per row)")->capture_default_str()->group(kQuantization);
  cmd->add_flag("--double-quant", o.double_quant, "nf4/fp4 with bitsandbytes double quantization")->group(kQuantization);
  cmd->add_option("--optimizer", o.optimizer, "adamw | adamw8bit | sgd | sgd-momentum | adafactor | lion")->capture_default_str()->group(kTraining);
  cmd->add_flag("--grad-checkpointing", o.grad_ckpt, "Full activation checkpointing (training)")->group(kTraining);
  cmd->add_flag("--flash-attention", o.flash, "No materialized attention scores (= --attention flash)")->group(kInference);
  cmd->add_option("--attention", o.attention, "eager | sdpa | flash (default: the runtime's own)")->group(kInference);
  cmd->add_option("--runtime", o.runtime,
                  "nunchaku | transformers | vllm | llama.cpp | deepspeed | fsdp | all (default: nunchaku; training: "
                  "transformers, deepspeed with --zero or --nodes; fsdp: PyTorch FSDP2 via accelerate/torchrun)")->group(kWorkload);
  cmd->add_option("--device", o.device, "cuda | cpu (CPU: no GPU overheads, the runtime's CPU fixed cost)")->capture_default_str()->group(kHardware);
  cmd->add_option("--threads", o.threads, "nunchaku: CPU threads of the run (default: this machine's)")->group(kHardware);
  cmd->add_option("--ubatch", o.ubatch, "llama.cpp: micro-batch n_ubatch, its -ub (default 512); --prefill-chunk is its n_batch (default 2048)")->group(kInference);
  cmd->add_flag("--swa-full", o.swa_full, "llama.cpp: full-size cache for sliding-window layers, its --swa-full (llama-cpp-python's default)")->group(kInference);
  cmd->add_flag("--no-repack", o.no_repack, "llama.cpp: no CPU_REPACK copy of the weights, its --no-repack")->group(kInference);
  cmd->add_option("--images", o.images, "Images per sequence (multimodal models): each adds its tokens to the "
                  "context, and runtimes load the vision tower")->group(kWorkload);
  cmd->add_option("--image-tokens", o.image_tokens, "Context tokens per image (default: the model's; the largest "
                  "its processor makes where it follows the image size)")->group(kWorkload);
  cmd->add_flag("--all-logits", o.all_logits, "Logits for every position, not just the last (inference)")->group(kInference);
  cmd->add_option("--steps", o.steps, "Training: 1 = the first optimizer step's peak (no optimizer states before step()); "
                  "default: the steady state of every later step")->group(kTraining);
  cmd->add_option("--lora-rank", o.lora_rank, "LoRA rank")->capture_default_str()->group(kTraining);
  cmd->add_option("--lora-targets", o.lora_targets, "Comma list of module names, or all-linear (default: PEFT's per-architecture default)")->group(kTraining);
  cmd->add_option("--gpus", o.gpus, "GPU count, per node with --nodes (default: the number of --vram sizes, else 1)")->group(kHardware);
  cmd->add_option("--nodes", o.nodes, "Machines of --gpus GPUs each (--vram is per GPU): DeepSpeed and FSDP training shard "
                  "over nodes x GPUs ranks, host memory is per node")->capture_default_str()->group(kHardware);
  cmd->add_option("--interconnect", o.interconnect, "Bandwidth of a node's link to the others, e.g. 400Gb (bits/s) or 50GB/s: "
                  "--explain times the bytes a step sends across nodes")->group(kHardware);
  cmd->add_option("--zero", o.zero, "DeepSpeed ZeRO stage 0..3 (training)")->capture_default_str()->group(kTraining);
  cmd->add_option("--offload", o.offload, "ZeRO-Offload: none | optimizer | params; fsdp: params = FSDP's CPU offload of "
                  "parameters, gradients and optimizer states")->capture_default_str()->group(kTraining);
  cmd->add_option("--fsdp-strategy", o.fsdp_strategy, "fsdp: full (shard over nodes x GPUs ranks) | hybrid (shard within "
                  "a node, replicate across nodes)")->capture_default_str()->group(kTraining);
  cmd->add_option("--overhead", o.overheads, "Override a named overhead: cuda_context=300M, cublas_workspace=8M, allocator_slack=0")->group(kHardware);
}

}  // namespace nunchaku::cli

