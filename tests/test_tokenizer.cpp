// Tokenizer tests:
//  - llama.cpp's vocab test vectors in ../shared/testfiles/vocab (ids produced by the HF
//    tokenizers of those models; encoded with add_special=false, parse_special=false as
//    llama.cpp's test-tokenizer-0 does), for every .gguf there with its .inp/.out;
//  - HF tokenizer.json fixtures in testdata/tokenizers/*, trained and checked with the
//    `tokenizers`/`transformers` libraries by scripts/make_tokenizer_fixtures.py;
//  - one hostile inline tokenizer.json per error kind.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "format/gguf.hpp"
#include "core/source.hpp"
#include "tests/helpers.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace nunchaku;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// The .inp/.out pair as llama.cpp's test-tokenizer-0 reads it: inputs separated by
// "\n__ggml_vocab_test__\n", one line of space-separated ids per input.
struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<VocabCase> read_vocab_cases(const fs::path& inp, const fs::path& out) {
  const std::string raw = test::read_text(inp.string());
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < raw.size();) {
    size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(raw.substr(pos));
      break;
    }
    texts.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<VocabCase> cases;
  std::istringstream lines(test::read_text(out.string()));
  std::string line;
  for (const std::string& t : texts) {
    REQUIRE(std::getline(lines, line));
    VocabCase c{t, {}};
    std::istringstream ids(line);
    for (long v; ids >> v;) c.ids.push_back(static_cast<int32_t>(v));
    cases.push_back(std::move(c));
  }
  return cases;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

Tokenizer load_gguf_tokenizer(const std::string& path) {
  FileSource src(path);
  GgufFile g = read_gguf_file(src);
  return Tokenizer::from_gguf(g);
}

}  // namespace

TEST_CASE("tokenizer: every vocab GGUF with test vectors encodes exactly", "[tokenizer]") {
  NUNCHAKU_REQUIRE_SHARED();
  fs::path dir = test::shared_testfile("vocab");
  std::vector<fs::path> ggufs;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ggml-vocab-", 0) == 0 && e.path().extension() == ".gguf" && fs::exists(e.path().string() + ".inp") &&
        fs::exists(e.path().string() + ".out")) {
      ggufs.push_back(e.path());
    }
  }
  std::sort(ggufs.begin(), ggufs.end());
  REQUIRE(!ggufs.empty());
  for (const fs::path& p : ggufs) {
    const std::string name = p.filename().string();
    SECTION(name) {
      FileSource src(p.string());
      GgufFile g = read_gguf_file(src);
      const GgufValue* model = g.find("tokenizer.ggml.model");
      if (model && model->as_string() && *model->as_string() == "bert") {
        WARN("skipped " << name << ": WordPiece (bert) vocabularies are out of scope");
        continue;
      }
      Tokenizer tok = Tokenizer::from_gguf(g);
      auto cases = read_vocab_cases(p.string() + ".inp", p.string() + ".out");
      REQUIRE(!cases.empty());
      for (const VocabCase& c : cases) {
        INFO(name << " input: '" << c.text << "'");
        std::vector<int32_t> got = tok.encode(c.text, /*add_special=*/false, /*parse_special=*/false);
        INFO("expected: " << show(c.ids));
        INFO("got:      " << show(got));
        CHECK(got == c.ids);
        // Round trip: decoding the reference ids gives the input back.
        CHECK(tok.decode(c.ids, /*skip_special=*/false) == c.text);
      }
    }
  }
}

TEST_CASE("tokenizer: GGUF llama vocab basics", "[tokenizer]") {
  NUNCHAKU_REQUIRE_SHARED();
  Tokenizer tok = load_gguf_tokenizer(test::shared_testfile("vocab/ggml-vocab-llama-spm.gguf"));
  CHECK(tok.vocab_size() == 32000);
  CHECK(tok.bos_id() == 1);
  CHECK(tok.eos_ids() == std::vector<int32_t>{2});
  CHECK(tok.is_special(1));
  CHECK(!tok.is_special(15043));
  // add_special adds BOS; parse_special turns "</s>" text into the EOS id.
  CHECK(tok.encode("Hello world", true, false) == std::vector<int32_t>{1, 15043, 3186});
  std::vector<int32_t> with_eos = tok.encode("Hello</s>", false, true);
  REQUIRE(!with_eos.empty());
  CHECK(with_eos.back() == 2);
  CHECK(tok.decode(std::vector<int32_t>{1, 15043, 3186, 2}, true) == "Hello world");
}

