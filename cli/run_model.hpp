// The model as `run` and `bench` open it: placed (run_placement.hpp), loaded, and the engine
// built over the loaded weights, with the --fast-math note when it cannot apply. The one
// place the CLI turns a checkpoint into a running engine.
#pragma once

#include <memory>
#include <string>

#include "cli/run_placement.hpp"
#include "engine/engine.hpp"
#include "io/loader.hpp"

namespace nunchaku::cli {

class TraceSession;

struct RunModelOptions {
  RunPlacementOptions place;
  std::string offload = "stream";  // stream (bounded pool) | mmap: how disk modules are read
  bool quiet = false;              // no notes on stderr
};

// What a run needs of the model: the weights (which must outlive the engine) and the engine.
struct RunModel {
  LoadResult loaded;
  engine::Engine engine;  // backend, weight provider (streamed disk modules) and model
  engine::Transformer* model = nullptr;
  std::unique_ptr<GpuMemoryProbe> gpu;  // when the backend is CUDA
  int batch_size = 1;                   // as given, or what --batch-size auto chose
  Device backend{Device::Kind::Cpu, 0};  // where the ops run (cpu, or the CUDA device that runs what no GPU holds)
  engine::EngineSetup setup;             // what the engine was made with
};

// A multimodal checkpoint: its language model only (keep_language_model: the vision tower,
// projector and audio encoder are not placed, read or charged), with one note on stderr
// naming what is skipped unless `quiet`. Call before load_run_model; a text-only checkpoint
// is left as it is.
// Returns the names of the modules removed.
std::vector<std::string> keep_language_model_noted(Checkpoint& ck, ModelLayout& layout, bool quiet);

// Throws what run_placement, the load (load.interrupted on SIGINT) and the engine throw.
// `tr` (may be null): --trace watches the GPUs the run uses.
std::unique_ptr<RunModel> load_run_model(const RunModelOptions& o, const Checkpoint& ck, const ModelLayout& layout,
                                         TraceSession* tr);

// The engine made again over the same loaded weights with `threads` CPU threads (bench -t 1,2,4);
// the old one is freed first. `ck` and `layout` as given to load_run_model.
void remake_engine(RunModel& m, const Checkpoint& ck, const ModelLayout& layout, int threads);

}  // namespace nunchaku::cli
