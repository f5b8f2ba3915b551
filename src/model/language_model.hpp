// A multimodal checkpoint's language model alone (docs/engine.md "Multimodal checkpoints"):
// the engine runs text, so `run` and `bench` keep only the language model's modules and
// tensors; the vision tower, projector and audio encoder are neither placed nor read.
#pragma once

#include <vector>

#include "format/checkpoint.hpp"
#include "model/model.hpp"

namespace nunchaku {

// Removes the modules of the non-language-model components ("vision_tower", "projector",
// "audio") from `layout`, and their tensors from `ck` (tensor indices, `logical` and the
// parameter counts follow). Returns the removed modules; none for a text-only checkpoint.
std::vector<Module> keep_language_model(Checkpoint& ck, ModelLayout& layout);

// True for the component names keep_language_model removes.
bool is_encoder_component(std::string_view component);

}  // namespace nunchaku
