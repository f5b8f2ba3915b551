// Model description: config.json / GGUF metadata → ModelSpec, tensors → modules with the
// architecture table. Expected numbers are the published hyper-parameters of the real
// models (their config.json on the Hub), the real files in ../shared/testfiles, and the
// tiny transformers fixtures in testdata/models/ when present.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "format/open.hpp"
#include "model/arch_table.hpp"
#include "core/text.hpp"
#include "model/model.hpp"
#include "model/report.hpp"
#include "tests/helpers.hpp"

using namespace nunchaku;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct T {
  std::string name;
  std::vector<int64_t> shape;
};

Checkpoint make_ck(const std::vector<T>& ts, Format fmt = Format::Safetensors) {
  Checkpoint ck;
  ck.format = fmt;
  ck.files.push_back({"model.safetensors", 0});
  uint64_t off = 0;
  for (const auto& t : ts) {
    TensorInfo ti;
    ti.name = t.name;
    ti.dtype = DType::F32;
    ti.shape = t.shape;
    ti.offset = off;
    ti.nbytes = ti.numel() * 4;
    off += ti.nbytes;
    ck.tensors.push_back(ti);
  }
  return ck;
}

// An HF Llama-style state dict: hidden H, L layers, heads NH/NKV of size HD, MLP I, vocab V.
std::vector<T> llama_hf(int64_t H, int64_t L, int64_t NH, int64_t NKV, int64_t HD, int64_t I, int64_t V,
                        bool head = true, const std::string& root = "model.") {
  std::vector<T> ts = {{root + "embed_tokens.weight", {V, H}}, {root + "norm.weight", {H}}};
  if (head) ts.push_back({"lm_head.weight", {V, H}});
  for (int64_t l = 0; l < L; ++l) {
    std::string p = root + "layers." + std::to_string(l) + ".";
    ts.push_back({p + "input_layernorm.weight", {H}});
    ts.push_back({p + "self_attn.q_proj.weight", {NH * HD, H}});
    ts.push_back({p + "self_attn.k_proj.weight", {NKV * HD, H}});
    ts.push_back({p + "self_attn.v_proj.weight", {NKV * HD, H}});
    ts.push_back({p + "self_attn.o_proj.weight", {H, NH * HD}});
    ts.push_back({p + "post_attention_layernorm.weight", {H}});
    ts.push_back({p + "mlp.gate_proj.weight", {I, H}});
    ts.push_back({p + "mlp.up_proj.weight", {I, H}});
    ts.push_back({p + "mlp.down_proj.weight", {H, I}});
  }
  return ts;
}

json tiny_llama_config() {
  return json{{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 16},
              {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
              {"intermediate_size", 40}, {"vocab_size", 50}, {"max_position_embeddings", 64},
              {"tie_word_embeddings", false}};
}

// Writes config.json into `dir` and points the checkpoint at it.
void attach_config(Checkpoint& ck, const test::TempDir& dir, const std::string& text) {
  test::write_file(dir.file("config.json"), text);
  ck.config_path = dir.file("config.json");
}

std::vector<std::string> module_names(const ModelLayout& l) {
  std::vector<std::string> out;
  for (const auto& m : l.modules) out.push_back(m.name);
  return out;
}

bool has_warning(const ModelLayout& l, const std::string& part) {
  for (const auto& w : l.warnings)
    if (w.find(part) != std::string::npos) return true;
  return false;
}

std::string error_code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return "<no error>";
}

}  // namespace

// ---- config.json ---------------------------------------------------------------------------

TEST_CASE("config.json: Llama-2-7B's published config", "[model]") {
  auto s = spec_from_hf_config(json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 11008, "max_position_embeddings": 4096, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 32, "rms_norm_eps": 1e-05, "rope_scaling": null,
    "tie_word_embeddings": false, "torch_dtype": "float16", "vocab_size": 32000})"));
  CHECK(s.architecture == "llama");
  CHECK(s.hf_class == "LlamaForCausalLM");
  CHECK(s.source == "config.json");
  CHECK(s.hidden_size == 4096);
  CHECK(s.num_layers == 32);
  CHECK(s.num_heads == 32);
  CHECK(s.num_kv_heads == 32);
  CHECK(s.head_dim == 128);
  CHECK(s.intermediate_size == 11008);
  CHECK(s.vocab_size == 32000);
  CHECK(s.max_context == 4096);
  CHECK(s.dtype == "float16");
  CHECK(s.rope_theta == 10000.0);  // HF LlamaConfig default
  CHECK(s.rope_scaling.is_null());
  CHECK(s.norm_eps == Approx(1e-5));
  CHECK_FALSE(s.tie_word_embeddings);
  CHECK(s.layer_windows.empty());
}

TEST_CASE("config.json: Mistral-7B-v0.1 windows every layer, Mixtral-8x7B experts", "[model]") {
  auto m = spec_from_hf_config(json::parse(R"({"architectures": ["MistralForCausalLM"], "model_type": "mistral",
    "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "sliding_window": 4096, "rope_theta": 10000.0, "vocab_size": 32000,
    "max_position_embeddings": 32768})"));
  CHECK(m.architecture == "mistral");
  CHECK(m.num_kv_heads == 8);
  CHECK(m.sliding_window == 4096);
  REQUIRE(m.layer_windows.size() == 32);
  CHECK(m.layer_windows[0] == 4096);
  CHECK(m.layer_windows[31] == 4096);

  auto x = spec_from_hf_config(json::parse(R"({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
    "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2, "rope_theta": 1e6,
    "sliding_window": null, "vocab_size": 32000, "max_position_embeddings": 32768})"));
  CHECK(x.architecture == "mixtral");
  CHECK(x.num_experts == 8);
  CHECK(x.num_experts_per_tok == 2);
  CHECK(x.rope_theta == 1e6);
  CHECK(x.sliding_window == 0);
  CHECK(x.layer_windows.empty());
}

