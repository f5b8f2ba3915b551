// Tokenizer from GGUF metadata (tokenizer.ggml.*), as llama.cpp reads it:
//   model "llama": SentencePiece pieces with scores, token_type, <0xNN> byte tokens;
//                  a space is prefixed to text at the start and after special tokens,
//                  spaces become U+2581, then merges by score.
//   model "gpt2":  byte-level BPE with "a b" merges; tokenizer.ggml.pre names the
//                  pre-tokenizer regex list (the table below).
// Token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
// read_gguf_vocab reads the metadata once into a GgufVocab; from_gguf builds from that.
#include "tokenizer/gguf_vocab.hpp"

#include <algorithm>

#include "format/gguf.hpp"
#include "tokenizer/impl.hpp"
#include "tokenizer/pretokenizers.hpp"
#include "tokenizer/tokenizer.hpp"

namespace nunchaku {

namespace {

// Reads an integer array of any integer element type.
bool int_array(const GgufValue& v, std::vector<int64_t>& out) {
  auto copy = [&](const auto* a) {
    if (!a) return false;
    out.assign(a->begin(), a->end());
    return true;
  };
  return copy(v.array<int32_t>()) || copy(v.array<uint32_t>()) || copy(v.array<int8_t>()) ||
         copy(v.array<uint8_t>()) || copy(v.array<int16_t>()) || copy(v.array<uint16_t>()) ||
         copy(v.array<int64_t>());
}

[[noreturn]] void fail(const GgufFile& g, const std::string& code, const std::string& msg, const std::string& hint = "") {
  TokenizerImpl t;
  t.source = g.path;
  t.fail(code, msg, hint);
}

void read_scalars(const GgufFile& g, GgufVocab& v) {
  const int64_t n = static_cast<int64_t>(v.tokens.size());
  auto id = [&](const char* key, bool strict = true) -> int32_t {
    const GgufValue* x = g.find(key);
    if (!x) return -1;
    auto i = x->as_int();
    if (!i) fail(g, "tokenizer.bad_metadata", std::string(key) + " is not an integer");
    if (*i == 0xFFFFFFFFll || *i < 0) return -1;  // -1 stored as uint32: "no such token" (llama.cpp's LLAMA_TOKEN_NULL)
    if (*i >= n && !strict) return -1;  // an EOT/EOM outside the vocabulary is ignored, as before
    if (*i >= n) fail(g, "tokenizer.bad_token_id", std::string(key) + " = " + std::to_string(*i) + " is outside the vocabulary of " + std::to_string(n));
    return static_cast<int32_t>(*i);
  };
  auto flag = [&](const char* key) -> std::optional<bool> {
    const GgufValue* x = g.find(key);
    if (!x) return std::nullopt;
    auto b = x->as_bool();
    if (!b) fail(g, "tokenizer.bad_metadata", std::string(key) + " is not a bool");
    return *b;
  };
  v.unk = id("tokenizer.ggml.unknown_token_id");
  v.bos = id("tokenizer.ggml.bos_token_id");
  v.eos = id("tokenizer.ggml.eos_token_id");
  v.pad = id("tokenizer.ggml.padding_token_id");
  v.eot = id("tokenizer.ggml.eot_token_id", false);
  v.eom = id("tokenizer.ggml.eom_token_id", false);
  v.add_bos = flag("tokenizer.ggml.add_bos_token");
  v.add_eos = flag("tokenizer.ggml.add_eos_token");
  v.add_space_prefix = flag("tokenizer.ggml.add_space_prefix");
}

}  // namespace

GgufVocab read_gguf_vocab(const GgufFile& g) {
  auto str = [&](const char* key) -> std::string {
    const GgufValue* v = g.find(key);
    if (!v) return {};
    const std::string* s = v->as_string();
    if (!s) fail(g, "tokenizer.bad_metadata", std::string(key) + " is not a string");
    return *s;
  };
  GgufVocab v;
  v.model = str("tokenizer.ggml.model");
  if (v.model.empty()) fail(g, "tokenizer.missing", "no tokenizer.ggml.model in the GGUF metadata", "this file has no embedded tokenizer; pass the HF model directory instead");
  if (v.model != "llama" && v.model != "gpt2") fail(g, "tokenizer.unsupported_model", "tokenizer.ggml.model '" + v.model + "' is not supported", "supported: llama (SentencePiece) and gpt2 (byte-level BPE)");
  v.pre = str("tokenizer.ggml.pre");
  v.architecture = str("general.architecture");
  const GgufValue* tv = g.find("tokenizer.ggml.tokens");
  const auto* toks = tv ? tv->strings() : nullptr;
  if (!toks) fail(g, "tokenizer.missing", "tokenizer.ggml.tokens is missing or not a string array");
  v.tokens = toks->to_vector();
  const size_t n = v.tokens.size();
  v.types.assign(n, kTokNormal);
  if (const GgufValue* x = g.find("tokenizer.ggml.token_type")) {
    std::vector<int64_t> types;
    if (!int_array(*x, types)) fail(g, "tokenizer.bad_metadata", "tokenizer.ggml.token_type is not an integer array");
    if (types.size() != n) fail(g, "tokenizer.size_mismatch", "tokenizer.ggml.token_type has " + std::to_string(types.size()) + " entries for " + std::to_string(n) + " tokens");
    for (size_t i = 0; i < n; ++i) v.types[i] = types[i] >= kTokNormal && types[i] <= kTokByte ? static_cast<int32_t>(types[i]) : kTokNormal;
  }
  if (v.model == "llama") {
    const GgufValue* sv = g.find("tokenizer.ggml.scores");
    const auto* sc = sv ? sv->array<float>() : nullptr;
    if (!sc) fail(g, "tokenizer.missing", "tokenizer.ggml.scores is missing or not a float32 array (needed by the llama tokenizer)");
    if (sc->size() != n) fail(g, "tokenizer.size_mismatch", "tokenizer.ggml.scores has " + std::to_string(sc->size()) + " entries for " + std::to_string(n) + " tokens");
    v.scores = *sc;
  } else {
    const GgufValue* mv = g.find("tokenizer.ggml.merges");
    const auto* merges = mv ? mv->strings() : nullptr;
    if (!merges) fail(g, "tokenizer.missing", "tokenizer.ggml.merges is missing or not a string array (needed by the gpt2 tokenizer)");
    v.merges = merges->to_vector();
  }
  read_scalars(g, v);
  v.chat_template = str("tokenizer.chat_template");
  return v;
}

namespace {

// Stages of from_gguf, each filling its part of the tokenizer from the vocabulary.
void set_attributes(TokenizerImpl& t, const GgufVocab& v) {
  t.attr.assign(v.tokens.size(), kAttrNormal);
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    switch (v.types[i]) {
      case kTokUnknown: t.attr[i] = kAttrUnknown; break;
      case kTokControl: t.attr[i] = kAttrControl; break;
      case kTokUserDefined: t.attr[i] = kAttrUserDefined; break;
      case kTokUnused: t.attr[i] = kAttrUnused; break;
      case kTokByte: t.attr[i] = kAttrByte; break;
      default: t.attr[i] = kAttrNormal; break;
    }
  }
}

void set_model(TokenizerImpl& t, const GgufVocab& v) {
  if (v.model == "llama") {
    t.model = ModelKind::SpmScores;
    t.decode_kind = DecodeKind::Spm;
    t.scores = v.scores;
    t.spm_space_prefix = v.add_space_prefix.value_or(true);
    t.spm_escape_spaces = true;
    t.strip_leading_space = t.spm_space_prefix;
    t.byte_fallback = true;
    return;
  }
  t.model = ModelKind::BpeRanks;
  t.byte_level = true;
  t.decode_kind = DecodeKind::ByteLevel;
  auto table = gguf_pretokenizer(v.pre.empty() ? "default" : v.pre);
  if (!table) t.fail("tokenizer.unknown_pretokenizer", "unknown tokenizer.ggml.pre '" + v.pre + "'", "supported names are listed in docs/tokenizer.md");
  for (const std::string& re : table->regexes) {
    PreStep st;
    st.regex = std::make_shared<const Regex>(re, t.source);
    t.pre.push_back(std::move(st));
  }
  t.ignore_merges = table->ignore_merges;
}

// Special ids, BOS/EOS added by encode, and every id that ends generation: EOS, EOT/EOM
// when given, and the usual end-of-turn control tokens.
void set_specials(TokenizerImpl& t, const GgufVocab& v) {
  const size_t n = v.tokens.size();
  t.unk = v.unk, t.bos = v.bos, t.eos = v.eos, t.pad = v.pad;
  if (t.unk < 0 && v.model == "llama") {
    for (size_t i = 0; i < n; ++i) if (t.attr[i] & kAttrUnknown) { t.unk = static_cast<int32_t>(i); break; }
  }
  if (v.adds_bos() && t.bos >= 0) t.prefix_ids.push_back(t.bos);
  if (v.adds_eos() && t.eos >= 0) t.suffix_ids.push_back(t.eos);
  auto add_eos = [&](int32_t x) {
    if (x >= 0 && std::find(t.eos_ids.begin(), t.eos_ids.end(), x) == t.eos_ids.end()) t.eos_ids.push_back(x);
  };
  add_eos(t.eos);
  add_eos(v.eot);
  add_eos(v.eom);
  // llama.cpp's end-of-generation texts; as there, such a token is control whatever its
  // stored type (a converter that wrote <end_of_turn> as a normal token: Gemma from a bare
  // tokenizer.model), so it ends generation and is split out of text with parse_special.
  static const char* kEog[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "</s>"};
  for (size_t i = 0; i < n; ++i) {
    for (const char* e : kEog) {
      if (t.tokens[i] != e) continue;
      if (!(t.attr[i] & kAttrUserDefined)) t.attr[i] |= kAttrControl;
      add_eos(static_cast<int32_t>(i));
    }
  }
  // Control, unknown and user-defined tokens are split out of the text first.
  for (size_t i = 0; i < n; ++i) {
    if (t.attr[i] & (kAttrControl | kAttrUnknown | kAttrUserDefined)) {
      AddedToken a;
      a.content = t.tokens[i];
      a.id = static_cast<int32_t>(i);
      a.special = (t.attr[i] & kAttrUserDefined) == 0;
      t.added.push_back(std::move(a));
    }
  }
  // Unknown tokens behave like control tokens for is_special / skip_special.
  for (auto& a : t.attr) if (a & kAttrUnknown) a |= kAttrControl;
}

// BPE merges "left right" (split at the first space after the first character); needs
// token_to_id, so after finish().
void set_merges(TokenizerImpl& t, const GgufVocab& v) {
  t.merges.reserve(v.merges.size() * 2);
  for (size_t r = 0; r < v.merges.size(); ++r) {
    const std::string& m = v.merges[r];
    size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (sp == std::string::npos) t.fail("tokenizer.bad_merge", "merge #" + std::to_string(r) + " '" + m + "' is not two tokens separated by a space");
    auto a = t.token_to_id.find(m.substr(0, sp));
    auto b = t.token_to_id.find(m.substr(sp + 1));
    auto ab = t.token_to_id.find(m.substr(0, sp) + m.substr(sp + 1));
    if (a == t.token_to_id.end() || b == t.token_to_id.end() || ab == t.token_to_id.end()) {
      t.fail("tokenizer.bad_merge", "merge #" + std::to_string(r) + " '" + m + "' refers to a token that is not in the vocabulary");
    }
    uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(a->second)) << 32) | static_cast<uint32_t>(b->second);
    t.merges.emplace(key, std::make_pair(static_cast<int32_t>(r), ab->second));
  }
  // User-defined tokens are plain text (llama.cpp prints them as they are).
  for (size_t i = 0; i < t.tokens.size(); ++i) if (t.attr[i] & kAttrUserDefined) t.pieces[i] = t.tokens[i];
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& g) {
  const GgufVocab v = read_gguf_vocab(g);
  auto t = std::make_shared<TokenizerImpl>();
  t->source = g.path;
  t->tokens = v.tokens;
  set_attributes(*t, v);
  set_model(*t, v);
  set_specials(*t, v);
  t->chat_template = v.chat_template;
  t->finish();
  if (v.model == "gpt2") set_merges(*t, v);
  return Tokenizer(std::move(t));
}

}  // namespace nunchaku
