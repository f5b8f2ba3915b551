// Where each module of a checkpoint goes when it is loaded: the input of `load`.
//
// Plan file (JSON, the shape `nunchaku plan --format json` emits):
//   {"device_map": {"model.embed_tokens": "cuda:0", "model.layers.0": "cuda:0", ...,
//                   "model.layers.31": "cpu", "lm_head": "disk"}}
// (plans from format_version 1 name the same object "modules"; both are read).
// Every module of the checkpoint (describe_model's names) must be listed; other
// top-level keys are ignored. Devices: "cuda:N" (or "cuda" = "cuda:0"), "cpu", "disk".
// An optional "expert_map" {"model.layers.3": "disk", ...} places a MoE layer's routed
// experts apart from the rest of the layer (plan's tensor-granular MoE plans): the loader
// puts those tensors there, and the engine reads experts on disk expert by expert.
//
// Budgets (--vram/--cpu-ram) become a placement through the planner (memory/plan.hpp),
// which reserves KV cache, activations and the CUDA context on each device.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "model/model.hpp"

namespace nunchaku {

struct Device {
  enum class Kind { Cuda, Cpu, Disk };
  Kind kind = Kind::Cpu;
  int index = 0;  // CUDA ordinal; 0 otherwise

  std::string str() const;  // "cuda:0", "cpu", "disk"
  bool operator==(const Device&) const = default;
  auto operator<=>(const Device&) const = default;
};

// "cuda:1", "cuda", "cpu", "disk"; nullopt otherwise.
std::optional<Device> parse_device(std::string_view text);

struct Placement {
  std::map<std::string, Device> modules;  // module name -> device
  std::map<std::string, Device> experts;  // MoE layer -> device of its routed experts, where apart
  // The experts' entries move what the experts' CPU part reads (is_expert_part_role: router,
  // biases, scales and the shared expert's gate too, its matrices staying with the layer),
  // not only the routed experts: a GPU run, whose experts run on the CPU (run sets it; not
  // read from plan files).
  bool moe_on_host = false;
  std::string source;                     // "plan file X", "--device cpu", "nunchaku plan (balanced)"
  std::string file;                       // the plan file, "" when not from a file

  // Throws Error("plan.missing_module") when the module is not placed.
  Device device_of(const std::string& module) const;
};

// Parses the plan JSON text. Errors (exit 2): plan.json (malformed), plan.schema (no
// "device_map" or "modules" object, or a non-string value), plan.device (unknown device string).
Placement parse_plan(const std::string& text, const std::string& file = "");
Placement read_plan_file(const std::string& path);

// Checks a placement against a layout: every module placed (plan.missing_module), no
// names the checkpoint lacks (plan.unknown_module); an expert_map entry names a layer with
// routed-expert tensors (plan.no_experts).
void check_placement(const Placement& p, const ModelLayout& layout);

// Everything on one device.
Placement place_all(const ModelLayout& layout, Device d);

}  // namespace nunchaku