TEST_CASE("config.json: GPT-2 aliases (n_embd, n_layer, n_head, n_positions, n_inner=null)", "[model]") {
  auto s = spec_from_hf_config(json::parse(R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
    "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024, "n_ctx": 1024, "n_inner": null,
    "layer_norm_epsilon": 1e-05, "vocab_size": 50257})"));
  CHECK(s.architecture == "gpt2");
  CHECK(s.hidden_size == 768);
  CHECK(s.num_layers == 12);
  CHECK(s.num_heads == 12);
  CHECK(s.num_kv_heads == 12);
  CHECK(s.head_dim == 64);
  CHECK(s.intermediate_size == 3072);  // 4 * n_embd
  CHECK(s.max_context == 1024);
  CHECK(s.vocab_size == 50257);
  CHECK(s.tie_word_embeddings);  // GPT2Config ties by default
  CHECK(s.rope_theta == 0);      // learned positions, no rope
}

TEST_CASE("config.json: gemma ties by default, gemma2 alternates sliding layers", "[model]") {
  auto g = spec_from_hf_config(json::parse(R"({"architectures": ["GemmaForCausalLM"], "model_type": "gemma",
    "hidden_size": 2048, "head_dim": 256, "intermediate_size": 16384, "num_attention_heads": 8,
    "num_hidden_layers": 18, "num_key_value_heads": 1, "vocab_size": 256000, "max_position_embeddings": 8192})"));
  CHECK(g.tie_word_embeddings);
  CHECK(g.head_dim == 256);
  CHECK(g.num_kv_heads == 1);

  auto g2 = spec_from_hf_config(json::parse(R"({"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
    "hidden_size": 3584, "head_dim": 256, "intermediate_size": 14336, "num_attention_heads": 16,
    "num_hidden_layers": 42, "num_key_value_heads": 8, "sliding_window": 4096, "vocab_size": 256000,
    "max_position_embeddings": 8192})"));
  CHECK(g2.architecture == "gemma2");
  CHECK(g2.tie_word_embeddings);
  CHECK(g2.sliding_window == 4096);
  REQUIRE(g2.layer_windows.size() == 42);
  CHECK(g2.layer_windows[0] == 4096);  // even layers local (Gemma2DecoderLayer: not layer_idx % 2)
  CHECK(g2.layer_windows[1] == 0);
  CHECK(g2.layer_windows[40] == 4096);
  CHECK(g2.layer_windows[41] == 0);

  // transformers >= 4.53 writes layer_types explicitly; it wins over the family rule.
  auto lt = spec_from_hf_config(json{{"model_type", "gemma2"}, {"num_hidden_layers", 3}, {"sliding_window", 8},
                                     {"layer_types", {"full_attention", "sliding_attention", "full_attention"}}});
  CHECK(lt.layer_windows == std::vector<int64_t>{0, 8, 0});
}

TEST_CASE("config.json: qwen2 only windows with use_sliding_window, qwen3 explicit head_dim", "[model]") {
  auto q2 = spec_from_hf_config(json::parse(R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
    "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28, "num_hidden_layers": 28,
    "num_key_value_heads": 4, "rope_theta": 1000000.0, "sliding_window": 131072, "use_sliding_window": false,
    "max_window_layers": 28, "tie_word_embeddings": false, "vocab_size": 152064, "max_position_embeddings": 32768})"));
  CHECK(q2.architecture == "qwen2");
  CHECK(q2.sliding_window == 0);
  CHECK(q2.layer_windows.empty());
  CHECK(q2.head_dim == 128);

  auto q2w = spec_from_hf_config(json{{"model_type", "qwen2"}, {"num_hidden_layers", 4}, {"sliding_window", 16},
                                      {"use_sliding_window", true}, {"max_window_layers", 2}});
  CHECK(q2w.layer_windows == std::vector<int64_t>{0, 0, 16, 16});

  auto q3 = spec_from_hf_config(json::parse(R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
    "hidden_size": 1024, "head_dim": 128, "intermediate_size": 3072, "num_attention_heads": 16,
    "num_hidden_layers": 28, "num_key_value_heads": 8, "tie_word_embeddings": true, "vocab_size": 151936,
    "max_position_embeddings": 40960, "rope_theta": 1000000, "sliding_window": null, "use_sliding_window": false})"));
  CHECK(q3.architecture == "qwen3");
  CHECK(q3.head_dim == 128);  // not 1024 / 16
  CHECK(q3.tie_word_embeddings);
  CHECK(q3.rope_theta == 1e6);
}

TEST_CASE("config.json: phi3 sliding window, class name when model_type is absent", "[model]") {
  auto p = spec_from_hf_config(json::parse(R"({"architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
    "hidden_size": 3072, "intermediate_size": 8192, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 32, "sliding_window": 2047, "vocab_size": 32064, "max_position_embeddings": 4096})"));
  CHECK(p.architecture == "phi3");
  CHECK(p.sliding_window == 2047);
  CHECK(p.layer_windows.size() == 32);
  CHECK_FALSE(p.tie_word_embeddings);

  auto c = spec_from_hf_config(json{{"architectures", {"Qwen2ForCausalLM"}}, {"hidden_size", 8}});
  CHECK(c.architecture == "qwen2");
  auto u = spec_from_hf_config(json{{"architectures", {"FooForCausalLM"}}, {"model_type", "foo"}});
  CHECK(u.architecture == "foo");
}

