// Tokenizer from a Hugging Face model directory: tokenizer.json (the `tokenizers`
// library's serialisation) plus tokenizer_config.json, generation_config.json and
// config.json for BOS/EOS and the chat template.
//
// Supported tokenizer.json parts (anything else is tokenizer.unsupported, exit 2):
//   model:         BPE (vocab, merges as "a b" or ["a","b"], byte_fallback, ignore_merges,
//                  fuse_unk, unk_token)
//   normalizer:    Sequence (steps applied in order), Prepend, Replace (string pattern),
//                  NFC/NFD/NFKC/NFKD (unicode_norm.hpp), ByteLevel
//   pre_tokenizer: Sequence, Split (regex or string; all behaviours; invert), ByteLevel,
//                  Metaspace, Digits
//   post_processor: TemplateProcessing, ByteLevel, Sequence, RobertaProcessing, BertProcessing
//   decoder:       ByteLevel, ByteFallback, Replace, Fuse, Strip, Metaspace, Sequence
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tokenizer/impl.hpp"
#include "tokenizer/json_prescan.hpp"
#include "tokenizer/pretokenizers.hpp"
#include "tokenizer/tokenizer.hpp"
#include "core/text.hpp"

namespace nunchaku {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Largest file we read as JSON, checked before anything is read. Real tokenizer.json
// files are < 40 MB (gemma-3, 262k tokens: 33 MB). What the DOM of a smaller file would
// hold is bounded by prescan_tokenizer_json before the DOM is built.
constexpr uintmax_t kMaxJsonBytes = 64ull << 20;

std::string read_text(const fs::path& p) {
  std::error_code ec;
  uintmax_t size = fs::file_size(p, ec);
  if (ec) throw Error("tokenizer.unreadable", "cannot read: " + ec.message(), {p.string(), "", std::nullopt, ""});
  if (size > kMaxJsonBytes)
    throw Error("tokenizer.too_large",
                "file is " + std::to_string(size) + " bytes, more than the " + std::to_string(kMaxJsonBytes >> 20) +
                    " MiB a tokenizer.json may have",
                {p.string(), "", std::nullopt, ""});
  std::ifstream f(p, std::ios::binary);
  if (!f) throw Error("tokenizer.unreadable", "cannot open", {p.string(), "", std::nullopt, ""});
  // Read into one buffer of the file's size (a stringstream would hold it twice).
  std::string text(static_cast<size_t>(size), '\0');
  f.read(text.data(), static_cast<std::streamsize>(size));
  text.resize(static_cast<size_t>(f.gcount()));  // a file that shrank meanwhile
  return text;
}

json parse_json(std::string_view text, const std::string& name) {
  prescan_tokenizer_json(text, name);  // syntax and size limits, without a DOM
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    throw Error("tokenizer.bad_json", std::string("not valid JSON: ") + json_error_message(e), {name, "", std::nullopt, ""});
  }
}

struct Loader {
  TokenizerImpl& t;

  [[noreturn]] void unsupported(const std::string& what) const {
    t.fail("tokenizer.unsupported", what + " is not supported", "see docs/tokenizer.md for the supported tokenizer.json components");
  }
  [[noreturn]] void bad(const std::string& what) const { t.fail("tokenizer.bad_field", what); }

