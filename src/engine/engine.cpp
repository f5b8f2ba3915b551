#include "engine/engine.hpp"

namespace nunchaku::engine {

Engine make_engine(const Checkpoint& ck, const ModelLayout& layout, const WeightStore& store, const EngineSetup& setup) {
  Engine e;
  e.backend = setup.device.kind == Device::Kind::Cuda ? make_cuda_backend(setup.device.index)
                                                      : make_cpu_backend(setup.threads);
  bool any_disk = false;
  for (const ModuleBlock& m : store.modules()) any_disk |= m.device.kind == Device::Kind::Disk;
  if (setup.stream && any_disk)
    e.weights = std::make_unique<StreamedProvider>(ck, layout, store, *setup.stream);
  else
    e.weights = std::make_unique<ResidentProvider>(layout, store);
  e.model = std::make_unique<Transformer>(layout, *e.weights, *e.backend, setup.options);
  return e;
}

}  // namespace nunchaku::engine