TEST_CASE("config.json: text_config nesting and transformers 5 rope_parameters", "[model]") {
  auto s = spec_from_hf_config(json::parse(R"({"architectures": ["LlavaForConditionalGeneration"],
    "model_type": "llava", "text_config": {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
    "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32064}, "vision_config": {"hidden_size": 1024},
    "tie_word_embeddings": false})"));
  CHECK(s.architecture == "llama");
  CHECK(s.hf_class == "LlavaForConditionalGeneration");
  CHECK(s.hidden_size == 4096);
  CHECK(s.vocab_size == 32064);

  auto r = spec_from_hf_config(json::parse(R"({"model_type": "llama", "num_hidden_layers": 2,
    "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0}})"));
  CHECK(r.rope_theta == 500000.0);
  CHECK(r.rope_scaling["rope_type"] == "llama3");
}

TEST_CASE("config.json: MiniCPM3's real config (MLA, longrope)", "[model][shared]") {
  NUNCHAKU_REQUIRE_SHARED();
  std::ifstream in(test::shared_testfile("safetensors/minicpm3/config.json"));
  auto s = spec_from_hf_config(json::parse(in));
  CHECK(s.architecture == "minicpm3");
  CHECK(s.hf_class == "MiniCPM3ForCausalLM");
  CHECK(s.hidden_size == 2560);
  CHECK(s.num_layers == 62);
  CHECK(s.num_heads == 40);
  CHECK(s.num_kv_heads == 40);
  CHECK(s.head_dim == 64);
  CHECK(s.intermediate_size == 6400);
  CHECK(s.vocab_size == 73448);
  CHECK(s.max_context == 32768);
  CHECK(s.kv_lora_rank == 256);
  CHECK(s.qk_rope_head_dim == 32);
  CHECK(s.rope_scaling["type"] == "longrope");
  CHECK(s.dtype == "bfloat16");
  CHECK(s.norm_eps == Approx(1e-5));
}

TEST_CASE("config.json: malformed fields are config.bad_field naming the key", "[model]") {
  auto code_msg = [](const json& j) -> std::pair<std::string, std::string> {
    try {
      spec_from_hf_config(j);
    } catch (const Error& e) {
      return {e.code(), e.message()};
    }
    return {"<no error>", ""};
  };
  auto [c1, m1] = code_msg(json{{"hidden_size", "4096"}});
  CHECK(c1 == "config.bad_field");
  CHECK(m1.find("config.json") != std::string::npos);
  CHECK(m1.find("hidden_size") != std::string::npos);
  CHECK(code_msg(json{{"num_hidden_layers", -1}}).first == "config.bad_field");
  CHECK(code_msg(json{{"num_hidden_layers", 1000000000}}).first == "config.bad_field");  // would size per-layer vectors
  CHECK(code_msg(json{{"num_attention_heads", 2.5}}).first == "config.bad_field");
  CHECK(code_msg(json{{"tie_word_embeddings", "yes"}}).first == "config.bad_field");
  CHECK(code_msg(json{{"rope_theta", "big"}}).first == "config.bad_field");
  CHECK(code_msg(json{{"rope_scaling", 3}}).first == "config.bad_field");
  CHECK(code_msg(json{{"architectures", "LlamaForCausalLM"}}).first == "config.bad_field");
  CHECK(code_msg(json{{"text_config", 1}}).first == "config.bad_field");
  CHECK(code_msg(json{{"num_hidden_layers", 2}, {"sliding_window", 4}, {"layer_types", {"full_attention"}}}).first ==
        "config.bad_field");
  CHECK(code_msg(json::array({1, 2})).first == "config.bad_json");
}

TEST_CASE("config.json: unparsable file is config.bad_json with file and offset", "[model]") {
  test::TempDir dir;
  Checkpoint ck = make_ck(llama_hf(16, 2, 4, 2, 4, 40, 50));
  attach_config(ck, dir, "{\"hidden_size\": 16,,}");
  try {
    (void)describe_model(ck);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == "config.bad_json");
    CHECK(e.context().file == ck.config_path);
    CHECK(e.context().offset.has_value());
  }
  attach_config(ck, dir, R"({"hidden_size": {"a": 1}})");
  try {
    (void)describe_model(ck);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == "config.bad_field");
    CHECK(e.context().file == ck.config_path);
  }
}

// ---- GGUF metadata -----------------------------------------------------------------------

json llama2_7b_gguf_metadata() {
  // The KVs of llama.cpp's ggml-vocab-llama-spm.gguf (Llama-2-7B), large arrays summarised.
  return json::parse(R"({"general.architecture": "llama", "general.name": "llama-spm",
    "llama.block_count": 32, "llama.context_length": 4096, "llama.embedding_length": 4096,
    "llama.feed_forward_length": 11008, "llama.attention.head_count": 32, "llama.attention.head_count_kv": 32,
    "llama.attention.layer_norm_rms_epsilon": 9.999999747378752e-06, "general.file_type": 1,
    "llama.vocab_size": 32000, "llama.rope.dimension_count": 128, "tokenizer.ggml.model": "llama",
    "tokenizer.ggml.tokens": {"array": "string", "length": 32000}})");
}

