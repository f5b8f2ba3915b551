#include "convert/gguf_sidecars.hpp"

namespace nunchaku::convert {

std::vector<std::string> write_gguf_sidecars(const Checkpoint&, const ModelLayout&, const StagedOutput&) {
  return {};
}

}  // namespace nunchaku::convert
