// `plan --format fsdp`: an accelerate config.yaml for PyTorch FSDP2 over --nodes N of --gpus G
// (distributed_type FSDP, num_machines, num_processes = N × G, machine_rank 0 for each node
// to set, main_process_ip/port placeholders, fsdp_config for the strategy and offload that
// fit), and the `accelerate launch` line each node runs (docs/plan.md, "Several nodes").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/checkpoint.hpp"
#include "memory/workload.hpp"
#include "model/model.hpp"

namespace nunchaku {

struct FsdpExport {
  std::string yaml;                // config.yaml
  std::string launch;              // fsdp_launch.sh: comments and the accelerate launch line
  std::vector<std::string> lines;  // the launch lines alone (for the notes)
  bool fits = false;
  FsdpStrategy strategy = FsdpStrategy::Full;
  Offload offload = Offload::None;
  uint64_t per_gpu_total = 0, host_total = 0;
  std::string why;                 // what a rank holds (rank_breakdown)
  std::vector<std::string> notes;
};

// The first setting whose estimate fits `vram` per GPU, from the one asked: the --fsdp-strategy
// given (hybrid, then full when hybrid does not fit), without offload, then with FSDP's CPU
// offload; never below what was asked (--offload params stays). None fits: the last, fits false.
// `config_file`: the name the launch line gives to --config_file.
FsdpExport fsdp_accelerate_config(const Checkpoint& ck, const ModelLayout& layout, const Workload& w, uint64_t vram,
                                  const std::string& config_file);

}  // namespace nunchaku