TEST_CASE("tokenizer: streaming decoder holds back cut UTF-8", "[tokenizer]") {
  NUNCHAKU_REQUIRE_SHARED();
  Tokenizer tok = load_gguf_tokenizer(test::shared_testfile("vocab/ggml-vocab-llama-spm.gguf"));
  const std::string text = " this is 🦙.cpp and 我想在apple工作";
  std::vector<int32_t> ids = tok.encode(text, false, false);
  StreamDecoder dec(tok);
  std::string acc;
  for (int32_t id : ids) {
    std::string part = dec.push(id);
    // Every chunk handed out is valid UTF-8 on its own (no cut character).
    for (size_t i = 0; i < part.size();) {
      unsigned char c = static_cast<unsigned char>(part[i]);
      size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
      REQUIRE(i + n <= part.size());
      i += n;
    }
    acc += part;
  }
  acc += dec.flush();
  CHECK(acc == text);
  CHECK(acc == tok.decode(ids, true));
}

// ---- HF tokenizer.json fixtures ---------------------------------------------------

namespace {

std::vector<int32_t> ids_of(const json& j) { return j.get<std::vector<int32_t>>(); }

std::vector<ChatMessage> messages_of(const json& j) {
  std::vector<ChatMessage> out;
  for (const json& m : j) out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  return out;
}

}  // namespace

TEST_CASE("tokenizer: HF tokenizer.json fixtures match tokenizers/transformers", "[tokenizer]") {
  const fs::path root = test::testdata("tokenizers");
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory()) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  REQUIRE(dirs.size() >= 4);
  for (const fs::path& d : dirs) {
    SECTION(d.filename().string()) {
      const json exp = json::parse(test::read_text((d / "expected.json").string()));
      Tokenizer tok = Tokenizer::from_hf_dir(d.string());
      CHECK(tok.vocab_size() == exp["vocab_size"].get<int32_t>());
      if (exp["bos_id"].is_null()) CHECK(!tok.bos_id());
      else CHECK(tok.bos_id() == exp["bos_id"].get<int32_t>());
      std::vector<int32_t> eos = tok.eos_ids();
      std::sort(eos.begin(), eos.end());
      CHECK(eos == ids_of(exp["eos_ids"]));
      CHECK(tok.bos_token() == (exp["bos_token"].is_null() ? "" : exp["bos_token"].get<std::string>()));
      CHECK(tok.eos_token() == exp["eos_token"].get<std::string>());

      for (const json& c : exp["cases"]) {
        const std::string text = c["text"].get<std::string>();
        INFO(d.filename().string() << " text: '" << text << "'");
        CHECK(show(tok.encode(text, false, true)) == show(ids_of(c["ids"])));
        CHECK(show(tok.encode(text, true, true)) == show(ids_of(c["ids_add_special"])));
        CHECK(show(tok.encode(text, false, false)) == show(ids_of(c["ids_no_parse_special"])));
        CHECK(tok.decode(ids_of(c["ids"]), false) == c["decoded"].get<std::string>());
        CHECK(tok.decode(ids_of(c["ids_add_special"]), true) == c["decoded_skip_special"].get<std::string>());
        // Streaming gives the same text as decode, chunk by chunk.
        StreamDecoder sd(tok, true);
        std::string streamed;
        for (int32_t id : ids_of(c["ids_add_special"])) streamed += sd.push(id);
        streamed += sd.flush();
        CHECK(streamed == c["decoded_skip_special"].get<std::string>());
      }

      // Decoding arbitrary id sequences (cut characters, invalid byte runs, specials).
      for (const json& c : exp["decode_cases"]) {
        const std::vector<int32_t> ids = ids_of(c["ids"]);
        const bool skip = c["skip_special"].get<bool>();
        INFO(d.filename().string() << " decode " << show(ids) << (skip ? " skipping specials" : ""));
        CHECK(tok.decode(ids, skip) == c["text"].get<std::string>());
        StreamDecoder sd(tok, skip);
        std::string streamed;
        for (int32_t id : ids) streamed += sd.push(id);
        streamed += sd.flush();
        CHECK(streamed == c["text"].get<std::string>());
      }

      // Chat renderings of real templates of the family, as transformers renders them.
      for (const json& c : exp["chat"]) {
        const std::string name = c["template"].get<std::string>();
        INFO("template " << name << ", messages " << c["messages"].dump() << ", generation prompt "
                         << c["add_generation_prompt"].get<bool>());
        auto fmt = detect_chat_format(exp["templates"][name].get<std::string>());
        REQUIRE(fmt);
        CHECK(apply_chat(*fmt, messages_of(c["messages"]), c["add_generation_prompt"].get<bool>(), tok.bos_token(),
                         tok.eos_token()) == c["text"].get<std::string>());
      }
      // The template from tokenizer_config.json, through the Tokenizer.
      auto fmt = tok.chat_format();
      REQUIRE(fmt);
      for (const json& c : exp["default_chat"]) {
        const std::string text = tok.apply_chat(*fmt, messages_of(c["messages"]), c["add_generation_prompt"].get<bool>());
        CHECK(text == c["text"].get<std::string>());
        // The ids transformers' apply_chat_template(tokenize=True) feeds the model.
        if (c.contains("ids")) CHECK(show(tok.encode(text, false, true)) == show(ids_of(c["ids"])));
      }
    }
  }
}

