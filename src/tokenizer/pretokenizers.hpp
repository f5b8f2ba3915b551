// The pre-tokenizer regexes named by GGUF tokenizer.ggml.pre (the same lists llama.cpp
// applies, in order: each regex splits every piece the previous one produced, keeping
// both matches and the text between them). The table is in docs/tokenizer.md.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nunchaku {

struct PretokenizerSpec {
  std::vector<std::string> regexes;
  bool ignore_merges = false;  // a piece that is itself a token is not split (Llama-3)
};

// nullopt for a name not in the table.
std::optional<PretokenizerSpec> gguf_pretokenizer(std::string_view name);

// The same regexes as tokenizer.json spells them (Llama-3/Qwen2 contractions as
// `(?i:'s|...)`), and the first table name whose list is exactly `hf_regexes` in that
// spelling (nullopt when none): how convert maps a tokenizer.json split to tokenizer.ggml.pre.
std::vector<std::string> hf_spelling(const std::vector<std::string>& regexes);
std::optional<std::string> gguf_pretokenizer_name(const std::vector<std::string>& hf_regexes);

// The regex HF's ByteLevel pre-tokenizer uses when use_regex is true (GPT-2's, plus `|\s+`).
extern const char* const kGpt2ByteLevelRegex;

}  // namespace nunchaku
