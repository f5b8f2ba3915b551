// estimate for a whole diffusers pipeline (model/pipeline.hpp): each part's weights, and the
// GPU memory of the three ways diffusers places a pipeline:
//   pipe.to("cuda")                   every part on the GPU: Σ weights
//   enable_model_cpu_offload()        one part on the GPU at a time (each moves there when it
//                                     runs): the largest part; the others wait in host RAM
//   enable_sequential_cpu_offload()   one leaf module at a time (accelerate hooks per
//                                     module with parameters): the largest leaf module
// plus PyTorch's fixed CUDA costs once. Activations (the denoiser's grow with the image
// resolution, the text encoders' with the prompt) are not modelled: a guessed term, so no
// verdict is a plain "fits".
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "memory/workload.hpp"
#include "model/pipeline.hpp"

namespace nunchaku {

struct PipelinePartCost {
  PipelinePart part;
  uint64_t parameters = 0;
  uint64_t weight_bytes = 0;      // as stored, or as --dtype converts float tensors
  uint64_t largest_leaf_bytes = 0;
  std::string largest_leaf;       // its name ("encoder.block.0.layer.1.DenseReluDense.wo")
  int64_t tensors = 0;
};

struct PipelinePlacement {
  std::string name;      // "all on the GPU", ...
  std::string call;      // "pipe.to(\"cuda\")", ...
  uint64_t gpu_bytes = 0;   // weights on the GPU at the peak + fixed costs
  uint64_t host_bytes = 0;  // weights waiting in host RAM
};

struct PipelineEstimate {
  Pipeline pipeline;
  std::vector<PipelinePartCost> parts;
  uint64_t parameters = 0, weight_bytes = 0;
  uint64_t fixed_bytes = 0;  // CUDA context, cuBLAS workspace, allocator slack (once)
  std::vector<PipelinePlacement> placements;  // all, model offload, sequential offload
  std::vector<std::string> guessed;
  std::vector<std::string> notes;
};

// Throws Error (exit 2) for workloads a pipeline does not take (training, --quant, a runtime
// other than PyTorch, --nodes).
PipelineEstimate estimate_pipeline(const Pipeline& p, const Workload& w);

// The first placement, in the order above, whose GPU bytes fit `vram` (0 = none given);
// -1 when none fits.
int first_fitting(const PipelineEstimate& e, uint64_t vram);

nlohmann::json to_json(const PipelineEstimate& e, uint64_t vram);

}  // namespace nunchaku