TEST_CASE("tokenizer: chat family detection", "[tokenizer]") {
  CHECK(!detect_chat_format(""));
  CHECK(!detect_chat_format("{{ messages[0]['content'] }}"));
  CHECK(detect_chat_format("x<|im_start|>y")->family == ChatFamily::ChatML);
  CHECK(detect_chat_format("<start_of_turn>")->family == ChatFamily::Gemma);
  CHECK(detect_chat_format("[INST] <<SYS>>")->family == ChatFamily::Llama2);
  CHECK(detect_chat_format("'[INST] '")->family == ChatFamily::Mistral);
  CHECK(detect_chat_format("<|user|> eos_token")->family == ChatFamily::Zephyr);
  CHECK(detect_chat_format("<|user|> <|end|>")->family == ChatFamily::Phi3);
  CHECK(detect_chat_format("<|start_header_id|>")->family == ChatFamily::Llama3);
  // Phi-4-mini spells roles as '<|' + role + '|>': only <|assistant|> and <|end|> are literal.
  auto phi4_mini = detect_chat_format("{{ '<|' + m['role'] + '|>' + m['content'] + '<|end|>' }}{{ '<|assistant|>' }}");
  REQUIRE(phi4_mini);
  CHECK(phi4_mini->family == ChatFamily::Phi3);
  CHECK(!phi4_mini->phi3_newline);
  CHECK(detect_chat_format("'<|im_start|>user<|im_sep|>'")->chatml_im_sep);
  // The default system prompt is read from the template's own literal.
  auto q = detect_chat_format("{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}");
  REQUIRE(q);
  CHECK(q->default_system == "You are a helpful assistant.");
  auto expr = detect_chat_format("{{ '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}");
  REQUIRE(expr);
  CHECK(expr->default_system.empty());
}

TEST_CASE("tokenizer: GGUF phi-3 chat template renders as transformers does", "[tokenizer]") {
  NUNCHAKU_REQUIRE_SHARED();
  // The same template string is rendered by transformers in the llama2-spm fixture ("phi3-gguf").
  Tokenizer tok = load_gguf_tokenizer(test::shared_testfile("vocab/ggml-vocab-phi-3.gguf"));
  auto fmt = tok.chat_format();
  REQUIRE(fmt);
  CHECK(fmt->family == ChatFamily::Phi3);
  const json exp = json::parse(test::read_text(test::testdata("tokenizers/llama2-spm/expected.json")));
  CHECK(exp["templates"]["phi3-gguf"].get<std::string>() == tok.chat_template());
  // eos ids include <|end|> (end of turn) besides the file's eos.
  CHECK(tok.is_eos(32000));
  CHECK(tok.is_eos(*tok.token_to_id("<|end|>")));
}