TEST_CASE("gguf: Llama-2-7B metadata", "[model]") {
  auto s = spec_from_gguf(llama2_7b_gguf_metadata());
  REQUIRE(s);
  CHECK(s->architecture == "llama");
  CHECK(s->source == "gguf");
  CHECK(s->hidden_size == 4096);
  CHECK(s->num_layers == 32);
  CHECK(s->num_heads == 32);
  CHECK(s->num_kv_heads == 32);
  CHECK(s->head_dim == 128);
  CHECK(s->intermediate_size == 11008);
  CHECK(s->vocab_size == 32000);
  CHECK(s->max_context == 4096);
  CHECK(s->rope_theta == 10000.0);  // llama.cpp's default when rope.freq_base is absent
  CHECK(s->norm_eps == Approx(1e-5));
  CHECK(s->dtype == "F16");
}

TEST_CASE("gguf: vocab from the token list, per-layer KV heads, experts, windows", "[model]") {
  json md = llama2_7b_gguf_metadata();
  md.erase("llama.vocab_size");
  CHECK(spec_from_gguf(md)->vocab_size == 32000);  // from the summarised token array
  md["tokenizer.ggml.tokens"] = json::array({"<unk>", "<s>", "</s>"});
  CHECK(spec_from_gguf(md)->vocab_size == 3);

  json v = json{{"general.architecture", "llama"}, {"llama.block_count", 4}, {"llama.embedding_length", 64},
                {"llama.attention.head_count", 8}, {"llama.attention.head_count_kv", {8, 2, 0, 2}}};
  auto s = spec_from_gguf(v);
  CHECK(s->num_kv_heads == 8);
  CHECK(s->layer_kv_heads == std::vector<int64_t>{8, 2, 0, 2});
  v["llama.attention.head_count_kv"] = {4, 4, 4, 4};
  CHECK(spec_from_gguf(v)->layer_kv_heads.empty());
  CHECK(spec_from_gguf(v)->num_kv_heads == 4);

  json moe = llama2_7b_gguf_metadata();
  moe["llama.expert_count"] = 8;
  moe["llama.expert_used_count"] = 2;
  CHECK(spec_from_gguf(moe)->architecture == "mixtral");
  CHECK(spec_from_gguf(moe)->num_experts == 8);

  json g2 = json{{"general.architecture", "gemma2"}, {"gemma2.block_count", 4},
                 {"gemma2.attention.sliding_window", 4096}, {"gemma2.rope.scaling.type", "linear"},
                 {"gemma2.rope.scaling.factor", 4.0}};
  auto gs = spec_from_gguf(g2);
  CHECK(gs->layer_windows == std::vector<int64_t>{4096, 0, 4096, 0});
  CHECK(gs->tie_word_embeddings);
  CHECK(gs->rope_scaling["factor"] == 4.0);

  CHECK_FALSE(spec_from_gguf(json{{"general.name", "x"}}));
}

TEST_CASE("gguf: malformed metadata is model.bad_gguf_field", "[model]") {
  auto md = llama2_7b_gguf_metadata();
  md["llama.block_count"] = "32";
  CHECK(error_code_of([&] { (void)spec_from_gguf(md); }) == "model.bad_gguf_field");
  md = llama2_7b_gguf_metadata();
  md["llama.attention.head_count_kv"] = {8, 8};  // not one per layer
  CHECK(error_code_of([&] { (void)spec_from_gguf(md); }) == "model.bad_gguf_field");
  CHECK(error_code_of([&] { (void)spec_from_gguf(json{{"general.architecture", 7}}); }) == "model.bad_gguf_field");
}

TEST_CASE("gguf: the real Llama-2-7B, Phi-3 and GPT-2 vocab files", "[model][shared]") {
  NUNCHAKU_REQUIRE_SHARED();
  auto l = describe_model(open_checkpoint(test::shared_testfile("vocab/ggml-vocab-llama-spm.gguf")));
  REQUIRE(l.spec);
  CHECK(l.spec->architecture == "llama");
  CHECK(l.spec->hidden_size == 4096);
  CHECK(l.spec->num_layers == 32);
  CHECK(l.spec->num_heads == 32);
  CHECK(l.spec->num_kv_heads == 32);
  CHECK(l.spec->intermediate_size == 11008);
  CHECK(l.spec->vocab_size == 32000);
  CHECK(l.spec->max_context == 4096);
  CHECK(l.modules.empty());  // vocab-only file: no tensors
  CHECK(l.warnings.empty());

  auto p = describe_model(open_checkpoint(test::shared_testfile("vocab/ggml-vocab-phi-3.gguf")));
  REQUIRE(p.spec);
  CHECK(p.spec->architecture == "phi3");
  CHECK(p.spec->hidden_size == 3072);
  CHECK(p.spec->intermediate_size == 8192);
  CHECK(p.spec->head_dim == 96);
  CHECK(p.spec->vocab_size == 32064);  // no phi3.vocab_size: from the token list

  auto g = describe_model(open_checkpoint(test::shared_testfile("vocab/ggml-vocab-gpt-2.gguf")));
  REQUIRE(g.spec);
  CHECK(g.spec->architecture == "gpt2");
  CHECK(g.spec->hidden_size == 768);
  CHECK(g.spec->num_layers == 12);
  CHECK(g.spec->vocab_size == 50257);
  CHECK(g.spec->max_context == 1024);
}

