#include "model/language_model.hpp"

#include <algorithm>
#include <cstdint>

namespace nunchaku {

bool is_encoder_component(std::string_view c) { return c == "vision_tower" || c == "projector" || c == "audio"; }

std::vector<Module> keep_language_model(Checkpoint& ck, ModelLayout& layout) {
  std::vector<Module> removed, kept;
  for (Module& m : layout.modules) (is_encoder_component(m.component) ? removed : kept).push_back(std::move(m));
  layout.modules = std::move(kept);
  if (removed.empty()) return removed;
  std::vector<char> keep(ck.tensors.size(), 1);
  for (const Module& m : removed)
    for (size_t i : m.tensors)
      if (i < keep.size()) keep[i] = 0;
  // Old index -> new index, in file order as before.
  std::vector<size_t> to(ck.tensors.size(), SIZE_MAX);
  std::vector<TensorInfo> tensors;
  std::vector<uint64_t> logical;
  for (size_t i = 0; i < ck.tensors.size(); ++i) {
    if (!keep[i]) {
      layout.num_stored_elements -= std::min(layout.num_stored_elements, ck.tensors[i].numel());
      continue;
    }
    to[i] = tensors.size();
    tensors.push_back(std::move(ck.tensors[i]));
    if (i < layout.logical.size()) logical.push_back(layout.logical[i]);
  }
  ck.tensors = std::move(tensors);
  if (!layout.logical.empty()) layout.logical = std::move(logical);
  for (Module& m : layout.modules)
    for (size_t& i : m.tensors) i = to[i];
  for (const Module& m : removed) {
    layout.num_parameters -= std::min(layout.num_parameters, m.parameters);
    layout.num_active_parameters -= std::min(layout.num_active_parameters, m.parameters);
  }
  return removed;
}

}  // namespace nunchaku
