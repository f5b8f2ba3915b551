#include "engine/weights.hpp"

#include <unordered_map>

#include "core/error.hpp"

namespace nunchaku::engine {

std::vector<std::vector<TensorView>> module_views(const ModelLayout& layout, const WeightStore& store) {
  std::unordered_map<size_t, const TensorView*> by_tensor;
  for (const TensorView& v : store.tensors()) by_tensor.emplace(v.tensor, &v);
  std::vector<std::vector<TensorView>> out(layout.modules.size());
  for (size_t m = 0; m < layout.modules.size(); ++m) {
    for (size_t ti : layout.modules[m].tensors) {
      auto it = by_tensor.find(ti);
      if (it == by_tensor.end())
        throw Error("engine.missing_tensor", "module '" + layout.modules[m].name + "' has a tensor the load did not place",
                    {.tensor = layout.modules[m].name});
      out[m].push_back(*it->second);
    }
  }
  return out;
}

void WeightProvider::fetch(size_t m, std::span<const Piece>, std::span<const uint8_t*>) {
  throw Error("engine.stream_pool", "module " + std::to_string(m) + " has no streamed pieces", {}, Exit::Internal);
}

ResidentProvider::ResidentProvider(const ModelLayout& layout, const WeightStore& store)
    : views_(module_views(layout, store)) {}

}  // namespace nunchaku::engine