TEST_CASE("gguf: stories260K groups into token_embd, blk.0-4, output_norm, output", "[model][shared]") {
  NUNCHAKU_REQUIRE_SHARED();
  auto l = describe_model(open_checkpoint(test::shared_testfile("gguf/stories260K.gguf")));
  REQUIRE(l.spec);
  CHECK(l.spec->hidden_size == 64);
  CHECK(l.spec->num_layers == 5);
  CHECK(l.spec->num_heads == 8);
  CHECK(l.spec->num_kv_heads == 4);
  CHECK(l.spec->intermediate_size == 172);
  CHECK(l.spec->vocab_size == 512);
  CHECK_FALSE(l.spec->tie_word_embeddings);  // output.weight is present
  CHECK(module_names(l) == std::vector<std::string>{"token_embd", "blk.0", "blk.1", "blk.2", "blk.3", "blk.4",
                                                    "output_norm", "output"});
  CHECK(l.modules[1].tensors.size() == 9);
  CHECK(l.warnings.empty());  // every shape matches the metadata (attn_k is (4*8, 64))
  for (const auto& w : l.warnings) WARN(w);
}

// ---- grouping and table checks ----------------------------------------------------------

TEST_CASE("table: HF llama checkpoint groups as accelerate names it, no warnings", "[model]") {
  test::TempDir dir;
  Checkpoint ck = make_ck(llama_hf(16, 2, 4, 2, 4, 40, 50));
  attach_config(ck, dir, tiny_llama_config().dump());
  auto l = describe_model(ck);
  REQUIRE(l.spec);
  CHECK(l.spec->source == "config.json");
  CHECK(module_names(l) ==
        std::vector<std::string>{"model.embed_tokens", "model.layers.0", "model.layers.1", "model.norm", "lm_head"});
  CHECK(l.modules[0].kind == ModuleKind::Embedding);
  CHECK(l.modules[1].kind == ModuleKind::Layer);
  CHECK(l.modules[2].layer == 1);
  CHECK(l.modules[3].kind == ModuleKind::FinalNorm);
  CHECK(l.modules[4].kind == ModuleKind::Head);
  CHECK(l.modules[1].tensors.size() == 9);
  CHECK(l.modules[0].parameters == 50 * 16);
  CHECK(l.modules[0].bytes == 50 * 16 * 4);
  CHECK(l.warnings.empty());
  CHECK(l.tied.empty());
}

TEST_CASE("table: shape, missing and unexpected tensors become warnings", "[model]") {
  test::TempDir dir;
  auto ts = llama_hf(16, 2, 4, 2, 4, 40, 50, /*head=*/false);
  auto at = [&](const std::string& n) {
    return std::find_if(ts.begin(), ts.end(), [&](const T& t) { return t.name == n; });
  };
  at("model.layers.0.self_attn.q_proj.weight")->shape = {16, 8};  // heads*head_dim = 16
  ts.erase(at("model.layers.1.input_layernorm.weight"));
  ts.push_back({"model.layers.1.self_attn.extra.weight", {3}});
  Checkpoint ck = make_ck(ts);
  json cfg = tiny_llama_config();
  cfg["num_hidden_layers"] = 3;
  attach_config(ck, dir, cfg.dump());
  auto l = describe_model(ck);
  for (const auto& w : l.warnings) INFO(w);
  CHECK(has_warning(l, "model.layers.N.self_attn.q_proj.weight: shape [16, 8] but config.json implies [16, 16]"));
  CHECK(has_warning(l, "model.layers.N.input_layernorm.weight: missing"));
  CHECK(has_warning(l, "model.layers.N.self_attn.extra.weight: not expected"));
  CHECK(has_warning(l, "lm_head: missing although tie_word_embeddings is false"));
  CHECK(has_warning(l, "config.json says 3 layers, the checkpoint holds 2"));
}

TEST_CASE("table: GPT-2 with and without the transformer. prefix, tied head", "[model]") {
  for (std::string root : {"transformer.", ""}) {
    const int64_t H = 8, I = 32, V = 20, C = 12;
    std::vector<T> ts = {{root + "wte.weight", {V, H}}, {root + "wpe.weight", {C, H}},
                         {root + "ln_f.weight", {H}}, {root + "ln_f.bias", {H}}};
    for (int l = 0; l < 2; ++l) {
      std::string p = root + "h." + std::to_string(l) + ".";
      for (auto [n, s] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
               {"ln_1.weight", {H}}, {"ln_1.bias", {H}}, {"attn.c_attn.weight", {H, 3 * H}},
               {"attn.c_attn.bias", {3 * H}}, {"attn.c_proj.weight", {H, H}}, {"attn.c_proj.bias", {H}},
               {"attn.bias", {1, 1, C, C}}, {"ln_2.weight", {H}}, {"ln_2.bias", {H}}, {"mlp.c_fc.weight", {H, I}},
               {"mlp.c_fc.bias", {I}}, {"mlp.c_proj.weight", {I, H}}, {"mlp.c_proj.bias", {H}}})
        ts.push_back({p + n, s});
    }
    test::TempDir dir;
    Checkpoint ck = make_ck(ts);
    attach_config(ck, dir, json{{"model_type", "gpt2"}, {"n_embd", H}, {"n_layer", 2}, {"n_head", 2},
                                {"n_positions", C}, {"vocab_size", V}}.dump());
    auto l = describe_model(ck);
    INFO(root);
    CHECK(module_names(l) == std::vector<std::string>{root + "wte", root + "wpe", root + "h.0", root + "h.1",
                                                      root + "ln_f"});
    CHECK(l.warnings.empty());
    for (const auto& w : l.warnings) WARN(w);
    CHECK(l.tied == std::vector<std::string>{"lm_head.weight=" + root + "wte.weight"});
  }
}

