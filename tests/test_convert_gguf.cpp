// convert between GGUF and Hugging Face directories, against the two tools people use for
// it (scripts/make_gguf_convert_fixtures.py, testdata/convert/gguf/):
//   - llama.cpp's convert_hf_to_gguf made <name>.gguf from testdata/run/<name>: the
//     tokenizer key-values and tensors convert writes from the same HF directory;
//   - transformers' from_pretrained(gguf_file=...) + save_pretrained made sidecars/<name>/:
//     the config.json, tokenizer.json and tokenizer_config.json convert derives from the GGUF,
//     and ids.json, what that tokenizer gives for a set of strings;
//   - converted models generate the same greedy tokens in `nunchaku run` as their input.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/file.hpp"
#include "core/source.hpp"
#include "format/gguf.hpp"
#include "format/open.hpp"
#include "tests/helpers.hpp"
#include "tokenizer/gguf_vocab.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace nunchaku;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kDir = "convert/gguf/";

test::RunResult convert(const std::vector<std::string>& args) {
  std::vector<std::string> a = {"convert"};
  a.insert(a.end(), args.begin(), args.end());
  a.push_back("-q");
  return test::run_cli(a);
}

GgufFile gguf(const std::string& path) { return read_gguf_file(FileSource(path)); }

// Same JSON value; numbers compared as doubles (1 == 1.0).
bool same(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
  return a == b;
}

// config.json: every field transformers derived from the GGUF is ours with the same value;
// a field both have agrees; ours adds only `architectures` (and spells transformers 5's
// rope_parameters.rope_theta as rope_theta, which both transformers 4 and 5 read), and
// `rope_scaling` from the GGUF's rope.scaling.* keys, which transformers drops.
void check_config(const json& ours, const json& ref) {
  for (const auto& [k, v] : ref.items()) {
    if (k == "transformers_version" || k == "_model_name_or_path") continue;
    INFO(k);
    if (k == "rope_parameters") {
      CHECK(same(ours.at("rope_theta"), v.at("rope_theta")));
      continue;
    }
    static const std::set<std::string> derived = {
        "model_type", "hidden_size", "intermediate_size", "max_position_embeddings", "num_attention_heads",
        "num_hidden_layers", "num_key_value_heads", "rms_norm_eps", "vocab_size", "head_dim",
        "bos_token_id", "eos_token_id", "unk_token_id", "pad_token_id", "tie_word_embeddings",
        "n_embd", "n_layer", "n_head", "n_ctx", "n_positions", "layer_norm_epsilon"};
    if (v.is_null()) CHECK((!ours.contains(k) || ours[k].is_null()));
    else if (derived.count(k)) CHECK((ours.contains(k) && same(ours[k], v)));
    else if (ours.contains(k)) CHECK(same(ours[k], v));
  }
  for (const auto& [k, v] : ours.items()) {
    INFO(k);
    CHECK((ref.contains(k) || k == "architectures" || k == "rope_theta" || k == "rope_scaling"));
  }
}

// Same GGUF value: type and contents (nested arrays are not compared).
bool same_value(const GgufValue& a, const GgufValue& b) {
  if (a.data.index() != b.data.index()) return false;
  const auto* x = std::get_if<GgufArray>(&a.data);
  const auto* y = std::get_if<GgufArray>(&b.data);
  if (!x) return std::visit([&](const auto& v) {
      using T = std::decay_t<decltype(v)>;
      if constexpr (std::is_same_v<T, GgufArray>) return false;
      else return v == std::get<T>(b.data);
    }, a.data);
  if (x->index() != y->index()) return false;
  return std::visit([&](const auto& v) {
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<T, std::vector<GgufValue>>) return false;
    else return v == std::get<T>(*y);
  }, *x);
}

std::vector<int32_t> ids_of(const json& j) { return j.get<std::vector<int32_t>>(); }

}  // namespace