  const json& obj(const json& j, const char* key, const std::string& where) const {
    auto it = j.find(key);
    if (it == j.end()) bad(where + " has no '" + key + "'");
    return *it;
  }
  std::string string_at(const json& j, const char* key, const std::string& where) const {
    const json& v = obj(j, key, where);
    if (!v.is_string()) bad(where + "." + key + " is not a string");
    return v.get<std::string>();
  }
  bool bool_or(const json& j, const char* key, bool dflt, const std::string& where) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return dflt;
    if (!it->is_boolean()) bad(where + "." + key + " is not a boolean");
    return it->get<bool>();
  }
  std::string type_of(const json& j, const std::string& where) const {
    if (!j.is_object()) bad(where + " is not an object");
    return string_at(j, "type", where);
  }
  // {"Regex": "..."} or {"String": "..."}: fills regex or literal.
  void pattern(const json& j, PreStep& st, const std::string& where) const {
    if (!j.is_object()) bad(where + ".pattern is not an object");
    if (auto it = j.find("Regex"); it != j.end() && it->is_string()) {
      st.regex = std::make_shared<const Regex>(it->get<std::string>(), t.source);
    } else if (auto it2 = j.find("String"); it2 != j.end() && it2->is_string()) {
      st.literal = it2->get<std::string>();
    } else {
      bad(where + ".pattern has neither a Regex nor a String");
    }
  }

  void model(const json& m) {
    if (!m.is_object()) bad("model is not an object");
    std::string type = m.contains("type") ? string_at(m, "type", "model") : "BPE";
    if (type != "BPE") unsupported("model type '" + type + "'");
    const json& vocab = obj(m, "vocab", "model");
    if (!vocab.is_object()) bad("model.vocab is not an object");
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      auto it = m.find(k);
      if (it != m.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty())) unsupported(std::string("model.") + k);
    }
    // Ids may leave gaps (filled by added tokens); a hostile file must not make us
    // allocate far more slots than it has entries.
    int64_t max_id = -1;
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      if (!it->is_number_integer()) bad("model.vocab['" + it.key() + "'] is not an integer id");
      int64_t id = it->get<int64_t>();
      if (id < 0 || id >= (int64_t{1} << 30)) t.fail("tokenizer.bad_token_id", "model.vocab['" + it.key() + "'] = " + std::to_string(id) + " is not a valid id");
      max_id = std::max(max_id, id);
    }
    slots(max_id + 1);
    for (auto it = vocab.begin(); it != vocab.end(); ++it) put(it->get<int32_t>(), it.key(), "model.vocab");
    t.byte_fallback = bool_or(m, "byte_fallback", false, "model");
    t.ignore_merges = bool_or(m, "ignore_merges", false, "model");
    t.fuse_unk = bool_or(m, "fuse_unk", false, "model");
    if (auto it = m.find("unk_token"); it != m.end() && it->is_string()) {
      auto v = vocab.find(it->get<std::string>());
      if (v != vocab.end()) t.unk = v->get<int32_t>();
    }
  }

  size_t declared = 0;  // entries seen in vocab + added_tokens
  void slots(int64_t n) {
    if (n > static_cast<int64_t>(t.tokens.size())) {
      // At most 1024 unused ids per declared entry... in practice: gaps stay small.
      t.tokens.resize(static_cast<size_t>(n));
      t.attr.resize(static_cast<size_t>(n), kAttrUnused);
    }
  }
  std::vector<bool> filled;
  void put(int32_t id, const std::string& s, const char* where) {
    if (filled.size() < t.tokens.size()) filled.resize(t.tokens.size(), false);
    if (filled[id] && t.tokens[id] != s) {
      t.fail("tokenizer.duplicate_id", std::string(where) + ": id " + std::to_string(id) + " is used by both '" + t.tokens[id] + "' and '" + s + "'");
    }
    filled[id] = true;
    ++declared;
    t.tokens[id] = s;
    t.attr[id] = kAttrNormal;
  }

  void merges(const json& m, const std::unordered_map<std::string, int32_t>& vocab) {
    auto it = m.find("merges");
    if (it == m.end() || it->is_null()) return;
    if (!it->is_array()) bad("model.merges is not an array");
    t.merges.reserve(it->size() * 2);
    int32_t rank = 0;
    for (const json& e : *it) {
      std::string a, b;
      if (e.is_string()) {
        const std::string& s = e.get_ref<const std::string&>();
        size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          t.fail("tokenizer.bad_merge", "merge #" + std::to_string(rank) + " '" + s + "' is not two tokens separated by one space");
        }
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        a = e[0].get<std::string>();
        b = e[1].get<std::string>();
      } else {
        t.fail("tokenizer.bad_merge", "merge #" + std::to_string(rank) + " is neither \"a b\" nor [\"a\", \"b\"]");
      }
      auto ia = vocab.find(a), ib = vocab.find(b), iab = vocab.find(a + b);
      if (ia == vocab.end() || ib == vocab.end() || iab == vocab.end()) {
        t.fail("tokenizer.bad_merge", "merge #" + std::to_string(rank) + " ('" + a + "', '" + b + "') refers to a token that is not in model.vocab");
      }
      uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(ia->second)) << 32) | static_cast<uint32_t>(ib->second);
      t.merges.emplace(key, std::make_pair(rank, iab->second));  // the first (best) rank wins
      ++rank;
    }
  }

  void added_tokens(const json& j) {
    if (j.is_null()) return;
    if (!j.is_array()) bad("added_tokens is not an array");
    int64_t max_id = static_cast<int64_t>(t.tokens.size()) - 1;
    for (const json& a : j) {
      if (!a.is_object()) bad("added_tokens entry is not an object");
      const json& id = obj(a, "id", "added_tokens entry");
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (int64_t{1} << 30)) {
        t.fail("tokenizer.bad_token_id", "added token id " + id.dump() + " is not a valid id");
      }
      max_id = std::max(max_id, id.get<int64_t>());
    }
    // A hostile file must not make us allocate far more slots than it has entries.
    if (max_id >= static_cast<int64_t>(t.tokens.size()) + static_cast<int64_t>(j.size()) + 1024) {
      t.fail("tokenizer.bad_token_id", "added token id " + std::to_string(max_id) + " is far beyond the vocabulary of " + std::to_string(t.tokens.size()));
    }
    slots(max_id + 1);
    for (const json& a : j) {
      AddedToken at;
      at.id = a["id"].get<int32_t>();
      at.content = string_at(a, "content", "added_tokens entry");
      at.special = bool_or(a, "special", false, "added_tokens entry");
      at.lstrip = bool_or(a, "lstrip", false, "added_tokens entry");
      at.rstrip = bool_or(a, "rstrip", false, "added_tokens entry");
      at.single_word = bool_or(a, "single_word", false, "added_tokens entry");
      // Added tokens override the model's string for the id (HF looks them up first).
      if (filled.size() < t.tokens.size()) filled.resize(t.tokens.size(), false);
      filled[at.id] = true;
      t.tokens[at.id] = at.content;
      t.attr[at.id] = at.special ? kAttrControl : kAttrUserDefined;
      t.added.push_back(std::move(at));
    }
  }

  void normalizer(const json& n) {
    if (n.is_null()) return;
    std::string type = type_of(n, "normalizer");
    if (type == "Sequence") {
      const json& list = obj(n, "normalizers", "normalizer");
      if (!list.is_array()) bad("normalizer.normalizers is not an array");
      for (const json& x : list) normalizer(x);
    } else if (type == "Prepend") {
      t.normalizers.push_back({NormStep::Prepend, NormForm::NFC, string_at(n, "prepend", "normalizer"), ""});
    } else if (type == "Replace") {
      const json& p = obj(n, "pattern", "normalizer");
      if (!p.is_object() || !p.contains("String") || !p["String"].is_string()) unsupported("a Replace normalizer with a regex pattern");
      t.normalizers.push_back({NormStep::Replace, NormForm::NFC, p["String"].get<std::string>(), string_at(n, "content", "normalizer")});
    } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
      const NormForm form = type == "NFC" ? NormForm::NFC : type == "NFD" ? NormForm::NFD : type == "NFKC" ? NormForm::NFKC : NormForm::NFKD;
      t.normalizers.push_back({NormStep::Unicode, form, "", ""});
    } else if (type == "ByteLevel") {
      t.byte_level = true;
    } else {
      unsupported("normalizer '" + type + "'");
    }
  }

  void pre_tokenizer(const json& p) {
    if (p.is_null()) return;
    std::string type = type_of(p, "pre_tokenizer");
    if (type == "Sequence") {
      const json& list = obj(p, "pretokenizers", "pre_tokenizer");
      if (!list.is_array()) bad("pre_tokenizer.pretokenizers is not an array");
      for (const json& x : list) pre_tokenizer(x);
    } else if (type == "Split") {
      PreStep st;
      pattern(obj(p, "pattern", "pre_tokenizer"), st, "pre_tokenizer");
      std::string b = string_at(p, "behavior", "pre_tokenizer");
      if (b == "Removed") st.behavior = PreStep::Removed;
      else if (b == "Isolated") st.behavior = PreStep::Isolated;
      else if (b == "MergedWithPrevious") st.behavior = PreStep::MergedWithPrevious;
      else if (b == "MergedWithNext") st.behavior = PreStep::MergedWithNext;
      else if (b == "Contiguous") st.behavior = PreStep::Contiguous;
      else bad("pre_tokenizer Split behavior '" + b + "' is unknown");
      st.invert = bool_or(p, "invert", false, "pre_tokenizer");
      t.pre.push_back(std::move(st));
    } else if (type == "ByteLevel") {
      t.byte_level = true;
      if (bool_or(p, "add_prefix_space", false, "pre_tokenizer")) {
        PreStep st;
        st.kind = PreStep::PrefixSpace;
        t.pre.push_back(std::move(st));
      }
      if (bool_or(p, "use_regex", true, "pre_tokenizer")) {
        PreStep st;
        st.regex = std::make_shared<const Regex>(kGpt2ByteLevelRegex, t.source);
        t.pre.push_back(std::move(st));
      }
    } else if (type == "Metaspace") {
      PreStep st;
      st.kind = PreStep::Metaspace;
      if (p.contains("replacement")) st.replacement = string_at(p, "replacement", "pre_tokenizer");
      std::string scheme = p.contains("prepend_scheme") ? string_at(p, "prepend_scheme", "pre_tokenizer")
                           : bool_or(p, "add_prefix_space", true, "pre_tokenizer") ? "always" : "never";
      if (scheme == "always") st.prepend = PreStep::Always;
      else if (scheme == "first") st.prepend = PreStep::First;
      else if (scheme == "never") st.prepend = PreStep::Never;
      else bad("pre_tokenizer Metaspace prepend_scheme '" + scheme + "' is unknown");
      st.split = bool_or(p, "split", true, "pre_tokenizer");
      t.pre.push_back(std::move(st));
    } else if (type == "Digits") {
      PreStep st;
      st.regex = std::make_shared<const Regex>("\\p{N}", t.source);
      st.behavior = bool_or(p, "individual_digits", false, "pre_tokenizer") ? PreStep::Isolated : PreStep::Contiguous;
      t.pre.push_back(std::move(st));
    } else {
      unsupported("pre_tokenizer '" + type + "'");
    }
  }

  int32_t special_id(const json& j, const std::string& name) {
    // TemplateProcessing special_tokens: {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}
    auto it = j.find(name);
    if (it == j.end() || !it->is_object()) bad("post_processor.special_tokens has no '" + name + "'");
    const json& ids = obj(*it, "ids", "post_processor.special_tokens");
    if (!ids.is_array() || ids.size() != 1 || !ids[0].is_number_integer()) unsupported("a multi-id special token in TemplateProcessing");
    int64_t id = ids[0].get<int64_t>();
    if (id < 0 || id >= static_cast<int64_t>(t.tokens.size())) t.fail("tokenizer.bad_token_id", "post_processor special token '" + name + "' has id " + std::to_string(id) + " outside the vocabulary");
    return static_cast<int32_t>(id);
  }

  void post_processor(const json& p) {
    if (p.is_null()) return;
    std::string type = type_of(p, "post_processor");
    if (type == "Sequence") {
      const json& list = obj(p, "processors", "post_processor");
      if (!list.is_array()) bad("post_processor.processors is not an array");
      for (const json& x : list) post_processor(x);
    } else if (type == "ByteLevel") {
      // offsets only
    } else if (type == "TemplateProcessing") {
      const json& single = obj(p, "single", "post_processor");
      const json& specials = obj(p, "special_tokens", "post_processor");
      if (!single.is_array()) bad("post_processor.single is not an array");
      bool seen_seq = false;
      for (const json& piece : single) {
        if (piece.contains("Sequence")) {
          seen_seq = true;
        } else if (piece.contains("SpecialToken")) {
          std::string name = string_at(piece["SpecialToken"], "id", "post_processor.single");
          (seen_seq ? t.suffix_ids : t.prefix_ids).push_back(special_id(specials, name));
        } else {
          bad("post_processor.single has an entry that is neither Sequence nor SpecialToken");
        }
      }
    } else if (type == "RobertaProcessing" || type == "BertProcessing") {
      auto tok = [&](const char* key) {
        const json& v = obj(p, key, "post_processor");
        if (!v.is_array() || v.size() != 2 || !v[1].is_number_integer()) bad(std::string("post_processor.") + key + " is not [token, id]");
        int64_t id = v[1].get<int64_t>();
        if (id < 0 || id >= static_cast<int64_t>(t.tokens.size())) t.fail("tokenizer.bad_token_id", std::string("post_processor.") + key + " id is outside the vocabulary");
        return static_cast<int32_t>(id);
      };
      t.prefix_ids.push_back(tok("cls"));
      t.suffix_ids.push_back(tok("sep"));
    } else {
      unsupported("post_processor '" + type + "'");
    }
  }

  void decoder(const json& d) {
    if (d.is_null()) return;
    std::string type = type_of(d, "decoder");
    if (type == "Sequence") {
      const json& list = obj(d, "decoders", "decoder");
      if (!list.is_array()) bad("decoder.decoders is not an array");
      for (const json& x : list) decoder(x);
    } else if (type == "ByteLevel") {
      t.decode_kind = DecodeKind::ByteLevel;
    } else if (type == "ByteFallback") {
      t.decode_kind = DecodeKind::Spm;
      t.byte_fallback_decoder = true;
    } else if (type == "Replace") {
      t.decode_kind = DecodeKind::Spm;
    } else if (type == "Fuse") {
    } else if (type == "Strip") {
      auto it = d.find("start");
      if (it != d.end() && it->is_number_integer() && it->get<int64_t>() > 0) t.strip_leading_space = true;
    } else if (type == "Metaspace") {
      t.decode_kind = DecodeKind::Spm;
      std::string scheme = d.contains("prepend_scheme") && d["prepend_scheme"].is_string() ? d["prepend_scheme"].get<std::string>()
                           : bool_or(d, "add_prefix_space", true, "decoder") ? "always" : "never";
      if (scheme != "never") t.strip_leading_space = true;
    } else {
      unsupported("decoder '" + type + "'");
    }
  }
};