TEST_CASE("table: Mixtral experts, per-expert (Hub) and fused (transformers 5)", "[model]") {
  const int64_t H = 8, I = 12, E = 4;
  json cfg = {{"model_type", "mixtral"}, {"hidden_size", H}, {"num_hidden_layers", 1}, {"num_attention_heads", 2},
              {"num_key_value_heads", 1}, {"intermediate_size", I}, {"vocab_size", 10}, {"num_local_experts", E},
              {"num_experts_per_tok", 2}};
  auto base = [&] {
    std::vector<T> ts = llama_hf(H, 1, 2, 1, 4, I, 10);
    std::erase_if(ts, [](const T& t) { return t.name.find(".mlp.") != std::string::npos; });
    return ts;
  };
  test::TempDir dir;
  auto legacy = base();
  legacy.push_back({"model.layers.0.block_sparse_moe.gate.weight", {E, H}});
  for (int e = 0; e < E; ++e) {
    std::string p = "model.layers.0.block_sparse_moe.experts." + std::to_string(e) + ".";
    legacy.push_back({p + "w1.weight", {I, H}});
    legacy.push_back({p + "w2.weight", {H, I}});
    legacy.push_back({p + "w3.weight", {I, H}});
  }
  Checkpoint a = make_ck(legacy);
  attach_config(a, dir, cfg.dump());
  auto la = describe_model(a);
  CHECK(la.warnings.empty());
  for (const auto& w : la.warnings) WARN(w);
  CHECK(la.modules[1].tensors.size() == 6 + 1 + 3 * E);

  a.tensors.pop_back();  // expert 3 loses w3
  a.tensors.pop_back();
  a.tensors.pop_back();
  CHECK(has_warning(describe_model(a), "3 experts, config.json says 4"));

  auto fused = base();
  fused.push_back({"model.layers.0.mlp.gate.weight", {E, H}});
  fused.push_back({"model.layers.0.mlp.experts.gate_up_proj", {E, 2 * I, H}});
  fused.push_back({"model.layers.0.mlp.experts.down_proj", {E, H, I}});
  Checkpoint b = make_ck(fused);
  attach_config(b, dir, cfg.dump());
  auto lb = describe_model(b);
  CHECK(lb.warnings.empty());
  for (const auto& w : lb.warnings) WARN(w);
}

TEST_CASE("fallback: unknown architectures group by the numeric path component", "[model]") {
  Checkpoint ck = make_ck({{"language_model.model.embed_tokens.weight", {10, 4}},
                           {"language_model.model.layers.1.mlp.w.weight", {4, 4}},
                           {"language_model.model.layers.0.mlp.w.weight", {4, 4}},
                           {"vision.encoder.blocks.0.attn.weight", {4, 4}},
                           {"language_model.model.norm.weight", {4}},
                           {"language_model.lm_head.weight", {10, 4}},
                           {"projector.weight", {4, 4}}});
  auto l = describe_model(ck);
  CHECK(module_names(l) ==
        std::vector<std::string>{"language_model.model.embed_tokens", "language_model.model.layers.0",
                                 "language_model.model.layers.1", "vision.encoder.blocks.0",
                                 "language_model.model.norm", "language_model.lm_head", "projector"});
  CHECK(l.modules.back().kind == ModuleKind::Other);
  CHECK(l.modules[3].kind == ModuleKind::Layer);

  CHECK(layer_path("blk.12.attn_q.weight")->module == "blk.12");
  CHECK(layer_path("transformer.h.3.ln_1.weight")->index == 3);
  CHECK_FALSE(layer_path("model.layers.3"));
  CHECK_FALSE(layer_path("model.layers.x3.a"));
}

TEST_CASE("tied: tensors sharing a PyTorch storage", "[model]") {
  Checkpoint ck = make_ck(llama_hf(16, 1, 4, 2, 4, 40, 50), Format::PyTorch);
  ck.tensors[0].storage = "7";  // model.embed_tokens.weight
  ck.tensors[2].storage = "7";  // lm_head.weight
  ck.tensors[1].storage = "8";
  auto l = describe_model(ck);
  CHECK(l.tied == std::vector<std::string>{"lm_head.weight=model.embed_tokens.weight"});
}

TEST_CASE("tied: disjoint views of one storage are not tied", "[model]") {
  Checkpoint ck = make_ck(llama_hf(16, 1, 4, 2, 4, 40, 50), Format::PyTorch);
  // Same storage, same shape, but the head starts 16*50 elements further in.
  ck.tensors[0].storage = "7";
  ck.tensors[2].storage = "7";
  ck.tensors[2].storage_offset = 16 * 50;
  CHECK(describe_model(ck).tied.empty());
  // Same offset but another shape: a view, not the same parameter.
  ck.tensors[2].storage_offset = 0;
  ck.tensors[2].shape = {25, 32};
  CHECK(describe_model(ck).tied.empty());
}

