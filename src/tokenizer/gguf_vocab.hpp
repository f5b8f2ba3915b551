// The tokenizer a GGUF file carries in its metadata (tokenizer.ggml.*, tokenizer.chat_template)
// as plain data. One reader (read_gguf_vocab) serves Tokenizer::from_gguf and `convert`;
// `convert` also turns it into the tokenizer.json + tokenizer_config.json that transformers
// builds when it loads a GGUF (gguf_to_hf.cpp), and back into GGUF key-values from an HF
// tokenizer (Tokenizer::gguf_vocab, gguf_from_hf.cpp). docs/convert.md has the rules.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/gguf.hpp"

namespace nunchaku {

// GGUF token types (llama.cpp's llama_token_type).
enum GgufTokenType : int32_t { kTokNormal = 1, kTokUnknown = 2, kTokControl = 3, kTokUserDefined = 4, kTokUnused = 5, kTokByte = 6 };

struct GgufVocab {
  std::string architecture;         // general.architecture (transformers shapes phi3's tokenizer apart)
  std::string model;                // "llama" (SentencePiece pieces with scores) or "gpt2" (byte-level BPE)
  std::string pre;                  // tokenizer.ggml.pre; "" when absent
  std::vector<std::string> tokens;  // as stored (byte-level spelling for gpt2, U+2581 for llama)
  std::vector<int32_t> types;       // one GgufTokenType per token (kTokNormal when the file has none)
  std::vector<float> scores;        // llama: one per token
  std::vector<std::string> merges;  // gpt2: "left right", best first
  int32_t bos = -1, eos = -1, unk = -1, pad = -1, eot = -1, eom = -1;  // -1: none
  std::optional<bool> add_bos, add_eos, add_space_prefix;              // nullopt: not stated
  std::string chat_template;

  bool adds_bos() const { return add_bos.value_or(model == "llama"); }  // llama.cpp's defaults
  bool adds_eos() const { return add_eos.value_or(false); }
};

// Reads and checks the vocabulary (sizes, ids, types); `path` names the file in errors.
// Throws Error("tokenizer.*", exit 2).
[[nodiscard]] GgufVocab read_gguf_vocab(const GgufFile& g);

// The key-values convert_hf_to_gguf writes for this vocabulary, in its order.
std::vector<std::pair<std::string, GgufValue>> gguf_vocab_kvs(const GgufVocab& v);

// tokenizer.json and tokenizer_config.json as transformers builds them from a GGUF
// (integrations/gguf: LlamaTokenizer with merges recovered from the scores for "llama" --
// for a phi3 architecture the space prefix is a normalizer instead of Metaspace --
// GPT2Tokenizer with the file's merges and the pre-tokenizer's split regex for "gpt2";
// control tokens added as special, user-defined ones as plain added tokens). The chat
// template goes into tokenizer_config.json. Throws Error("tokenizer.unsupported_model").
nlohmann::ordered_json hf_tokenizer_json(const GgufVocab& v, const std::string& path);
nlohmann::ordered_json hf_tokenizer_config(const GgufVocab& v);

}  // namespace nunchaku
