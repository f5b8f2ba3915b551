// `plan --nodes N`: the plans that span machines (vLLM TP x PP) and their exports, apart
// from the one-machine device map of plan.cpp.
#pragma once

#include <string>
#include <vector>

#include "format/checkpoint.hpp"
#include "memory/workload.hpp"
#include "model/model.hpp"

namespace nunchaku::cli {

struct MultinodeRequest {
  std::string format, output, model;  // model: what the launch lines name (the PATH given)
  uint64_t vram = 0;                  // per GPU
  std::vector<std::string> notes;
};

// Throws usage.nodes for a format that does not span nodes. Returns the exit code.
int run_plan_multinode(const MultinodeRequest& q, const Checkpoint& ck, const ModelLayout& layout, const Workload& w);

}  // namespace nunchaku::cli