TEST_CASE("tokenizer: Gemma-shaped GGUF vocabulary from llama.cpp's converter encodes as llama.cpp does", "[tokenizer]") {
  // testdata/gguf-vocab/gemma-spm (scripts/make_gemma_gguf_vocab.py): a SentencePiece BPE
  // model with byte fallback and no dummy prefix, converted by convert_hf_to_gguf; the ids
  // are llama-cpp-python's tokenize of the same strings.
  const std::string dir = test::testdata("gguf-vocab/gemma-spm");
  Tokenizer tok = load_gguf_tokenizer(dir + "/model.gguf");
  const json exp = json::parse(test::read_text(dir + "/expected.json"));
  CHECK(tok.vocab_size() == exp["vocab_size"].get<int32_t>());
  CHECK(tok.bos_id() == 2);
  REQUIRE(exp["cases"].size() >= 20);
  for (const json& c : exp["cases"]) {
    const std::string text = c["text"].get<std::string>();
    INFO("text: '" << text << "'");
    CHECK(show(tok.encode(text, false, true)) == show(ids_of(c["ids"])));
    CHECK(show(tok.encode(text, true, true)) == show(ids_of(c["ids_add_special"])));
    CHECK(show(tok.encode(text, false, false)) == show(ids_of(c["ids_no_parse_special"])));
    CHECK(tok.decode(ids_of(c["ids"]), false) == c["decoded"].get<std::string>());
  }
  // The converter stored <end_of_turn> as a normal token; llama.cpp makes it control and
  // end-of-generation by its text (the ids above split it out with parse_special).
  const auto eot = tok.token_to_id("<end_of_turn>");
  REQUIRE(eot);
  CHECK(tok.is_eos(*eot));
  CHECK(tok.is_special(*eot));
  CHECK(!tok.is_special(*tok.token_to_id("<start_of_turn>")));
  // The chat template travels in the GGUF (tokenizer.chat_template) and is recognised.
  auto fmt = tok.chat_format();
  REQUIRE(fmt);
  CHECK(fmt->family == ChatFamily::Gemma);
}

// ---- hostile tokenizer.json: one error kind each ------------------------------------

namespace {

// A valid minimal byte-level BPE: "a","b","ab" with merge "a b", then the replacement applied.
std::string tj(const std::string& model_extra = "", const std::string& top_extra = "") {
  return R"({"version":"1.0","model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"])" + model_extra +
         "}" + top_extra + "}";
}

std::string error_code_of(const std::string& json_text) {
  try {
    (void)Tokenizer::from_hf_json(json_text, "hostile.json");
  } catch (const Error& e) {
    CHECK(e.exit_code() == 2);
    CHECK(e.context().file == "hostile.json");
    return e.code();
  }
  return "no error";
}

}  // namespace

TEST_CASE("tokenizer: the minimal inline tokenizer.json works", "[tokenizer]") {
  Tokenizer t = Tokenizer::from_hf_json(tj(), "ok.json");
  CHECK(t.encode("ab", false, false) == std::vector<int32_t>{2});
  CHECK(t.encode("aab", false, false) == std::vector<int32_t>{0, 2});
  CHECK(t.decode(std::vector<int32_t>{0, 2, 99, -5}, false) == "aab");  // out-of-range ids are skipped
  // Characters that are not in the vocabulary, with no unk token and no byte fallback, are dropped.
  CHECK(t.encode("xyz", false, false).empty());
}

