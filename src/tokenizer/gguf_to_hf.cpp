// A GGUF vocabulary written out as the tokenizer.json / tokenizer_config.json transformers
// builds when it loads a GGUF (transformers 5.24 integrations/gguf, the shapes of
// LlamaTokenizer and GPT2Tokenizer), plus the GGUF key-values of a vocabulary.
// Deliberate differences, all so the files tokenize as llama.cpp does the GGUF:
// add_space_prefix=false gives Metaspace prepend_scheme "never" (transformers ignores the
// flag), a byte-level pre-tokenizer that has a list of regexes in llama.cpp is written
// as that list of Split steps, and every control token is an added token (below).
#include <algorithm>
#include <unordered_map>

#include "tokenizer/gguf_vocab.hpp"
#include "tokenizer/impl.hpp"
#include "tokenizer/pretokenizers.hpp"

namespace nunchaku {

using ojson = nlohmann::ordered_json;

namespace {

const char* const kSpace = "\xE2\x96\x81";  // U+2581

// Code point boundaries of a UTF-8 string (0 and size() included).
std::vector<size_t> char_bounds(const std::string& s) {
  std::vector<size_t> b{0};
  for (size_t i = 0; i < s.size();) {
    i = std::min(s.size(), i + utf8_len(static_cast<unsigned char>(s[i])));
    b.push_back(i);
  }
  return b;
}

// transformers' generate_merges(vocab, scores): every split of every token into two tokens
// of the vocabulary, ordered by the token's score (then by the pieces' lengths in
// characters), best first; ties keep vocabulary order, and within a token the ids order.
std::vector<std::pair<std::string, std::string>> merges_from_scores(const GgufVocab& v) {
  std::unordered_map<std::string, int32_t> id;
  for (size_t i = 0; i < v.tokens.size(); ++i) id[v.tokens[i]] = static_cast<int32_t>(i);
  struct M { std::string l, r; float score; size_t ll, lr; };
  std::vector<M> all;
  std::unordered_map<std::string, bool> seen;
  for (size_t t = 0; t < v.tokens.size(); ++t) {
    const std::string& tok = v.tokens[t];
    if (!seen.emplace(tok, true).second) continue;  // a dict keeps the first position
    const float score = v.scores[static_cast<size_t>(id[tok])];  // ... and the last value
    const auto b = char_bounds(tok);
    std::vector<M> local;
    for (size_t k = 1; k + 1 < b.size(); ++k) {
      std::string l = tok.substr(0, b[k]), r = tok.substr(b[k]);
      if (id.count(l) && id.count(r)) local.push_back({std::move(l), std::move(r), score, k, b.size() - 1 - k});
    }
    std::stable_sort(local.begin(), local.end(), [&](const M& a, const M& c) {
      return std::make_pair(id[a.l], id[a.r]) < std::make_pair(id[c.l], id[c.r]);
    });
    for (auto& m : local) all.push_back(std::move(m));
  }
  std::stable_sort(all.begin(), all.end(), [](const M& a, const M& c) {
    return std::make_tuple(a.score, a.ll, a.lr) > std::make_tuple(c.score, c.ll, c.lr);
  });
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(all.size());
  for (auto& m : all) out.emplace_back(std::move(m.l), std::move(m.r));
  return out;
}

// GPT2Tokenizer's vocabulary: a token spelled outside the byte-level alphabet is respelled
// byte by byte (transformers does this for mislabelled GGUF tokens).
std::string byte_level_spelling(const std::string& tok) {
  const auto b = char_bounds(tok);
  bool in_alphabet = true;
  for (size_t k = 0; k + 1 < b.size() && in_alphabet; ++k) {
    const std::string ch = tok.substr(b[k], b[k + 1] - b[k]);
    uint32_t cp = 0;
    const auto* p = reinterpret_cast<const unsigned char*>(ch.data());
    if (ch.size() == 1) cp = p[0];
    else if (ch.size() == 2) cp = ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
    else cp = 0x110000;  // three or more bytes: never in the alphabet (it ends at U+0143)
    in_alphabet = byte_from_unicode(cp) >= 0;
  }
  if (in_alphabet) return tok;
  std::string out;
  for (unsigned char c : tok) out += byte_to_unicode()[c];
  return out;
}

ojson added_token(const std::string& content, int32_t id, bool special) {
  return {{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

bool is_added(const GgufVocab& v, size_t i) { return v.types[i] == kTokControl || v.types[i] == kTokUserDefined; }

// Control tokens as special added tokens, user-defined ones as plain added tokens, all of
// them, as llama.cpp matches them. (transformers skips a byte-level control token spelled
// outside the byte alphabet as a "mislabel"; deepseek's "<｜begin▁of▁sentence｜>" is one,
// and its BOS then becomes a new token past the vocabulary.)
ojson added_tokens(const GgufVocab& v) {
  ojson a = ojson::array();
  for (size_t i = 0; i < v.tokens.size(); ++i)
    if (is_added(v, i)) a.push_back(added_token(v.tokens[i], static_cast<int32_t>(i), v.types[i] == kTokControl));
  return a;
}

ojson post_processor(const GgufVocab& v) {
  auto special = [](const std::string& tok, int type) { return ojson{{"SpecialToken", {{"id", tok}, {"type_id", type}}}}; };
  auto seq = [](const char* id, int type) { return ojson{{"Sequence", {{"id", id}, {"type_id", type}}}}; };
  const bool bos = v.adds_bos() && v.bos >= 0, eos = v.adds_eos() && v.eos >= 0;
  ojson single = ojson::array(), pair = ojson::array(), specials = ojson::object();
  for (int part = 0; part < 2; ++part) {
    if (bos) pair.push_back(special(v.tokens[v.bos], part));
    pair.push_back(seq(part ? "B" : "A", part));
    if (eos) pair.push_back(special(v.tokens[v.eos], part));
  }
  if (bos) single.push_back(special(v.tokens[v.bos], 0));
  single.push_back(seq("A", 0));
  if (eos) single.push_back(special(v.tokens[v.eos], 0));
  for (int32_t id : {bos ? v.bos : -1, eos ? v.eos : -1})
    if (id >= 0) specials[v.tokens[id]] = {{"id", v.tokens[id]}, {"ids", {id}}, {"tokens", {v.tokens[id]}}};
  return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", specials}};
}

ojson bpe_model(ojson vocab, const std::vector<std::pair<std::string, std::string>>& merges, bool spm, bool ignore_merges) {
  ojson m = ojson::array();
  for (const auto& [l, r] : merges) m.push_back({l, r});
  return {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
          {"continuing_subword_prefix", spm ? ojson(nullptr) : ojson("")},
          {"end_of_word_suffix", spm ? ojson(nullptr) : ojson("")}, {"fuse_unk", spm}, {"byte_fallback", spm},
          {"ignore_merges", ignore_merges}, {"vocab", std::move(vocab)}, {"merges", std::move(m)}};
}

ojson sentencepiece_json(const GgufVocab& v) {
  const bool prefix = v.add_space_prefix.value_or(true);
  ojson vocab = ojson::object();
  for (size_t i = 0; i < v.tokens.size(); ++i) vocab[v.tokens[i]] = i;
  ojson decoders = ojson::array({{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                                 {{"type", "ByteFallback"}}, {{"type", "Fuse"}}});
  if (prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  // transformers' phi3_tokenizer: "▁" prepended and spaces replaced by a normalizer, so a
  // text starting with spaces gets one more "▁" than Metaspace would give (as llama.cpp).
  const bool phi3 = v.architecture == "phi3";
  ojson prepend = {{"type", "Prepend"}, {"prepend", kSpace}}, replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}};
  ojson normalizer = phi3 ? ojson{{"type", "Sequence"}, {"normalizers", prefix ? ojson::array({prepend, replace}) : ojson::array({replace})}}
                          : ojson(nullptr);
  ojson pre = phi3 ? ojson(nullptr)
                   : ojson{{"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", prefix ? "first" : "never"}, {"split", false}};
  return {{"normalizer", normalizer},
          {"pre_tokenizer", pre},
          {"post_processor", post_processor(v)},
          {"decoder", {{"type", "Sequence"}, {"decoders", decoders}}},
          {"model", bpe_model(std::move(vocab), merges_from_scores(v), true, false)}};
}

ojson byte_level_json(const GgufVocab& v, const std::string& path) {
  const std::string pre = v.pre.empty() ? "default" : v.pre;
  const auto spec = gguf_pretokenizer(pre);
  if (!spec) {
    TokenizerImpl t;
    t.source = path;
    t.fail("tokenizer.unknown_pretokenizer", "unknown tokenizer.ggml.pre '" + v.pre + "'", "supported names are listed in docs/tokenizer.md");
  }
  ojson steps = ojson::array();
  for (const std::string& re : hf_spelling(spec->regexes))
    steps.push_back({{"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", "Isolated"}, {"invert", false}});
  steps.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}});
  // An added token keeps its text in the vocabulary: the tokenizers library gives an added
  // token the id of the vocabulary entry spelled like it, and a new id past the vocabulary
  // when there is none.
  ojson vocab = ojson::object();
  for (size_t i = 0; i < v.tokens.size(); ++i) vocab[is_added(v, i) ? v.tokens[i] : byte_level_spelling(v.tokens[i])] = i;
  std::vector<std::pair<std::string, std::string>> merges;
  for (const std::string& m : v.merges) {
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (sp != std::string::npos) merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  return {{"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", steps}}},
          {"post_processor", post_processor(v)},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model", bpe_model(std::move(vocab), merges, false, spec->ignore_merges)}};
}

}  // namespace

ojson hf_tokenizer_json(const GgufVocab& v, const std::string& path) {
  ojson body = v.model == "llama" ? sentencepiece_json(v) : byte_level_json(v, path);
  ojson j = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added_tokens(v)}};
  for (auto& [k, x] : body.items()) j[k] = std::move(x);
  return j;
}