TEST_CASE("inferred: dims from shapes, heads only when head_dim shows", "[model]") {
  auto ts = llama_hf(16, 3, 4, 2, 4, 40, 50, /*head=*/false);
  Checkpoint plain = make_ck(ts);
  auto l = describe_model(plain);
  REQUIRE(l.spec);
  CHECK(l.spec->source == "inferred");
  CHECK(l.spec->architecture == "llama");
  CHECK(l.spec->hidden_size == 16);
  CHECK(l.spec->num_layers == 3);
  CHECK(l.spec->vocab_size == 50);
  CHECK(l.spec->intermediate_size == 40);
  CHECK(l.spec->num_heads == 0);
  CHECK(l.spec->tie_word_embeddings);
  CHECK(l.spec->dtype == "F32");
  CHECK(has_warning(l, "heads unknown"));
  CHECK(l.tied == std::vector<std::string>{"lm_head.weight=model.embed_tokens.weight"});

  for (int i = 0; i < 3; ++i) {
    ts.push_back({"model.layers." + std::to_string(i) + ".self_attn.q_norm.weight", {4}});
    ts.push_back({"model.layers." + std::to_string(i) + ".self_attn.k_norm.weight", {4}});
  }
  auto q = describe_model(make_ck(ts));
  CHECK(q.spec->architecture == "qwen3");
  CHECK(q.spec->head_dim == 4);
  CHECK(q.spec->num_heads == 4);
  CHECK(q.spec->num_kv_heads == 2);
  CHECK(q.warnings.empty());
  for (const auto& w : q.warnings) WARN(w);

  CHECK_FALSE(spec_from_tensors(make_ck({{"a.weight", {3}}})));
}

TEST_CASE("inferred: hostile names neither crash nor claim absurd layer counts", "[model]") {
  auto s = spec_from_tensors(make_ck({{"model.embed_tokens.weight", {10, 4}},
                                      {"model.layers.999999999.mlp.up_proj.weight", {8, 4}}}));
  REQUIRE(s);
  CHECK(s->num_layers == 1);  // the count present, not index + 1
  auto l = describe_model(make_ck({{"", {1}}, {".", {1}}, {"layers.", {1}}, {"h.1.", {1}},
                                   {"blk.99999999999999999999.x", {1}}, {"model.layers.3", {2}}}));
  size_t placed = 0;
  for (const auto& m : l.modules) placed += m.tensors.size();
  CHECK(placed == 6);
}

TEST_CASE("real: MiniCPM3 checkpoint with its config.json", "[model][shared]") {
  NUNCHAKU_REQUIRE_SHARED();
  auto l = describe_model(open_checkpoint(test::shared_testfile("safetensors/minicpm3")));
  REQUIRE(l.spec);
  CHECK(l.spec->architecture == "minicpm3");
  CHECK(module_names(l) == std::vector<std::string>{"model.embed_tokens", "model.layers.0", "model.norm", "lm_head"});
  CHECK(l.modules[1].tensors.size() == 12);
  // The converter test file keeps one 100x100 layer of the 62 its config describes.
  CHECK(has_warning(l, "config.json says 62 layers, the checkpoint holds 1"));
}

// ---- tiny transformers fixtures (testdata/models/, expectations in testdata/expected/fixtures.json) ----

TEST_CASE("config.json: the real Llama-2-7B and Llama-3-8B configs in testdata", "[model]") {
  std::ifstream a(test::testdata("models/llama2-7b-config/config.json"));
  REQUIRE(a);
  auto l2 = spec_from_hf_config(json::parse(a));
  CHECK(l2.hidden_size == 4096);
  CHECK(l2.num_layers == 32);
  CHECK(l2.num_heads == 32);
  CHECK(l2.num_kv_heads == 32);
  CHECK(l2.intermediate_size == 11008);
  CHECK(l2.vocab_size == 32000);
  CHECK(l2.max_context == 4096);
  std::ifstream b(test::testdata("models/llama3-8b-config/config.json"));
  REQUIRE(b);
  auto l3 = spec_from_hf_config(json::parse(b));
  CHECK(l3.num_kv_heads == 8);
  CHECK(l3.head_dim == 128);
  CHECK(l3.intermediate_size == 14336);
  CHECK(l3.vocab_size == 128256);
  CHECK(l3.max_context == 8192);
  CHECK(l3.rope_theta == 500000.0);
  CHECK(l3.dtype == "bfloat16");
}

TEST_CASE("fixtures: every family's tiny checkpoint matches its config and groups cleanly", "[model]") {
  std::ifstream in(test::testdata("expected/fixtures.json"));
  REQUIRE(in);
  const json fixtures = json::parse(in)["fixtures"];
  int checked = 0;
  for (const auto& [rel, fx] : fixtures.items()) {
    if (!fx.contains("config") || !fx["config"].is_object()) continue;  // pt-nested: no model config
    INFO("fixture " << rel);
    const json& c = fx["config"];
    Checkpoint ck = open_checkpoint(test::testdata(rel));
    ModelLayout l = describe_model(ck);
    REQUIRE(l.spec);
    for (const auto& w : l.warnings) WARN(rel << ": " << w);
    CHECK(l.warnings.empty());
    ++checked;

    // The numbers transformers (or gguf-py) reported for this fixture.
    const ModelSpec& s = *l.spec;
    auto num = [&](const char* k) { return c[k].is_number() ? c[k].get<int64_t>() : 0; };
    std::string family = c.contains("model_type") ? c["model_type"].get<std::string>() : c["architecture"].get<std::string>();
    CHECK(s.architecture == family);
    CHECK(s.hidden_size == num("hidden_size"));
    CHECK(s.num_layers == num("num_hidden_layers"));
    CHECK(s.num_heads == num("num_attention_heads"));
    CHECK(s.num_kv_heads == num("num_key_value_heads"));
    CHECK(s.head_dim == num("head_dim"));
    CHECK(s.intermediate_size == num("intermediate_size"));
    CHECK(s.vocab_size == num("vocab_size"));
    CHECK(s.max_context == num("max_position_embeddings"));
    CHECK(s.tie_word_embeddings == c["tie_word_embeddings"].get<bool>());
    if (c.contains("num_local_experts")) CHECK(s.num_experts == num("num_local_experts"));
    if (c.contains("sliding_window")) CHECK(s.sliding_window == num("sliding_window"));

    // Every tensor placed exactly once, one module per layer, the framework's names.
    const bool gguf = ck.format == Format::GGUF, gpt2 = family == "gpt2";
    const std::string embed = gguf ? "token_embd" : gpt2 ? "transformer.wte" : "model.embed_tokens";
    const std::string norm = gguf ? "output_norm" : gpt2 ? "transformer.ln_f" : "model.norm";
    const std::string head = gguf ? "output" : "lm_head";
    const std::string layer = gguf ? "blk." : gpt2 ? "transformer.h." : "model.layers.";
    std::vector<std::string> names = module_names(l);
    size_t placed = 0;
    int64_t layers = 0;
    for (const auto& m : l.modules) {
      placed += m.tensors.size();
      CHECK(m.kind != ModuleKind::Other);
      if (m.kind == ModuleKind::Layer) {
        CHECK(m.name == layer + std::to_string(layers));
        ++layers;
      }
    }
    CHECK(placed == ck.tensors.size());
    CHECK(layers == s.num_layers);
    CHECK(names.front() == embed);
    CHECK(std::count(names.begin(), names.end(), norm) == 1);
    const bool head_saved = ck.find(head + ".weight") != nullptr;
    CHECK(std::count(names.begin(), names.end(), head) == (head_saved ? 1 : 0));
    if (s.tie_word_embeddings) CHECK_FALSE(l.tied.empty());  // absent head, or one shared storage
  }
  CHECK(checked >= 14);
}