std::string token_text(const json& j) {
  // tokenizer_config.json spells tokens as "<s>" or {"content": "<s>", ...}.
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return {};
}

std::vector<int64_t> id_list(const json& j) {
  std::vector<int64_t> out;
  if (j.is_number_integer()) out.push_back(j.get<int64_t>());
  else if (j.is_array())
    for (const json& x : j)
      if (x.is_number_integer()) out.push_back(x.get<int64_t>());
  return out;
}

std::shared_ptr<TokenizerImpl> load_tokenizer_json(std::string_view text, const std::string& name) {
  auto t = std::make_shared<TokenizerImpl>();
  t->source = name;
  json j = parse_json(text, name);
  if (!j.is_object()) t->fail("tokenizer.bad_field", "tokenizer.json is not a JSON object");
  Loader L{*t};
  L.model(L.obj(j, "model", "tokenizer.json"));
  L.added_tokens(j.value("added_tokens", json()));
  // Every id below the largest must name a token.
  for (size_t i = 0; i < t->tokens.size(); ++i) {
    if (i >= L.filled.size() || !L.filled[i]) t->fail("tokenizer.bad_token_id", "id " + std::to_string(i) + " has no token (ids must be contiguous)");
  }
  L.normalizer(j.value("normalizer", json()));
  L.pre_tokenizer(j.value("pre_tokenizer", json()));
  L.post_processor(j.value("post_processor", json()));
  t->byte_fallback_decoder = false;  // set again by a ByteFallback decoder
  L.decoder(j.value("decoder", json()));
  t->finish();
  // Merges refer to the model's vocab strings (not added tokens that override an id).
  std::unordered_map<std::string, int32_t> vocab;
  const json& mv = j["model"]["vocab"];
  vocab.reserve(mv.size() * 2);
  for (auto it = mv.begin(); it != mv.end(); ++it) vocab.emplace(it.key(), it->get<int32_t>());
  L.merges(j["model"], vocab);
  return t;
}

}  // namespace

