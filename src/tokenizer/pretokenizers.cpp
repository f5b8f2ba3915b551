#include "tokenizer/pretokenizers.hpp"

#include <algorithm>

namespace nunchaku {

namespace {

// GPT-2's word split; HF's ByteLevel adds a final `|\s+`.
constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
// Llama-3 / Qwen2 spell the contractions as (?i:'s|...) in tokenizer.json; the
// case-insensitive group is written out with classes so ASCII only is folded.
constexpr const char* kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kCjk = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+";

struct Entry {
  std::vector<std::string_view> names;
  PretokenizerSpec spec;
};

const std::vector<Entry>& table() {
  static const std::vector<Entry> t = {
      {{"default"},
       {{R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}, false}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", "dbrx", "smaug-bpe", "chatglm-bpe"},
       {{kLlama3}, true}},
      {{"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", "hunyuan", "grok-2"}, {{kQwen2}, false}},
      {{"deepseek-llm"},
       {{"[\r\n]",
         "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-"
         "\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481"
         "\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-"
         "\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59"
         "\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-"
         "\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126"
         "\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-"
         "\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-"
         "\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
         "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-"
         "\U0001e943]+",
         "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+", "\\s+$", kCjk, "\\p{N}+"},
        false}},
      {{"deepseek-coder"}, {{"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kCjk, "\\p{N}"}, false}},
      {{"falcon"}, {{R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}, false}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
       {{R"(\p{N})", kGpt2}, false}},
      {{"gpt-2", "mpt", "olmo", "jais", "phi-2", "jina-es", "jina-de", "gigachat", "roberta-bpe", "trillion"},
       {{kGpt2}, false}},
      {{"poro-chat", "bloom", "gpt3-finnish"}, {{R"( ?[^(\s|.,!?…。，、।۔،)]+)"}, false}},
      {{"viking"}, {{R"( ?[^(\s|.,!?…。，、।۔،)]+)", R"(\p{N})"}, false}},
  };
  return t;
}

}  // namespace

const char* const kGpt2ByteLevelRegex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::vector<std::string> hf_spelling(const std::vector<std::string>& regexes) {
  static const std::string folded = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
  static const std::string hf = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
  std::vector<std::string> out = regexes;
  for (auto& re : out)
    for (size_t at = re.find(folded); at != std::string::npos; at = re.find(folded, at + hf.size()))
      re.replace(at, folded.size(), hf);
  return out;
}

std::optional<std::string> gguf_pretokenizer_name(const std::vector<std::string>& hf_regexes) {
  for (const Entry& e : table()) {
    if (hf_spelling(e.spec.regexes) == hf_regexes) return std::string(e.names.front());
  }
  return std::nullopt;
}

std::optional<PretokenizerSpec> gguf_pretokenizer(std::string_view name) {
  for (const Entry& e : table()) {
    if (std::find(e.names.begin(), e.names.end(), name) != e.names.end()) return e.spec;
  }
  return std::nullopt;
}

}  // namespace nunchaku