TEST_CASE("tokenizer: hostile tokenizer.json files fail with one error code each", "[tokenizer]") {
  CHECK(error_code_of("{\"model\": ") == "tokenizer.bad_json");
  CHECK(error_code_of("[1,2]") == "tokenizer.bad_field");
  CHECK(error_code_of(R"({"model": 5})") == "tokenizer.bad_field");
  CHECK(error_code_of(R"({"model":{"type":"BPE","vocab":{"a":"zero"},"merges":[]}})") == "tokenizer.bad_field");
  CHECK(error_code_of(R"({"model":{"type":"WordPiece","vocab":{"a":0}}})") == "tokenizer.unsupported");
  CHECK(error_code_of(R"({"model":{"type":"BPE","vocab":{},"merges":[]}})") == "tokenizer.empty_vocab");
  // ids: negative, beyond 2^30, gaps, two strings on one id, added token far away
  CHECK(error_code_of(R"({"model":{"type":"BPE","vocab":{"a":-1},"merges":[]}})") == "tokenizer.bad_token_id");
  CHECK(error_code_of(R"({"model":{"type":"BPE","vocab":{"a":4000000000},"merges":[]}})") == "tokenizer.bad_token_id");
  CHECK(error_code_of(R"({"model":{"type":"BPE","vocab":{"a":0,"b":5},"merges":[]}})") == "tokenizer.bad_token_id");
  CHECK(error_code_of(R"({"model":{"type":"BPE","vocab":{"a":0,"b":0},"merges":[]}})") == "tokenizer.duplicate_id");
  CHECK(error_code_of(tj("", R"(,"added_tokens":[{"id":900000000,"content":"<x>","special":true}])")) ==
        "tokenizer.bad_token_id");
  CHECK(error_code_of(tj("", R"(,"added_tokens":[{"id":3,"special":true}])")) == "tokenizer.bad_field");
  // merges: unknown token, unknown merged token, malformed
  CHECK(error_code_of(R"({"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":["a c"]}})") == "tokenizer.bad_merge");
  CHECK(error_code_of(R"({"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":["a b"]}})") == "tokenizer.bad_merge");
  CHECK(error_code_of(R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["ab"]}})") == "tokenizer.bad_merge");
  CHECK(error_code_of(R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a"]]}})") == "tokenizer.bad_merge");
  // pre-tokenizer regex that does not compile, unknown components
  CHECK(error_code_of(tj("", R"(,"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(["},"behavior":"Isolated"})")) ==
        "tokenizer.bad_regex");
  CHECK(error_code_of(tj("", R"(,"pre_tokenizer":{"type":"Split","pattern":{"Regex":"a"},"behavior":"Sideways"})")) ==
        "tokenizer.bad_field");
  CHECK(error_code_of(tj("", R"(,"pre_tokenizer":{"type":"BertPreTokenizer"})")) == "tokenizer.unsupported");
  CHECK(error_code_of(tj("", R"(,"normalizer":{"type":"Lowercase"})")) == "tokenizer.unsupported");
  CHECK(error_code_of(tj("", R"(,"decoder":{"type":"WordPiece"})")) == "tokenizer.unsupported");
  // post-processor pointing outside the vocabulary
  CHECK(error_code_of(tj("", R"(,"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>"}},{"Sequence":{"id":"A"}}],"special_tokens":{"<s>":{"id":"<s>","ids":[77],"tokens":["<s>"]}}})")) ==
        "tokenizer.bad_token_id");
}

TEST_CASE("tokenizer: HF directory errors name the file", "[tokenizer]") {
  test::TempDir dir;
  try {
    (void)Tokenizer::from_hf_dir(dir.path.string());
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == "tokenizer.missing");
    CHECK(e.exit_code() == 2);
  }
  test::write_file(dir.file("tokenizer.json"), tj());
  test::write_file(dir.file("generation_config.json"), std::string(R"({"eos_token_id": [1, 12345]})"));
  try {
    (void)Tokenizer::from_hf_dir(dir.path.string());
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == "tokenizer.bad_token_id");
  }
  test::write_file(dir.file("generation_config.json"), std::string("{not json"));
  try {
    (void)Tokenizer::from_hf_dir(dir.path.string());
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == "tokenizer.bad_json");
    CHECK(e.context().file.find("generation_config.json") != std::string::npos);
  }
}

// ---- hostile GGUF tokenizer metadata ---------------------------------------------------

namespace {

GgufFile gguf_vocab(const std::string& model, std::vector<std::string> tokens) {
  GgufFile g;
  g.path = "hostile.gguf";
  g.kvs.push_back({"tokenizer.ggml.model", GgufValue{std::string(model)}});
  GgufStrings strings;
  for (const auto& t : tokens) strings.push_back(t);
  g.kvs.push_back({"tokenizer.ggml.tokens", GgufValue{GgufArray{std::move(strings)}}});
  return g;
}

void set_kv(GgufFile& g, const std::string& key, GgufValue v) {
  for (auto& kv : g.kvs)
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  g.kvs.push_back({key, std::move(v)});
}

std::string gguf_error(const GgufFile& g) {
  try {
    (void)Tokenizer::from_gguf(g);
  } catch (const Error& e) {
    CHECK(e.exit_code() == 2);
    CHECK(e.context().file == "hostile.gguf");
    return e.code();
  }
  return "no error";
}

}  // namespace

