// What a plan means in words, and what would make a plan that does not fit fit.
//
// plan_verdict(): one line naming the outcome ("fits on the GPUs: all 32 layers",
// "fits with offload: 20 of 32 layers on GPUs, 12 on the CPU", "runs on the CPU: no layer
// fits in 4.00 GiB of VRAM", "does NOT fit: cpu: needs ..."). Without a model description
// (num_layers 0) it counts modules instead.
//
// plan_fixes(): one change at a time (then --disk with each), every candidate re-planned
// with the caller's own planner, cheapest first: --disk, more --cpu-ram (when given),
// 8-bit weights, a shorter context, 4-bit weights, more GPUs.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "memory/plan.hpp"

namespace nunchaku {

// The verdict vocabulary estimate and plan share (JSON `verdict.status`): everything on the
// GPUs (or, without a GPU budget, on the CPU it targets), some modules on the CPU or disk,
// or out of memory.
inline constexpr std::string_view kFits = "fits", kFitsWithOffload = "fits_with_offload", kOom = "oom";
std::string_view plan_status(const DevicePlan& p);
// `e` (optional) names the modules other than decoder layers that sit off the GPUs.
std::string plan_verdict(const DevicePlan& p, size_t num_layers, const Estimate* e = nullptr);
// The least budget - charge over the devices that hold something (negative: short).
int64_t plan_headroom(const DevicePlan& p);
// {"fits", "status", "text": plan_verdict(), "headroom_bytes", "shortfall": what is short, null when it fits}.
nlohmann::json verdict_json(const DevicePlan& p, size_t num_layers, const Estimate* e = nullptr);

struct PlanFix {
  std::string flags;    // the command-line change: "--disk", "--quant q4_k_m", "--vram 8.00G --gpus 3"
  std::string what;     // "keep the tail on disk (read on use)"
  std::string verdict;  // plan_verdict() of the re-planned map
  std::string status;   // plan_status() of it
  int64_t headroom = 0; // plan_headroom() of it
};

// Plans `w` against `r` the way the caller does (strategy, export runtime); may throw Error
// for an invalid combination, which drops that candidate.
using Replan = std::function<DevicePlan(const Workload& w, const PlanRequest& r)>;

struct PlanFixInput {
  Workload workload;       // as planned (its runtime and quant decide the candidates)
  PlanRequest request;     // as planned
  int64_t context = 0;     // the context the plan used (the estimate's, defaults resolved)
  size_t num_layers = 0;   // for the verdict words
  bool cpu_ram_given = false;
  const Estimate* names = nullptr;  // the planned estimate: module names for the verdicts
};

std::vector<PlanFix> plan_fixes(const PlanFixInput& in, const Replan& replan, size_t max_fixes = 5);

nlohmann::json to_json(const std::vector<PlanFix>& fixes);

// estimate's partial-offload answer: the plan `nunchaku plan` makes (make_plan, balanced,
// routed experts split off first) for the same estimate on `vram` with `cpu_ram` of host
// memory, when it fits with offload; nothing when it does not fit or needs no offload.
struct OffloadAnswer {
  std::string flags;            // what plan takes on top of estimate's own flags ("" but for --runtime all or a quant)
  std::string what;             // the change beside the offload ("4-bit weights (q4_k_m)"); "" for the weights as they are
  std::string verdict;          // plan_verdict() of that plan
  uint64_t off_gpu_weights = 0; // weight bytes held by the CPU (and disk): read there per token
  uint64_t weights = 0;         // all weight bytes
};
std::optional<OffloadAnswer> offload_answer(const Estimate& e, const std::vector<uint64_t>& vram, uint64_t cpu_ram);

// The runtime's 8- and 4-bit weights, as plan's fixes and estimate's offload answer try them:
// none for training or weights already quantized.
struct QuantWhatIf {
  std::string flags, what;  // "--quant q4_k_m", "4-bit weights (q4_k_m)"
  QuantSpec spec;
};
std::vector<QuantWhatIf> quant_whatifs(const Workload& w);

}  // namespace nunchaku
