// Device maps that do not OOM at run time: which device holds each module (embedding,
// layer i, final norm, head), and what every device is charged for holding it.
//
// Charging (docs/plan.md): a GPU that holds modules M pays
//   Σ_M weights + KV cache + training states     (estimate()'s per-module costs)
// + activations (inference: once if it runs a layer; training: its layers' share)
// + logits (if it holds the head, or the tied embedding that serves as head)
// + every named overhead (cuda_context, cublas_workspace, allocator_slack)
// + staging for streamed layers (--offload-exec gpu: two slots of the largest offloaded
//   module on the first GPU, which runs them, plus their KV cache).
// The CPU pays its modules' weights, and (--offload-exec cpu, the default: offloaded
// layers run on the CPU, as llama.cpp and `nunchaku run` do) the KV cache, activations
// and logits of every layer it or the disk holds. Disk modules are read-only mmap views.
//
// Decoder layers are never split (modules are the unit) except that an MoE layer's routed
// experts may live apart from the rest (PlanRequest::split_experts); a head tied to the embedding
// stays with the embedding.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/placement.hpp"
#include "memory/estimate.hpp"

namespace nunchaku {

enum class Strategy { Balanced, Sequential, Accelerate };
enum class OffloadExec { Cpu, Gpu };
std::string_view strategy_name(Strategy s);  // "balanced", "sequential", "accelerate"
Strategy parse_strategy(std::string_view s);  // Error usage.strategy (exit 2)

struct PlanRequest {
  std::vector<uint64_t> vram;        // budget per GPU, cuda:0, cuda:1, ... (may be empty)
  uint64_t cpu_ram = 0;              // host budget
  bool allow_disk = false;           // modules may stay on disk (mmap, read on use)
  Strategy strategy = Strategy::Balanced;
  OffloadExec offload_exec = OffloadExec::Cpu;
  // MoE: a layer's routed experts may live apart from the rest of the layer (attention,
  // norms, router, shared experts stay on the GPU; experts fill what is left, last layers
  // first, as llama.cpp's --n-cpu-moe keeps the first N layers' experts on the CPU). Without
  // GPUs, for nunchaku's engine with --disk: the first layers' experts go to disk (read expert
  // by expert) before any whole module does.
  bool split_experts = false;
};

// What one device holds and pays. Bytes; budget UINT64_MAX = unlimited (disk).
struct DeviceCharge {
  Device device;
  uint64_t budget = 0;
  std::vector<size_t> modules;       // indices into Estimate::modules
  size_t layers = 0;                 // decoder layers held
  size_t expert_layers = 0;          // layers whose routed experts it holds apart from the layer
  int64_t first_layer = -1, last_layer = -1;
  uint64_t weights = 0, kv_cache = 0, train_states = 0, activations = 0, logits = 0;
  uint64_t overheads = 0;            // cuda_context + cublas_workspace + allocator_slack (GPUs in use)
  uint64_t staging = 0;              // double buffer for streamed layers (first GPU, --offload-exec gpu)
  uint64_t total() const { return weights + kv_cache + train_states + activations + logits + overheads + staging; }
  bool fits() const { return total() <= budget; }
};

struct DevicePlan {
  Strategy strategy = Strategy::Balanced;
  OffloadExec offload_exec = OffloadExec::Cpu;
  std::vector<Device> module_device;   // parallel to Estimate::modules
  // Where each module's routed experts are (parallel to Estimate::modules); empty when every
  // layer's experts are where the layer is.
  std::vector<Device> expert_device;
  std::vector<DeviceCharge> devices;   // cuda:0.., cpu, disk (disk only when it holds something)
  bool fits = false;                   // every device within budget, every module placed
  std::string shortfall;               // what is short when !fits ("cpu: needs 70.2 GiB, has 64.0 GiB")
  std::vector<std::string> notes;

  Placement placement(const Estimate& e) const;  // module name -> device, for load/run
  size_t gpu_layers() const;
};

// Per-module costs of the weights alone (no model description: KV cache and activations
// unknown), with the named GPU overheads; for planning a plain load of any checkpoint.
Estimate weights_only_estimate(const ModelLayout& layout, const std::map<std::string, uint64_t>& overheads = {});

// The placement `load`/`run` use for budgets: the balanced plan of `e`, the rest of the
// model on disk; MoE routed experts leave first, as `plan` moves them (split_experts: off the
// GPUs before attention, and on the CPU engine to disk before whole layers), given in the
// placement's `experts`. Throws Error("plan.does_not_fit", exit 3) with the shortfall.
Placement plan_placement(const Estimate& e, std::vector<uint64_t> vram, uint64_t cpu_ram);

// Plans with the request's strategy, each GPU's budget the share of it the runtime uses
// (estimate's verdict budget: vLLM's --gpu-memory-utilization). Never throws for "does not
// fit": check DevicePlan::fits.
// Strategy::Accelerate needs the layout and checkpoint; use plan_accelerate() for it.
DevicePlan make_plan(const Estimate& e, const PlanRequest& r);

// The charges of an arbitrary assignment (used by every strategy and by tests).
DevicePlan charge_plan(const Estimate& e, const PlanRequest& r, const std::vector<Device>& module_device,
                       const std::vector<Device>& expert_device = {});
// Layers whose routed experts the plan keeps off the GPUs (ascending); empty for a dense model.
std::vector<int64_t> cpu_expert_layers(const DevicePlan& p, const Estimate& e);

// The smallest budget per GPU (the same on each of `gpus` devices) that holds every module
// on the GPUs with the balanced strategy; nullopt when even 2^63 bytes would not.
std::optional<uint64_t> min_vram(const Estimate& e, int gpus, OffloadExec exec = OffloadExec::Cpu);

// MoE: the smallest budget per GPU that holds every module except the routed experts (which
// then live in host memory): attention, norms, router, shared experts, KV cache, embedding and
// head, with the runtime's overheads. nullopt for a dense model.
std::optional<uint64_t> min_vram_without_experts(const Estimate& e, int gpus);

nlohmann::json to_json(const DevicePlan& p, const Estimate& e);

}  // namespace nunchaku
