// An engine ready to run: backend, weight provider and model built together from a loaded
// checkpoint, as `run` and the tests need them. Modules the load left on disk are streamed
// through a bounded pool when `stream` is set, else read through their file mappings.
#pragma once

#include <memory>
#include <optional>

#include "engine/backend.hpp"
#include "engine/model.hpp"
#include "engine/stream_provider.hpp"
#include "engine/weights.hpp"
#include "format/checkpoint.hpp"

namespace nunchaku::engine {

struct EngineSetup {
  EngineOptions options;
  int threads = 0;                      // CPU backend threads; 0 = all hardware threads
  std::optional<StreamOptions> stream;  // stream the disk modules (else: their mappings)
  Device device{Device::Kind::Cpu, 0};  // where the run state lives and the ops run: cpu or cuda:N
};

struct Engine {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<WeightProvider> weights;
  std::unique_ptr<Transformer> model;
};

// The layout and store must outlive the engine.
Engine make_engine(const Checkpoint& ck, const ModelLayout& layout, const WeightStore& store, const EngineSetup& setup);

}  // namespace nunchaku::engine
