// A diffusers pipeline folder: model_index.json names the pipeline class and its parts
// ("transformer": ["diffusers", "FluxTransformer2DModel"], "text_encoder_2":
// ["transformers", "T5EncoderModel"], "scheduler": [...], "tokenizer": [...], ...); each
// part with weights is a sub-folder holding a checkpoint of its own (config.json and
// *.safetensors, maybe sharded). estimate sizes each part and the ways diffusers places
// them (memory/pipeline_estimate.hpp).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace nunchaku {

struct PipelinePart {
  std::string name;        // the model_index.json key: "transformer", "vae", ...
  std::string library;     // "diffusers", "transformers"
  std::string class_name;  // "FluxTransformer2DModel"
  std::string dir;         // path/name
};

struct Pipeline {
  std::string path;        // the folder as given
  std::string class_name;  // "FluxPipeline"
  std::vector<PipelinePart> parts;    // sub-folders with weights, in model_index.json order
  std::vector<std::string> no_weights;  // named parts without weights (scheduler, tokenizers)
};

// nullopt when `path` is not a folder holding model_index.json. Errors (exit 2) name the
// file: model_index.json not a JSON object, a part that is not [library, class], no part
// with weights.
std::optional<Pipeline> read_pipeline(const std::string& path);

}  // namespace nunchaku
