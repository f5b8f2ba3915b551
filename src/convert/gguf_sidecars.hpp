// A GGUF input's metadata turned into the files transformers builds when it loads a GGUF,
// written beside the converted safetensors so the directory runs in `nunchaku run` and in
// transformers: config.json for an architecture of the table (llama, mistral, qwen2,
// qwen3, gemma, gemma2, phi3, mixtral, gpt2), and tokenizer.json + tokenizer_config.json (with
// the chat template) from the embedded vocabulary (tokenizer/gguf_vocab.hpp).
#pragma once

#include <string>
#include <vector>

#include "convert/output.hpp"
#include "format/gguf.hpp"
#include "format/checkpoint.hpp"
#include "model/model.hpp"

namespace nunchaku::convert {

// Returns the names written; `skipped` gets "file: why" for a file that cannot be derived.
std::vector<std::string> write_gguf_sidecars(const Checkpoint& ck, const ModelLayout& layout, const StagedOutput& out,
                                             std::vector<std::string>& skipped);

// The tokenizer.ggml.* key-values of the tokenizer.json beside a safetensors/PyTorch input
// (Tokenizer::gguf_vocab), for a GGUF output; empty, with a note in `skipped`, when there is
// none or it has no GGUF form.
std::vector<std::pair<std::string, GgufValue>> hf_tokenizer_kvs(const Checkpoint& ck, std::vector<std::string>& skipped);

// config.json's fields for `spec` (as transformers' config from a GGUF: the hyper-parameters,
// model_type and the special token ids), plus "architectures"; null for a family it does not map.
nlohmann::ordered_json hf_config_from_spec(const ModelSpec& spec, int32_t bos, int32_t eos, int32_t unk, int32_t pad);

}  // namespace nunchaku::convert
