// The files beside the weights that make a directory a model: config.json,
// generation_config.json, tokenizer files, chat templates. Copied byte for byte from
// the input's directory into the staged output (never following into other folders).
#pragma once

#include <string>
#include <vector>

#include "convert/output.hpp"
#include "format/checkpoint.hpp"
#include "model/model.hpp"

namespace nunchaku::convert {

// Returns the names written (copied, or derived from GGUF metadata when the input is GGUF);
// `skipped` gets "file: why" for a GGUF-derived file that could not be made.
std::vector<std::string> write_sidecars(const Checkpoint& ck, const ModelLayout& layout, const StagedOutput& out,
                                        std::vector<std::string>& skipped);

// The directory the sidecars are read from: the input directory, or the input file's.
std::string input_dir(const Checkpoint& ck);

}  // namespace nunchaku::convert