ojson hf_tokenizer_config(const GgufVocab& v) {
  auto tok = [&](int32_t id) { return id >= 0 ? ojson(v.tokens[static_cast<size_t>(id)]) : ojson(nullptr); };
  ojson c = {{"add_bos_token", v.adds_bos()}, {"add_eos_token", v.adds_eos()},
             {"bos_token", tok(v.bos)}, {"eos_token", tok(v.eos)}, {"unk_token", tok(v.unk)}, {"pad_token", tok(v.pad)},
             {"clean_up_tokenization_spaces", false}, {"tokenizer_class", "PreTrainedTokenizerFast"}};
  if (!v.chat_template.empty()) c["chat_template"] = v.chat_template;
  return c;
}

std::vector<std::pair<std::string, GgufValue>> gguf_vocab_kvs(const GgufVocab& v) {
  std::vector<std::pair<std::string, GgufValue>> kv;
  kv.push_back({"tokenizer.ggml.model", {v.model}});
  if (!v.pre.empty()) kv.push_back({"tokenizer.ggml.pre", {v.pre}});
  GgufStrings toks;
  toks.reserve(v.tokens.size());
  for (const auto& t : v.tokens) toks.push_back(t);
  kv.push_back({"tokenizer.ggml.tokens", {GgufArray(std::move(toks))}});
  if (!v.scores.empty()) kv.push_back({"tokenizer.ggml.scores", {GgufArray(v.scores)}});
  kv.push_back({"tokenizer.ggml.token_type", {GgufArray(v.types)}});
  if (!v.merges.empty()) {
    GgufStrings m;
    m.reserve(v.merges.size());
    for (const auto& s : v.merges) m.push_back(s);
    kv.push_back({"tokenizer.ggml.merges", {GgufArray(std::move(m))}});
  }
  const std::pair<const char*, int32_t> ids[] = {{"bos", v.bos}, {"eos", v.eos}, {"unknown", v.unk}, {"padding", v.pad},
                                                 {"eot", v.eot}, {"eom", v.eom}};
  for (const auto& [name, id] : ids)
    if (id >= 0) kv.push_back({std::string("tokenizer.ggml.") + name + "_token_id", {static_cast<uint32_t>(id)}});
  if (v.add_space_prefix) kv.push_back({"tokenizer.ggml.add_space_prefix", {*v.add_space_prefix}});
  if (v.add_bos) kv.push_back({"tokenizer.ggml.add_bos_token", {*v.add_bos}});
  if (v.add_eos) kv.push_back({"tokenizer.ggml.add_eos_token", {*v.add_eos}});
  if (!v.chat_template.empty()) kv.push_back({"tokenizer.chat_template", {v.chat_template}});
  return kv;
}

}  // namespace nunchaku
