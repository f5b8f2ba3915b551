#include "engine/engine.hpp"

#include "engine/device_stream.hpp"

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
  if (setup.device.kind == Device::Kind::Cuda) {
    bool off_device = false;
    for (const ModuleBlock& m : store.modules()) off_device |= m.device != setup.device;
    // Weights the backend cannot read in place are copied to device slots per forward pass.
    if (off_device)
      e.weights = std::make_unique<DeviceStreamProvider>(std::move(e.weights), setup.device.index,
                                                         e.backend->native_stream(), kStreamSlots);
  }
  e.model = std::make_unique<Transformer>(layout, *e.weights, *e.backend, setup.options);
  return e;
}

}  // namespace nunchaku::engine