TEST_CASE("tokenizer: hostile GGUF vocabularies fail with one error code each", "[tokenizer]") {
  // A valid gpt2 vocabulary first.
  GgufFile ok = gguf_vocab("gpt2", {"a", "b", "ab"});
  set_kv(ok, "tokenizer.ggml.merges", GgufValue{GgufArray{GgufStrings{"a b"}}});
  set_kv(ok, "tokenizer.ggml.pre", GgufValue{std::string("gpt-2")});
  CHECK(Tokenizer::from_gguf(ok).encode("ab", false, false) == std::vector<int32_t>{2});

  GgufFile g = gguf_vocab("", {"a"});
  g.kvs.erase(g.kvs.begin());
  CHECK(gguf_error(g) == "tokenizer.missing");
  CHECK(gguf_error(gguf_vocab("bert", {"a"})) == "tokenizer.unsupported_model");
  CHECK(gguf_error(gguf_vocab("llama", {"a"})) == "tokenizer.missing");  // no scores
  g = gguf_vocab("llama", {"a", "b"});
  set_kv(g, "tokenizer.ggml.scores", GgufValue{GgufArray{std::vector<float>{0.f}}});
  CHECK(gguf_error(g) == "tokenizer.size_mismatch");
  g = gguf_vocab("llama", {"a", "b"});
  set_kv(g, "tokenizer.ggml.scores", GgufValue{GgufArray{std::vector<float>{0.f, 0.f}}});
  set_kv(g, "tokenizer.ggml.token_type", GgufValue{GgufArray{std::vector<int32_t>{1}}});
  CHECK(gguf_error(g) == "tokenizer.size_mismatch");
  g = gguf_vocab("llama", {"a", "b"});
  set_kv(g, "tokenizer.ggml.scores", GgufValue{GgufArray{std::vector<float>{0.f, 0.f}}});
  set_kv(g, "tokenizer.ggml.bos_token_id", GgufValue{uint32_t{7}});
  CHECK(gguf_error(g) == "tokenizer.bad_token_id");
  set_kv(g, "tokenizer.ggml.bos_token_id", GgufValue{std::string("one")});
  CHECK(gguf_error(g) == "tokenizer.bad_metadata");
  CHECK(gguf_error(gguf_vocab("llama", {})) == "tokenizer.missing");  // scores missing before the empty check
  g = gguf_vocab("llama", {});
  set_kv(g, "tokenizer.ggml.scores", GgufValue{GgufArray{std::vector<float>{}}});
  CHECK(gguf_error(g) == "tokenizer.empty_vocab");

  g = ok;
  set_kv(g, "tokenizer.ggml.pre", GgufValue{std::string("no-such-pre")});
  CHECK(gguf_error(g) == "tokenizer.unknown_pretokenizer");
  g = ok;
  set_kv(g, "tokenizer.ggml.merges", GgufValue{GgufArray{GgufStrings{"a zz"}}});
  CHECK(gguf_error(g) == "tokenizer.bad_merge");
  set_kv(g, "tokenizer.ggml.merges", GgufValue{GgufArray{GgufStrings{"ab"}}});
  CHECK(gguf_error(g) == "tokenizer.bad_merge");
  set_kv(g, "tokenizer.ggml.merges", GgufValue{GgufArray{std::vector<float>{1.f}}});
  CHECK(gguf_error(g) == "tokenizer.missing");
}

TEST_CASE("tokenizer: long degenerate inputs round-trip (no quadratic blow-up, no crash)", "[tokenizer]") {
  NUNCHAKU_REQUIRE_SHARED();
  for (const char* vocab : {"vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-deepseek-llm.gguf"}) {
    INFO(vocab);
    Tokenizer tok = load_gguf_tokenizer(test::shared_testfile(vocab));
    for (const std::string& text : {std::string(200000, ' '), std::string(200000, 'a'), std::string(100000, '\n'),
                                    std::string(50000, '3') + "\t" + std::string(50000, '!')}) {
      std::vector<int32_t> ids = tok.encode(text, false, false);
      CHECK(!ids.empty());
      CHECK(tok.decode(ids, false) == text);
    }
    // Invalid UTF-8 becomes U+FFFD before tokenizing, never a crash.
    std::string junk;
    for (int i = 0; i < 5000; ++i) junk += static_cast<char>((i * 131 + 7) % 256);
    std::vector<int32_t> ids = tok.encode(junk, true, true);
    CHECK(!ids.empty());
    for (int32_t id : ids) CHECK((id >= 0 && id < tok.vocab_size()));
  }
}