// ---- the one model validation (describe_model) -------------------------------------------
// The refusals are in the hostile corpus (tests/hostile, test_hostile_corpus.cpp); here: the
// error names file and field, and suspicious-but-legal values are warnings.

namespace {

// tests/hostile/hf_control (a 1-layer llama) with `over` merged into its config.json.
std::string control_with(const test::TempDir& dir, const json& over) {
  const std::string src = std::string(NUNCHAKU_SOURCE_DIR) + "/tests/hostile/hf_control/";
  std::filesystem::copy_file(src + "model.safetensors", dir.file("model.safetensors"));
  json cfg = test::read_json(src + "config.json");
  cfg.merge_patch(over);
  test::write_file(dir.file("config.json"), cfg.dump());
  return dir.path.string();
}

}  // namespace

TEST_CASE("model validation: errors name the file and the field as the file spells it", "[model]") {
  test::TempDir dir;
  const std::string path = control_with(dir, {{"num_key_value_heads", 0}});
  try {
    (void)describe_model(open_checkpoint(path));
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == "model.bad_spec");
    CHECK(e.exit_code() == 2);
    CHECK(e.context().file == dir.file("config.json"));
    CHECK(e.message().find("'num_key_value_heads'") != std::string::npos);
  }
}

TEST_CASE("model validation: suspicious but legal values are warnings", "[model]") {
  test::TempDir clean_dir;
  ModelLayout clean = describe_model(open_checkpoint(control_with(clean_dir, json::object())));
  for (const auto& w : clean.warnings) CHECK(w.find("field") == std::string::npos);
  test::TempDir dir;
  ModelLayout odd = describe_model(open_checkpoint(control_with(dir, {{"sliding_window", 0}, {"rms_norm_eps", 0.5},
                                                                     {"rope_scaling", {{"type", "linear"}, {"factor", 0.5}}}})));
  auto warned = [&](const std::string& s) {
    return std::any_of(odd.warnings.begin(), odd.warnings.end(), [&](const std::string& w) { return w.find(s) != std::string::npos; });
  };
  CHECK(warned("'sliding_window' is 0"));
  CHECK(warned("'rms_norm_eps' is 0.5"));
  CHECK(warned("'rope_scaling.factor' is 0.5"));
}

// inspect --json writes its "tensors" array straight from the checkpoint; the document must
// be the one the full DOM gives (dump_json of inspect_json with every tensor in it).
TEST_CASE("inspect json: the streamed tensors array is the DOM's text", "[model][inspect]") {
  auto same = [](const Checkpoint& ck, const std::string& filter) {
    const ModelLayout layout = describe_model(ck);
    json doc = inspect_json(ck, layout, filter, false);
    doc["command"] = "inspect";
    json full = inspect_json(ck, layout, filter, true);
    full["command"] = "inspect";
    CHECK(dump_inspect_json(doc, ck, filter) == dump_json(full, 2));
  };
  for (const char* rel : {"models/llama", "models/llama-sharded", "models/llama-pt/model_legacy.pt",
                          "models/llama-pt/model_zip.pt", "models/pt-nested/checkpoint.pt", "pytorch/legacy_views.pt",
                          "pytorch/zip_views.pt", "models/llama-gguf"}) {
    INFO(rel);
    const Checkpoint ck = open_checkpoint(test::testdata(rel));
    same(ck, "");
    same(ck, "*layers.1*");
    same(ck, "no such tensor");
  }
  // Names and paths that need escapes, non-ASCII and bytes that are not UTF-8; storages and
  // strides; a scalar.
  Checkpoint ck = make_ck({{"a\"q\\b\n\t\x01\x7f.weight", {2, 3}}, {"caf\xc3\xa9.w", {}}, {"bad\xff.w", {4}}});
  ck.files[0].path = "dir \"x\"/m\xc3\xa9.bin";
  ck.tensors[0].storage = "0/st\"x";
  ck.tensors[0].storage_offset = 7;
  ck.tensors[0].strides = {1, 2};
  same(ck, "");
  same(ck, "caf*");
}