Tokenizer Tokenizer::from_hf_json(std::string_view tokenizer_json, const std::string& name) {
  return Tokenizer(load_tokenizer_json(tokenizer_json, name));
}

Tokenizer Tokenizer::from_hf_dir(const std::string& dir) {
  fs::path d(dir);
  fs::path tj = d / "tokenizer.json";
  if (!fs::is_regular_file(tj)) {
    std::string hint = fs::exists(d / "tokenizer.model") ? "only tokenizer.model (SentencePiece protobuf) is present; convert it to tokenizer.json with transformers" : "";
    throw Error("tokenizer.missing", "no tokenizer.json in the model directory", {d.string(), "", std::nullopt, hint});
  }
  auto t = load_tokenizer_json(read_text(tj), tj.string());

  auto read_opt = [&](const char* file) -> json {
    fs::path p = d / file;
    if (!fs::is_regular_file(p)) return json();
    json j = parse_json(read_text(p), p.string());
    return j.is_object() ? j : json();
  };
  auto lookup = [&](const std::string& s) -> int32_t {
    auto it = t->token_to_id.find(s);
    return it == t->token_to_id.end() ? -1 : it->second;
  };
  auto valid_or_fail = [&](int64_t id, const std::string& what) -> int32_t {
    if (!t->valid(id)) t->fail("tokenizer.bad_token_id", what + " " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(t->size()));
    return static_cast<int32_t>(id);
  };

  json tc = read_opt("tokenizer_config.json");
  json gc = read_opt("generation_config.json");
  json mc = read_opt("config.json");

  if (tc.is_object()) {
    std::string bos = tc.contains("bos_token") ? token_text(tc["bos_token"]) : "";
    std::string eos = tc.contains("eos_token") ? token_text(tc["eos_token"]) : "";
    std::string pad = tc.contains("pad_token") ? token_text(tc["pad_token"]) : "";
    std::string unk = tc.contains("unk_token") ? token_text(tc["unk_token"]) : "";
    if (!bos.empty()) t->bos = lookup(bos);
    if (!eos.empty()) t->eos = lookup(eos);
    if (!pad.empty()) t->pad = lookup(pad);
    if (!unk.empty() && t->unk < 0) t->unk = lookup(unk);
    // As transformers' Llama/Gemma fast tokenizers: add_bos_token / add_eos_token rebuild the template.
    if (tc.contains("add_bos_token") && tc["add_bos_token"].is_boolean()) {
      t->prefix_ids.clear();
      if (tc["add_bos_token"].get<bool>() && t->bos >= 0) t->prefix_ids.push_back(t->bos);
    }
    if (tc.contains("add_eos_token") && tc["add_eos_token"].is_boolean()) {
      t->suffix_ids.clear();
      if (tc["add_eos_token"].get<bool>() && t->eos >= 0) t->suffix_ids.push_back(t->eos);
    }
    if (auto it = tc.find("chat_template"); it != tc.end()) {
      if (it->is_string()) {
        t->chat_template = it->get<std::string>();
      } else if (it->is_array()) {
        for (const json& e : *it)
          if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string()) t->chat_template = e["template"].get<std::string>();
      }
    }
  }
  if (t->chat_template.empty() && fs::is_regular_file(d / "chat_template.jinja")) t->chat_template = read_text(d / "chat_template.jinja");

  // EOS ids: generation_config (may be a list), else config.json, plus the tokenizer's eos_token.
  std::vector<int64_t> eos = gc.is_object() && gc.contains("eos_token_id") ? id_list(gc["eos_token_id"]) : std::vector<int64_t>{};
  if (eos.empty() && mc.is_object() && mc.contains("eos_token_id")) eos = id_list(mc["eos_token_id"]);
  t->eos_ids.clear();
  for (int64_t id : eos) t->eos_ids.push_back(valid_or_fail(id, "eos_token_id"));
  if (t->eos < 0 && !t->eos_ids.empty()) t->eos = t->eos_ids.front();
  if (t->eos >= 0 && std::find(t->eos_ids.begin(), t->eos_ids.end(), t->eos) == t->eos_ids.end()) t->eos_ids.push_back(t->eos);
  if (t->bos < 0) {
    for (const json* c : {&gc, &mc}) {
      if (c->is_object() && c->contains("bos_token_id") && (*c)["bos_token_id"].is_number_integer()) {
        t->bos = valid_or_fail((*c)["bos_token_id"].get<int64_t>(), "bos_token_id");
        break;
      }
    }
  }
  return Tokenizer(std::move(t));
}

}  // namespace nunchaku
