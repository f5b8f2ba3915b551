// Which files of a repo make the model, from the repo's file list alone (the same rule for
// a snapshot in the local cache and for the Hub's listing), in open_checkpoint's order:
//   --file NAME / hf://org/name/NAME   that file (a split GGUF: all its parts)
//   org/name:QUANT                     the GGUF whose name holds QUANT (mmproj-* left out)
//   else, top-level files only         model.safetensors.index.json > *.safetensors >
//                                      pytorch_model.bin.index.json > pytorch_model*.bin
//                                      > the one GGUF (or split set) of the repo
#pragma once

#include <string>
#include <vector>

#include "hub/repo_ref.hpp"

namespace nunchaku::hub {

struct WeightFiles {
  // What open reads first: the index, the one weight file, or the first GGUF part; "" when
  // `files` are shards without an index (merged in name order).
  std::string entry;
  bool index = false;               // entry is an *.index.json (its shards come from reading it)
  bool gguf = false;
  std::vector<std::string> files;   // weight files known from the list (entry included)
};

// Throws Error (exit 2): hub.no_weights, hub.no_such_file, hub.quant_not_found,
// hub.ambiguous_gguf, each naming `where` (the snapshot folder or the repo) and what to pass.
WeightFiles choose_weights(const std::vector<std::string>& files, const RepoRef& ref, const std::string& where);

// The split GGUF parts `path` names (itself when not split).
std::vector<std::string> gguf_parts(const std::string& path);

// Files beside the weights that commands read when the repo has them: config.json
// (always), and with `tokenizer` the tokenizer and generation configs.
std::vector<std::string> side_files(const std::vector<std::string>& files, bool tokenizer);

// `hf download org/name [--revision REV] --include A --include B`, as one shell line.
std::string download_command(const RepoRef& ref, const std::vector<std::string>& missing);

}  // namespace nunchaku::hub
