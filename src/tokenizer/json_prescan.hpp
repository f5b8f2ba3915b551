// A streaming pass over a tokenizer's JSON file (tokenizer.json, tokenizer_config.json,
// ...) before nlohmann builds its DOM. The DOM costs about ten times the text (a 50 MB
// tokenizer.json with 2 M merges: ~500 MB), so a hostile file is refused here, with
// O(depth) memory, by counting what the DOM would hold against limits far above any
// real tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace nunchaku {

// Limits. Real files for comparison (vocab entries / merges / added tokens): Llama-3
// (128,000 / 280,147 / 256), Qwen2 (151,643 / 151,387 / 22); gemma-3 has 262,144 ids;
// nesting is under 10 levels and the longest strings are regexes and chat templates
// (tens of KB). A file just inside the limits (2^20 vocab entries, 1M merges as pairs)
// peaks at about 600 MB of RSS while loading (a 50 MB file with 2 M merges, refused
// here at 58 MB, took 502 MB before this pass).
inline constexpr uint64_t kMaxTokenizerVocab = uint64_t{1} << 20;   // model.vocab entries
inline constexpr uint64_t kMaxTokenizerMerges = uint64_t{1} << 20;  // model.merges entries
inline constexpr uint64_t kMaxTokenizerAdded = uint64_t{1} << 17;   // added_tokens entries
inline constexpr uint64_t kMaxJsonValues = uint64_t{1} << 22;       // values in the whole file
inline constexpr uint64_t kMaxJsonStringBytes = uint64_t{1} << 20;  // one string or key, decoded
inline constexpr uint64_t kMaxJsonDepth = 64;                       // nested arrays/objects

// Walks `text` once with a SAX parser. Throws tokenizer.bad_json (syntax) or
// tokenizer.too_large (a limit above, naming the field, e.g. "model.merges") with
// `name` as the file and the byte offset of the value at fault. Builds nothing.
void prescan_tokenizer_json(std::string_view text, const std::string& name);

}  // namespace nunchaku
