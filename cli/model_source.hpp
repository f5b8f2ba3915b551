// PATH of every subcommand: a file or folder on disk, or a model by its Hugging Face Hub
// id (org/name[@rev][:QUANT], hf://..., https://huggingface.co/...), read from the local HF
// cache or, for the commands that read headers only, from the Hub (src/hub/resolve.hpp,
// docs/hub.md). The one place the CLI turns PATH into what it opens.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "format/checkpoint.hpp"

namespace nunchaku::cli {

// --file NAME: which file of a Hub repo to open (a GGUF of a GGUF repo).
void add_file_option(CLI::App* cmd, std::string& file);

// Headers only (inspect, estimate, plan): a path, a complete snapshot of the local cache,
// or the Hub's headers (cached by commit).
Checkpoint open_model(const std::string& path, const std::string& file);

// The files themselves (load, run, convert, tokenize, inspect --verify): `path` when it
// exists, else the local cache's snapshot folder or file. `tokenizer`: the tokenizer
// files are needed too; `weights` false: only they (tokenize of an HF repo).
std::string local_model_path(const std::string& path, const std::string& file, bool tokenizer, bool weights = true);

}  // namespace nunchaku::cli
