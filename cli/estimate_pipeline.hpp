// `nunchaku estimate PIPELINE/`: a diffusers pipeline folder (model_index.json), each part
// sized and the three ways diffusers places it held against --vram
// (memory/pipeline_estimate.hpp, docs/estimate.md "Diffusers pipelines").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memory/workload.hpp"
#include "model/pipeline.hpp"

namespace nunchaku::cli {

// Prints the estimate (text, or the JSON document with `json`); the exit code: 0, or 3 when
// no placement fits the smallest --vram.
int estimate_pipeline_command(const Pipeline& p, const Workload& w, const std::vector<uint64_t>& vram, bool json,
                              const std::string& path);

}  // namespace nunchaku::cli
