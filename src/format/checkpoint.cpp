#include "format/checkpoint.hpp"

namespace nunchaku {

std::string_view format_name(Format f) {
  switch (f) {
    case Format::Safetensors: return "safetensors";
    case Format::GGUF: return "gguf";
    case Format::PyTorch: return "pytorch";
  }
  return "?";
}

uint64_t TensorInfo::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t s = 0;
  for (const auto& t : tensors) s += t.nbytes;
  return s;
}

uint64_t Checkpoint::total_parameters() const {
  uint64_t s = 0;
  for (const auto& t : tensors) s += t.numel();
  return s;
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace nunchaku