TEST_CASE("convert GGUF -> HF: config.json and tokenizer files as transformers builds them", "[convert][gguf]") {
  for (const std::string name : {"qwen2-bpe", "llama-spm"}) {
    INFO(name);
    const std::string in = test::testdata(kDir + name + ".gguf"), ref = test::testdata(kDir + "sidecars/" + name);
    test::TempDir d;
    const std::string out = d.file("hf");
    auto r = convert({in, out, "--names", "hf"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    check_config(test::read_json(out + "/config.json"), test::read_json(ref + "/config.json"));
    CHECK(test::read_json(out + "/config.json")["architectures"] ==
          json::array({name == "qwen2-bpe" ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}));

    const json tc = test::read_json(out + "/tokenizer_config.json"), rtc = test::read_json(ref + "/tokenizer_config.json");
    for (const char* k : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
      INFO(k);
      CHECK(tc.value(k, json()) == rtc.value(k, json()));
    }
    CHECK(tc.value("chat_template", "") == test::read_text(ref + "/chat_template.jinja"));

    // The same ids as transformers' tokenizer, through our tokenizer reading our files and
    // reading transformers' files.
    const Tokenizer ours = Tokenizer::from_hf_dir(out), theirs = Tokenizer::from_hf_dir(ref);
    const json cases = test::read_json(ref + "/ids.json")["cases"];
    REQUIRE(cases.size() >= 8);
    for (const auto& c : cases) {
      const std::string text = c["text"];
      INFO(text);
      CHECK(ours.encode(text, false, true) == ids_of(c["ids"]));
      CHECK(ours.encode(text, true, true) == ids_of(c["ids_special"]));
      CHECK(theirs.encode(text, true, true) == ids_of(c["ids_special"]));
    }
  }
}

TEST_CASE("convert HF -> GGUF: tokenizer key-values and tensors as convert_hf_to_gguf writes them", "[convert][gguf]") {
  for (const std::string name : {"qwen2-bpe", "llama-spm"}) {
    INFO(name);
    test::TempDir d;
    const std::string out = d.file("m.gguf");
    auto r = convert({test::testdata("run/" + name), out, "--names", "gguf"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const GgufFile ours = gguf(out), ref = gguf(test::testdata(kDir + name + ".gguf"));
    const bool spm = name == "llama-spm";
    for (const char* k : {"tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                          "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
                          "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token", "tokenizer.chat_template"}) {
      INFO(k);
      const GgufValue *a = ours.find(k), *b = ref.find(k);
      REQUIRE((a == nullptr) == (b == nullptr));
      if (a) CHECK(same_value(*a, *b));
    }
    // convert_hf_to_gguf scores every SentencePiece-style token -1000 (it has no
    // tokenizer.model); ours follow the merges, so llama.cpp's tokenizer reading our GGUF
    // gives the HF tokenizer's ids.
    if (spm) CHECK(ref.find("tokenizer.ggml.scores")->array<float>()->at(300) == -1000.0f);
    const Tokenizer hf = Tokenizer::from_hf_dir(test::testdata("run/" + name)), back = Tokenizer::from_gguf(ours);
    // Held in a local: a range-for over a member of a temporary reads freed memory (ASan).
    const auto ids = test::read_json(test::testdata(kDir + "sidecars/" + name + "/ids.json"));
    for (const auto& c : ids["cases"]) {
      const std::string text = c["text"];
      INFO(text);
      CHECK(back.encode(text, true, true) == hf.encode(text, true, true));
    }
    // Tensors: same names, shapes, types and bytes (Q/K permuted for llama).
    REQUIRE(ours.tensors.size() == ref.tensors.size());
    for (const auto& t : ref.tensors) {
      INFO(t.name);
      const GgufTensor* o = ours.find_tensor(t.name);
      REQUIRE(o);
      CHECK(o->ne == t.ne);
      CHECK(o->ggml_type == t.ggml_type);
      std::string a(o->nbytes, '\0'), b(t.nbytes, '\0');
      File::open_read_only(out).read_at(o->offset, a.data(), a.size());
      File::open_read_only(ref.path).read_at(t.offset, b.data(), b.size());
      CHECK(a == b);
    }
  }
}

TEST_CASE("convert --names gguf: llama3 rope scaling gets convert_hf_to_gguf's rope_freqs", "[convert][gguf]") {
  test::TempDir d;
  const std::string out = d.file("l3.gguf");
  auto r = convert({test::testdata("engine/llama3-rope"), out, "--names", "gguf", "--verify"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const Checkpoint ours = open_checkpoint(out), ref = open_checkpoint(test::testdata(kDir + "rope_freqs-llama3.safetensors"));
  const TensorInfo *a = ours.find("rope_freqs.weight"), *b = ref.find("rope_freqs.weight");
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->shape == b->shape);
  REQUIRE(a->nbytes == b->nbytes);
  std::vector<float> va(a->nbytes / 4), vb(b->nbytes / 4);
  File::open_read_only(ours.files[a->file].path).read_at(a->offset, va.data(), a->nbytes);
  File::open_read_only(ref.files[b->file].path).read_at(b->offset, vb.data(), b->nbytes);
  CHECK(va == vb);
  CHECK(*std::max_element(vb.begin(), vb.end()) > 1.0f);  // the fixture does scale
}

namespace {

// The greedy token ids `nunchaku run --raw` gives for each prompt, one list per prompt.
std::vector<json> run_tokens(const std::string& model, const std::vector<std::string>& prompts, int max_tokens) {
  std::string in;
  for (const auto& p : prompts) in += json({{"prompt", p}}).dump() + "\n";
  auto r = test::run_cli({"run", model, "--raw", "--max-tokens", std::to_string(max_tokens), "-q"}, in);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::vector<json> out;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) out.push_back(json::parse(line)["token_ids"]);
  return out;
}

}  // namespace

TEST_CASE("convert: HF -> GGUF (--names gguf) and GGUF -> HF (--names hf) generate the same tokens in run", "[convert][gguf]") {
  for (const std::string name : {"qwen2-bpe", "llama-spm"}) {
    INFO(name);
    const std::string dir = test::testdata("run/" + name);
    const json exp = test::read_json(dir + "/expected.json");
    std::vector<std::string> prompts;
    std::vector<json> want;
    for (const auto& c : exp["cases"])
      if (c["mode"] == "raw") prompts.push_back(c["prompt"]), want.push_back(c["completion_ids"]);
    REQUIRE(!prompts.empty());
    const int n = exp["max_tokens"].get<int>();
    test::TempDir d;
    // HF -> GGUF with its own tokenizer: transformers' tokens.
    auto r = convert({dir, d.file("m.gguf"), "--names", "gguf"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(run_tokens(d.file("m.gguf"), prompts, n) == want);
    // ... and back to HF: config.json and tokenizer files derived from the GGUF.
    r = convert({d.file("m.gguf"), d.file("back"), "--names", "hf"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(run_tokens(d.file("back"), prompts, n) == want);
  }
  // convert_hf_to_gguf's qwen2 GGUF to HF (its llama-spm GGUF tokenizes differently in
  // llama.cpp and in transformers, see above, so only the BPE one is compared).
  const std::string gguf_in = test::testdata(kDir + "qwen2-bpe.gguf");
  const json exp = test::read_json(test::testdata("run/qwen2-bpe/expected.json"));
  std::vector<std::string> prompts;
  for (const auto& c : exp["cases"])
    if (c["mode"] == "raw") prompts.push_back(c["prompt"]);
  test::TempDir d;
  auto r = convert({gguf_in, d.file("hf"), "--names", "hf"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const int n = exp["max_tokens"].get<int>();
  CHECK(run_tokens(d.file("hf"), prompts, n) == run_tokens(gguf_in, prompts, n));
}

TEST_CASE("convert HF -> GGUF: a Mistral checkpoint is llama.cpp's llama architecture and runs the same", "[convert][gguf]") {
  // convert_hf_to_gguf converts MistralForCausalLM (and MixtralForCausalLM) with its llama
  // model class: general.architecture "llama", keys "llama.*" (llama.cpp 0.3.36
  // conversion/__init__.py and conversion/llama.py); llama.cpp has no "mistral" architecture.
  // llama-spm with a Mistral config: the same weights, a window far past its 256 positions.
  const std::string src = test::testdata("run/llama-spm");
  test::TempDir d;
  fs::copy(src, d.file("mistral"), fs::copy_options::recursive);
  json cfg = test::read_json(src + "/config.json");
  cfg["model_type"] = "mistral";
  cfg["architectures"] = {"MistralForCausalLM"};
  cfg["sliding_window"] = 4096;
  std::ofstream(d.file("mistral/config.json")) << cfg.dump(2);
  auto r = convert({d.file("mistral"), d.file("m.gguf"), "--names", "gguf"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const GgufFile g = gguf(d.file("m.gguf"));
  REQUIRE(g.find("general.architecture"));
  CHECK(*g.find("general.architecture")->as_string() == "llama");
  REQUIRE(g.find("llama.block_count"));
  CHECK(!g.find("mistral.block_count"));
  // The GGUF generates transformers' tokens for the llama-spm prompts.
  const json exp = test::read_json(src + "/expected.json");
  std::vector<std::string> prompts;
  std::vector<json> want;
  for (const auto& c : exp["cases"])
    if (c["mode"] == "raw") prompts.push_back(c["prompt"]), want.push_back(c["completion_ids"]);
  REQUIRE(!prompts.empty());
  CHECK(run_tokens(d.file("m.gguf"), prompts, exp["max_tokens"].get<int>()) == want);
}

TEST_CASE("convert: what cannot be derived is listed as not written, the rest is converted", "[convert][gguf]") {
  test::TempDir d;
  // A GGUF without a vocabulary: config.json only.
  auto r = test::run_cli({"convert", test::testdata("engine/qwen2-f32.gguf"), d.file("hf"), "--names", "hf", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  json j = json::parse(r.out);
  CHECK(j["sidecars"] == json::array({"config.json"}));
  CHECK(j["skipped"].dump().find("tokenizer.json: the GGUF has no tokenizer.ggml.* vocabulary") != std::string::npos);
  CHECK(test::read_json(d.file("hf") + "/config.json")["model_type"] == "qwen2");
  CHECK(!fs::exists(d.file("hf") + "/tokenizer.json"));
  // An HF directory without tokenizer.json: a GGUF without tokenizer keys.
  r = test::run_cli({"convert", test::testdata("models/llama"), d.file("l.gguf"), "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  j = json::parse(r.out);
  CHECK(j["skipped"].dump().find("tokenizer.ggml.*: no tokenizer.json beside the input") != std::string::npos);
  const GgufFile g = gguf(d.file("l.gguf"));
  CHECK(g.find("tokenizer.ggml.model") == nullptr);
  CHECK(g.find("llama.rope.dimension_count") != nullptr);
}

// ids.json: transformers' ids, with what transformers gets wrong for falcon (its digit split)
// and deepseek (its BOS) corrected by the script, checked there against llama.cpp's test
// vectors of those models.
TEST_CASE("convert GGUF -> HF: real llama.cpp vocabularies give the models' ids", "[convert][gguf][shared]") {
  NUNCHAKU_REQUIRE_SHARED();
  int compared = 0;
  for (const auto& e : fs::directory_iterator(test::testdata(kDir + "shared"))) {
    const std::string name = e.path().filename().string(), ref = e.path().string();
    INFO(name);
    test::TempDir d;
    const std::string out = d.file("hf");
    auto r = convert({test::shared_testfile("vocab/ggml-vocab-" + name + ".gguf"), out});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    if (name == "gpt-2") REQUIRE(fs::exists(out + "/config.json"));
    if (fs::exists(out + "/config.json")) check_config(test::read_json(out + "/config.json"), test::read_json(ref + "/config.json"));
    const Tokenizer ours = Tokenizer::from_hf_dir(out);
    // The BOS's text is the BOS, as llama.cpp parses a control token's text (deepseek's
    // "<｜begin▁of▁sentence｜>" is spelled outside the byte alphabet; transformers drops it).
    const GgufVocab v = read_gguf_vocab(gguf(test::shared_testfile("vocab/ggml-vocab-" + name + ".gguf")));
    REQUIRE(v.bos >= 0);
    CHECK(ours.encode(v.tokens[size_t(v.bos)], false, true) == std::vector<int32_t>{v.bos});
    // The tokenizers library gives an added token the id of the vocabulary entry spelled
    // like it (a new id past the vocabulary when there is none): each of ours has one.
    const json tj = test::read_json(out + "/tokenizer.json");
    for (const auto& a : tj["added_tokens"]) {
      INFO(a["content"].get<std::string>());
      CHECK(tj["model"]["vocab"].value(a["content"].get<std::string>(), -1) == a["id"].get<int>());
    }
    const json cases = test::read_json(ref + "/ids.json")["cases"];  // a copy: the file's json is a temporary
    REQUIRE(!cases.empty());
    for (const auto& c : cases) {
      const std::string text = c["text"];
      INFO(text);
      CHECK(ours.encode(text, false, true) == ids_of(c["ids"]));
      CHECK(ours.encode(text, true, true) == ids_of(c["ids_special"]));
    }
    ++compared;
  }
  CHECK(compared >= 7);  // gpt-2, llama-spm, phi-3, falcon, deepseek-llm, deepseek-coder, starcoder
}

TEST_CASE("convert HF -> GGUF: added tokens that look special become control tokens, as convert_hf_to_gguf", "[convert][gguf]") {
  // Hand-made tokenizer.json: two added tokens not marked special; convert_hf_to_gguf's
  // does_token_look_special makes "<|tool|>" CONTROL (3) and leaves "<think>" USER_DEFINED (4).
  const std::string j = R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2,"<|tool|>":3,"<think>":4},"merges":["a b"]},
    "added_tokens":[{"id":3,"content":"<|tool|>","special":false},{"id":4,"content":"<think>","special":false},
                    {"id":0,"content":"a","special":true}],
    "pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},"decoder":{"type":"ByteLevel"}})";
  const GgufVocab v = Tokenizer::from_hf_json(j, "t.json").gguf_vocab();
  CHECK(v.model == "gpt2");
  CHECK(v.pre == "gpt-2");
  CHECK(v.types == std::vector<int32_t>{3, 1, 1, 3, 4});
  CHECK(v.merges == std::vector<std::string>{"a b"});
}
