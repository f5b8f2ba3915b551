#include "engine/engine.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "core/error.hpp"
#include "engine/backend_split.hpp"
#include "engine/bind.hpp"
#include "engine/device_stream.hpp"

namespace nunchaku::engine {
namespace {

// Where module m's weights are: its first tensor's device, past the mixture of experts a CPU
// part may run from host memory (the rest of a module is placed whole).
Device module_device(const WeightProvider& w, size_t m, const ModelLayout* layout = nullptr) {
  auto info = w.info(m);
  size_t i = 0;
  if (layout && m < layout->modules.size())
    while (i + 1 < info.size() && i < layout->modules[m].roles.size() && is_expert_part_role(layout->modules[m].roles[i])) ++i;
  return info.empty() ? Device{Device::Kind::Cpu, 0} : info[i].device;
}

// Whether some layer has a router (a mixture of experts).
bool has_moe(const ModelLayout& layout) {
  return std::any_of(layout.modules.begin(), layout.modules.end(), [](const Module& m) {
    return m.kind == ModuleKind::Layer && std::find(m.roles.begin(), m.roles.end(), Role::Router) != m.roles.end();
  });
}

// Several GPUs hold weights: one CUDA backend per GPU, each layer run where its weights are;
// layers off every GPU (streamed) run on `stream`, as do an embedding or head off every GPU.
// `moe_threads` >= 0: a CPU backend of that many threads (0 = all) runs every layer's mixture of
// experts (the CUDA backend runs none: KTransformers' split, attention on the GPUs).
std::unique_ptr<Backend> make_gpu_split(const ModelLayout& layout, const WeightProvider& w, const std::set<Device>& gpus,
                                        Device stream, int moe_threads) {
  std::vector<Device> order(gpus.begin(), gpus.end());
  std::vector<std::unique_ptr<Backend>> parts;
  for (Device d : order) parts.push_back(make_cuda_backend(d.index));
  auto part_of = [&](size_t m) {
    const Device d = module_device(w, m, &layout);
    const Device at = d.kind == Device::Kind::Cuda ? d : stream;
    return int(std::find(order.begin(), order.end(), at) - order.begin());
  };
  const ModelBinding b = bind_modules(layout);
  SplitLayout how;
  for (const auto& L : b.layers) how.layer_part.push_back(part_of(L.module));
  how.embed_part = part_of(b.embed);
  how.head_part = part_of(b.head == SIZE_MAX ? b.embed : b.head);
  how.stream_part = int(std::find(order.begin(), order.end(), stream) - order.begin());
  if (part_of(b.final_norm) != how.head_part)
    throw Error("engine.bad_split",
                fmt::format("the final norm ({}) and the head ({}) are on different GPUs", module_device(w, b.final_norm).str(),
                            order[size_t(how.head_part)].str()),
                {.hint = "place the final norm with the head (run's own plans do)"});
  if (moe_threads >= 0) {
    parts.push_back(make_cpu_backend(moe_threads));
    how.moe_part = int(parts.size()) - 1;
  }
  return make_split_backend(std::move(parts), std::move(how));
}

// [module][tensor]: the tensors of every mixture of experts (is_expert_part_role), which the CPU
// part reads in host memory while the rest of their layer is on or streamed to the GPU.
std::vector<std::vector<char>> moe_tensors(const ModelLayout& layout) {
  std::vector<std::vector<char>> out(layout.modules.size());
  for (size_t m = 0; m < layout.modules.size(); ++m) {
    const Module& mod = layout.modules[m];
    out[m].assign(mod.tensors.size(), 0);
    for (size_t k = 0; k < mod.roles.size() && k < mod.tensors.size(); ++k) out[m][k] = is_expert_part_role(mod.roles[k]);
  }
  return out;
}

}  // namespace

Engine make_engine(const Checkpoint& ck, const ModelLayout& layout, const WeightStore& store, const EngineSetup& setup) {
  Engine e;
  bool any_disk = false;
  std::set<Device> gpus;
  for (const ModuleBlock& m : store.modules()) {
    any_disk |= m.device.kind == Device::Kind::Disk;
    if (m.device.kind == Device::Kind::Cuda) gpus.insert(m.device);
  }
  if (setup.device.kind == Device::Kind::Cuda) gpus.insert(setup.device);
  if (setup.stream && any_disk) {
    StreamOptions so = *setup.stream;
    if (setup.device.kind == Device::Kind::Cuda) so.expert_pieces = false;  // the device ring copies whole modules
    e.weights = std::make_unique<StreamedProvider>(ck, layout, store, so);
  }
  else
    e.weights = std::make_unique<ResidentProvider>(layout, store);
  if (gpus.size() > 1 && setup.device.kind != Device::Kind::Cuda)
    throw Error("engine.bad_split", fmt::format("weights on {} GPUs, but the ops are to run on {}", gpus.size(), setup.device.str()),
                {.hint = "give the GPU that runs the layers off every GPU (run: --device cuda:N)"});
  const bool moe_on_cpu = setup.device.kind == Device::Kind::Cuda && has_moe(layout);
  if (gpus.size() > 1 || moe_on_cpu)
    e.backend = make_gpu_split(layout, *e.weights, gpus, setup.device, moe_on_cpu ? std::max(0, setup.threads) : -1);
  else
    e.backend = setup.device.kind == Device::Kind::Cuda ? make_cuda_backend(setup.device.index)
                                                        : make_cpu_backend(setup.threads);
  if (setup.device.kind == Device::Kind::Cuda) {
    bool off_device = false;
    for (const ModuleBlock& m : store.modules()) off_device |= m.device.kind != Device::Kind::Cuda;
    // Weights no GPU holds are copied to device slots on the stream device per forward pass.
    // An untied embedding off the GPUs stays on the host: the Transformer gathers the
    // batch's rows there instead of copying the whole table each pass.
    std::vector<size_t> host_read;
    const ModelBinding b = bind_modules(layout);
    if (b.head != SIZE_MAX && module_device(*e.weights, b.embed).kind != Device::Kind::Cuda) host_read.push_back(b.embed);
    if (off_device)
      e.weights = std::make_unique<DeviceStreamProvider>(std::move(e.weights), setup.device.index,
                                                         e.backend->native_stream(), kStreamSlots, host_read,
                                                         moe_on_cpu ? moe_tensors(layout) : std::vector<std::vector<char>>{});
  }
  e.model = std::make_unique<Transformer>(layout, *e.weights, *e.backend, setup.options);
  return e;
}

}  // namespace nunchaku::engine
