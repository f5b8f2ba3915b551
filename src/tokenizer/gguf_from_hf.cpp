// Tokenizer::gguf_vocab: a tokenizer loaded from tokenizer.json described as GGUF
// key-values, as convert_hf_to_gguf writes them (tokens in id order, control tokens for
// special added tokens and added tokens that look special, user-defined for the others, <0xNN> as byte tokens, the merges of a
// byte-level BPE, special ids, add_bos/add_eos, the chat template). One deliberate
// difference: for SentencePiece-style BPE convert_hf_to_gguf scores every token -1000
// (without a tokenizer.model it has no scores), which makes llama.cpp's merge-by-score
// tokenize differently from the merges; here a merged token scores minus its merge's rank.
#include <algorithm>

#include "tokenizer/gguf_vocab.hpp"
#include "tokenizer/impl.hpp"
#include "tokenizer/pretokenizers.hpp"
#include "tokenizer/tokenizer.hpp"

namespace nunchaku {

namespace {

// The merges as (rank, left, right, merged), best first.
struct Merge { int32_t rank, left, right, merged; };
std::vector<Merge> ranked_merges(const TokenizerImpl& t) {
  std::vector<Merge> m;
  m.reserve(t.merges.size());
  for (const auto& [key, rm] : t.merges)
    m.push_back({rm.first, static_cast<int32_t>(key >> 32), static_cast<int32_t>(key & 0xFFFFFFFFu), rm.second});
  std::sort(m.begin(), m.end(), [](const Merge& a, const Merge& b) { return a.rank < b.rank; });
  return m;
}

// convert_hf_to_gguf's does_token_look_special: added tokens some models forget to mark
// special (command-r, deepseek-coder, gemma) become control tokens.
bool looks_special(const std::string& t) {
  auto wrapped = [&](std::string_view open, std::string_view close) {
    return t.size() >= open.size() + close.size() && t.starts_with(open) && t.ends_with(close);
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || wrapped("<unused", ">");
}

int32_t token_type(uint8_t attr, bool spm, const std::string& text) {
  if (attr & kAttrControl) return kTokControl;
  if (attr & kAttrUserDefined) return looks_special(text) ? kTokControl : kTokUserDefined;
  if (spm && (attr & kAttrByte)) return kTokByte;
  if (attr & kAttrUnknown) return kTokUnknown;
  if (attr & kAttrUnused) return kTokUnused;
  return kTokNormal;
}

// The tokenizer.ggml.pre whose regexes the byte-level pre-tokenizer splits with.
std::string byte_level_pre(const TokenizerImpl& t) {
  std::vector<std::string> regexes;
  for (const PreStep& st : t.pre) {
    if (st.kind != PreStep::Split || !st.regex || st.invert || st.behavior != PreStep::Isolated)
      t.fail("tokenizer.no_gguf_form", "the byte-level pre-tokenizer has a step llama.cpp cannot express",
             "GGUF names a pre-tokenizer from a fixed list (docs/tokenizer.md)");
    regexes.push_back(st.regex->pattern());
  }
  if (regexes == std::vector<std::string>{kGpt2ByteLevelRegex}) return "gpt-2";
  auto name = gguf_pretokenizer_name(regexes);
  if (!name)
    t.fail("tokenizer.no_gguf_form", "the tokenizer's split regex matches no tokenizer.ggml.pre llama.cpp knows",
           "GGUF names a pre-tokenizer from a fixed list (docs/tokenizer.md)");
  return *name;
}

// SentencePiece-style: U+2581 for spaces (Metaspace, or a Replace normalizer) and byte
// fallback; whether a space is put before the text.
bool spm_style(const TokenizerImpl& t, bool* prefix) {
  bool escapes = false;
  *prefix = false;
  for (const PreStep& st : t.pre)
    if (st.kind == PreStep::Metaspace) escapes = true, *prefix = *prefix || st.prepend != PreStep::Never;
  for (const NormStep& n : t.normalizers) {
    if (n.kind == NormStep::Replace && n.text == " " && n.content == "\xE2\x96\x81") escapes = true;
    if (n.kind == NormStep::Prepend && n.text == "\xE2\x96\x81") *prefix = true;
  }
  return escapes && t.byte_fallback && !t.byte_level;
}

}  // namespace

GgufVocab Tokenizer::gguf_vocab() const {
  const TokenizerImpl& t = *impl_;
  if (t.model != ModelKind::BpeRanks)
    t.fail("tokenizer.no_gguf_form", "only a BPE tokenizer.json is written as GGUF key-values");
  GgufVocab v;
  bool prefix = false;
  const bool spm = spm_style(t, &prefix);
  if (!t.byte_level && !spm)
    t.fail("tokenizer.no_gguf_form", "the tokenizer is neither byte-level BPE nor SentencePiece-style BPE with byte fallback",
           "llama.cpp's gpt2 and llama vocabularies hold only those");
  const auto merges = ranked_merges(t);
  v.tokens = t.tokens;
  v.types.resize(t.tokens.size());
  for (size_t i = 0; i < t.tokens.size(); ++i) v.types[i] = token_type(t.attr[i], spm, t.tokens[i]);
  if (spm) {
    v.model = "llama";
    v.pre = "default";
    v.scores.assign(t.tokens.size(), -1e6f);  // never merged into
    for (auto it = merges.rbegin(); it != merges.rend(); ++it) v.scores[it->merged] = -static_cast<float>(it->rank);
    if (!prefix) v.add_space_prefix = false;
  } else {
    v.model = "gpt2";
    v.pre = byte_level_pre(t);
    v.merges.reserve(merges.size());
    for (const Merge& m : merges) v.merges.push_back(t.tokens[m.left] + " " + t.tokens[m.right]);
  }
  v.bos = t.bos, v.eos = t.eos, v.unk = t.unk, v.pad = t.pad;
  v.add_bos = t.bos >= 0 && std::find(t.prefix_ids.begin(), t.prefix_ids.end(), t.bos) != t.prefix_ids.end();
  v.add_eos = t.eos >= 0 && std::find(t.suffix_ids.begin(), t.suffix_ids.end(), t.eos) != t.suffix_ids.end();
  v.chat_template = t.chat_template;
  return v;
}

}  // namespace nunchaku
