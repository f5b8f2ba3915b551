// Where each module of a checkpoint goes when it is loaded: the input of `load`.
//
// Plan file (JSON, the shape `nunchaku plan --format json` emits):
//   {"modules": {"model.embed_tokens": "cuda:0", "model.layers.0": "cuda:0", ...,
//                "model.layers.31": "cpu", "lm_head": "disk"}}
// Every module of the checkpoint (describe_model's names) must be listed; other
// top-level keys are ignored. Devices: "cuda:N" (or "cuda" = "cuda:0"), "cpu", "disk".
//
// INTERIM: until the planner (issue 3) exists, --vram/--cpu-ram budgets are turned into
// a placement by fill_contiguous(): modules in order fill cuda:0 up to the VRAM budget,
// then the CPU up to the RAM budget, then the rest stays on disk. No reserves for KV
// cache, activations or CUDA context are taken out; the planner will do that.
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
  std::string source;                     // "plan file X", "--device cpu", "interim fill (--vram/--cpu-ram)"
  std::string file;                       // the plan file, "" when not from a file

  // Throws Error("plan.missing_module") when the module is not placed.
  Device device_of(const std::string& module) const;
};

// Parses the plan JSON text. Errors (exit 2): plan.json (malformed), plan.schema (no
// "modules" object or a non-string value), plan.device (unknown device string).
Placement parse_plan(const std::string& text, const std::string& file = "");
Placement read_plan_file(const std::string& path);

// Checks a placement against a layout: every module placed (plan.missing_module), no
// names the checkpoint lacks (plan.unknown_module).
void check_placement(const Placement& p, const ModelLayout& layout);

// Everything on one device.
Placement place_all(const ModelLayout& layout, Device d);

// INTERIM contiguous fill (see the header comment). `vram` = 0 puts nothing on the GPU;
// cpu_ram = UINT64_MAX means unlimited host memory.
Placement fill_contiguous(const ModelLayout& layout, uint64_t vram, uint64_t cpu_ram, int cuda_device = 0);

}  // namespace nunchaku
