// Where `nunchaku run` puts the weights and which backend runs them: --plan FILE,
// --vram SIZE[,SIZE] (planned as `plan` does, layers past the budget streamed to the GPU
// from host memory or disk), --cpu-ram (CPU engine, layers past it streamed from disk) or
// --device cpu|cuda[:N] (everything there).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/checkpoint.hpp"
#include "io/placement.hpp"
#include "model/model.hpp"

namespace nunchaku::cli {

struct RunPlacementOptions {
  std::string plan, device = "cpu", vram, cpu_ram;
  int batch_size = 1, threads = 0;  // batch_size 0: --batch-size auto
  int64_t context = 0, prefill_chunk = 0;
  DType kv_dtype = DType::F32;
  bool fast_math = false;  // run --fast-math: the CPU engine's 8-bit activation rows are charged
  // Modules a multimodal checkpoint's run does not load (keep_language_model_noted): a --plan
  // file made for the whole checkpoint may place them; those entries are dropped.
  std::vector<std::string> not_loaded;
};

struct RunPlacement {
  Placement placement;
  Device backend{Device::Kind::Cpu, 0};  // where the ops run: cpu, or the CUDA device that runs what no GPU holds
  std::vector<Device> gpus() const;      // every CUDA device the run uses, in order
  int batch_size = 1;                    // as given, or what auto chose
  std::string batch_reason;              // why auto chose it ("" when given)
};

// --batch-size auto (batch_size 0) is resolved first: the most sequences whose run state fits
// the budget (--vram, --cpu-ram, or the device's free memory) with 5% spare, without
// pushing weights off the device they get at batch 1; at most 256 on a GPU, 16 on the CPU.
// Throws usage.* (exit 2) for contradictory flags, plan.does_not_fit (exit 3) when
// --vram/--cpu-ram cannot hold the run. Several GPUs: each runs the layers the placement
// gives it (engine/backend_split.hpp); what no GPU holds is streamed to `backend`, the last.
RunPlacement run_placement(const RunPlacementOptions& o, const Checkpoint& ck, const ModelLayout& layout);

// --batch-size auto alone (what run_placement resolves first): the sequences, and in `why`
// the budget they fill. estimate calls it to say what run's default will take.
int auto_batch_size(const RunPlacementOptions& o, const Checkpoint& ck, const ModelLayout& layout, std::string& why);

}  // namespace nunchaku::cli

namespace nunchaku::cli {

// GPU memory in use on the run's GPUs above a baseline taken before loading (cudaMemGetInfo:
// everything the process and the driver hold there, not only our allocations), summed over
// the devices at each sample.
struct GpuMemoryProbe {
  std::vector<Device> devices;
  uint64_t base = 0, peak = 0;
  bool known = false;
  explicit GpuMemoryProbe(std::vector<Device> gpus);
  void sample();                 // peak = max(peak, used now - base)
  std::string str() const;       // "cuda:0" or "cuda:0+cuda:1"
};

}  // namespace nunchaku::cli
