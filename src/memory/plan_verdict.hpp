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
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "memory/plan.hpp"

namespace nunchaku {

std::string plan_verdict(const DevicePlan& p, size_t num_layers);
// {"fits", "text": plan_verdict(), "shortfall": what is short, null when it fits}.
nlohmann::json verdict_json(const DevicePlan& p, size_t num_layers);

struct PlanFix {
  std::string flags;    // the command-line change: "--disk", "--quant q4_k_m", "--vram 8.00G --gpus 3"
  std::string what;     // "keep the tail on disk (read on use)"
  std::string verdict;  // plan_verdict() of the re-planned map
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
};

std::vector<PlanFix> plan_fixes(const PlanFixInput& in, const Replan& replan, size_t max_fixes = 5);

nlohmann::json to_json(const std::vector<PlanFix>& fixes);

}  // namespace nunchaku
