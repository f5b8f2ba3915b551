// A GGUF input's metadata turned into the files transformers would need beside the
// converted safetensors: config.json for an architecture the engine knows.
#pragma once

#include <string>
#include <vector>

#include "convert/output.hpp"
#include "format/checkpoint.hpp"
#include "model/model.hpp"

namespace nunchaku::convert {

std::vector<std::string> write_gguf_sidecars(const Checkpoint& ck, const ModelLayout& layout, const StagedOutput& out);

}  // namespace nunchaku::convert
