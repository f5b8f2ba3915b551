// Llama 4's text model on the CPU engine against transformers 5.25 (scripts/make_engine_llama4.py,
// testdata/engine/llama4.json): a tiny random fp32 Llama4ForCausalLM as save_pretrained writes
// it, with chunked layers (chunk 8 under 40-token sequences), a NoPE layer with the query
// temperature, weightless q/k norms, MoE layers (sigmoid router, input-scaled experts stored
// input-major, a shared expert) between dense ones. 32 greedy ids exactly, logits within 1e-4;
// the run state as estimate predicts it; streamed experts equal resident ones; each of the
// family's pieces moves the answer (so the goldens check it); a backend without one refuses;
// the GGUF twin against transformers and llama.cpp.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "format/open.hpp"
#include "model/recipe.hpp"
#include "tests/helpers.hpp"
#include "tests/test_engine_helpers.hpp"

using namespace nunchaku;
using namespace nunchaku::engine;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const json& golden() {
  static const json g = json::parse(std::ifstream(test::testdata("engine/llama4.json"))).at("llama4");
  return g;
}

// A copy of the fixture in `dir` whose config.json went through `edit` (the weights as they are).
std::string edited_copy(const test::TempDir& tmp, const std::string& name, const std::function<void(json&)>& edit) {
  const fs::path src = test::testdata("engine/llama4");
  const fs::path dir = tmp.path / name;
  fs::create_directories(dir);
  fs::copy_file(src / "model.safetensors", dir / "model.safetensors");
  json cfg = json::parse(std::ifstream(src / "config.json"));
  edit(cfg);
  std::ofstream(dir / "config.json") << cfg.dump(1);
  return dir.string();
}

}  // namespace

TEST_CASE("engine llama4: chunked, NoPE and MoE layers match transformers (32 greedy ids, logits 1e-4)",
          "[engine][moe][llama4]") {
  // 16 tokens a pass (the replay crosses chunk boundaries inside a pass) and 11 (passes that
  // start mid-chunk; the 8 + 11 - 1 = 18-position ring of a chunked layer wraps).
  for (int64_t tokens : {16, 11}) {
    auto m = test::load_engine_model(test::testdata("engine/llama4"), test::golden_options(tokens), Device{Device::Kind::Cpu, 0}, {}, 2);
    INFO(tokens << " tokens a pass: " << m.tf->describe());
    test::check_against_golden(*m.tf, golden());
  }
}

TEST_CASE("engine llama4: the recipe and dimensions its config gives", "[engine][moe][llama4]") {
  const ModelLayout layout = describe_model(open_checkpoint(test::testdata("engine/llama4")));
  const ModelSpec& s = *layout.spec;
  const BlockRecipe r = recipe_for(s);
  CHECK(r.unsupported.empty());
  REQUIRE(r.layers.size() == 4);
  for (size_t l = 0; l < 3; ++l) CHECK((r.layers[l].window == 8 && r.layers[l].chunked && !r.layers[l].nope));
  CHECK((r.layers[3].window == 0 && !r.layers[3].chunked && r.layers[3].nope));
  CHECK((r.qk_norm_unit && r.attn_temp_floor == 4 && r.attn_temp_scale == 0.5f));
  CHECK((r.experts == 4 && r.top_k == 2 && r.routing == Routing::SigmoidTopk && !r.norm_topk && r.expert_input_weighted));
  // Dense layers are intermediate_size_mlp wide, the experts and the shared one intermediate_size.
  CHECK((s.intermediate_size == 48 && s.moe_intermediate_size == 20 && s.shared_expert_intermediate_size == 20));
  CHECK(s.rope_interleaved);
  size_t gate_up = 0;
  for (const Module& mod : layout.modules)
    for (Role role : mod.roles) gate_up += role == Role::ExpGateUpIn;
  CHECK(gate_up == 2);
  CHECK(layout.warnings.empty());
  // Scout's published config (every layer MoE): the widths stay intermediate_size.
  ModelSpec scout = spec_from_hf_config({{"model_type", "llama4_text"}, {"interleave_moe_layer_step", 1},
                                         {"intermediate_size", 8192}, {"intermediate_size_mlp", 16384}});
  CHECK((scout.intermediate_size == 8192 && scout.moe_intermediate_size == 8192));
  CHECK((scout.layer_nope.size() == 48 && scout.layer_nope[3] && !scout.layer_nope[4] && scout.layer_nope[47]));
  CHECK(scout.attn_kind(0) == AttnKind::Chunked);
  // attention_chunk_size null: every layer global (NoPE layers still without rope).
  ModelSpec global = spec_from_hf_config({{"model_type", "llama4_text"}, {"attention_chunk_size", nullptr}});
  for (int64_t l = 0; l < 48; ++l) CHECK(global.attn_kind(l) == AttnKind::Full);
  CHECK(recipe_for(global).layers[3].nope);
}

TEST_CASE("engine llama4: the run state is estimate's, streamed experts equal resident", "[engine][moe][llama4][stream]") {
  EngineOptions eo;
  eo.max_batch = 2;
  eo.max_context = 100;
  const std::string path = test::testdata("engine/llama4");
  auto m = test::load_engine_model(path, eo, Device{Device::Kind::Cpu, 0}, std::nullopt, 2);
  // Three chunked layers hold rings of chunk 8 + 256 tokens a pass - 1 positions (no more
  // than the context), the NoPE layer the whole context.
  const auto& pos = m.tf->predicted().kv_positions;
  CHECK(pos == std::vector<int64_t>{100, 100, 100, 100});
  test::check_state_is_estimate(m, 2, 100, 2);
  test::check_streamed_equals_resident(path, golden().at("prompt").get<std::vector<int32_t>>(), test::golden_options());
  auto small = test::load_engine_model(path, test::golden_options(11), Device{Device::Kind::Cpu, 0}, std::nullopt, 2);
  CHECK(small.tf->predicted().kv_positions == std::vector<int64_t>{18, 18, 18, 64});
}

// Each piece of the family changes the greedy ids or the logits of this fixture, so the goldens
// above check it: the same weights under a config without it depart from transformers' answer.
TEST_CASE("engine llama4: chunks, NoPE, the temperature and the q/k norms each move the answer", "[engine][moe][llama4]") {
  const std::pair<const char*, std::function<void(json&)>> without[] = {
      {"chunks", [](json& c) { c["attention_chunk_size"] = 64; }},
      {"nope", [](json& c) { c["no_rope_layers"] = {1, 1, 1, 1}; }},
      {"temperature", [](json& c) { c["attn_temperature_tuning"] = false; }},
      {"qk-norm", [](json& c) { c["use_qk_norm"] = false; }},
  };
  const auto prompt = golden().at("prompt").get<std::vector<int32_t>>();
  const auto want = golden().at("ids").get<std::vector<int32_t>>();
  test::TempDir tmp;
  for (const auto& [name, edit] : without) {
    INFO("without " << name);
    const std::string dir = edited_copy(tmp, name, edit);
    auto m = test::load_engine_model(dir, test::golden_options(), Device{Device::Kind::Cpu, 0}, {}, 2);
    SeqChunk ch{0, 0, prompt, true};
    const auto out = m.tf->forward({&ch, 1});
    double worst = 0;
    for (size_t r = 0; r < prompt.size(); ++r)
      worst = std::max(worst, test::rel_error(out.data() + r * size_t(m.tf->vocab()), golden().at("prompt_logits")[r]));
    auto fresh = test::load_engine_model(dir, test::golden_options(), Device{Device::Kind::Cpu, 0}, {}, 2);
    CHECK((worst > 1e-2 || test::greedy(*fresh.tf, prompt, int(want.size())) != want));
  }
}

// The GGUF twin (scripts/make_engine_gguf.py llama4, testdata/engine/llama4-gguf.json): the
// fixture's shape with llama.cpp's fixed constants (chunk 8192, floor_scale 8192, attn_scale
// 0.1, NoPE every 4th layer; no chunking or temperature within 40 tokens), default rope,
// converted by convert_hf_to_gguf (experts split into ffn_gate_exps / ffn_up_exps, transposed
// into rows; q/k unpermuted). transformers' answers exactly, llama.cpp's 32 greedy ids (the
// seed kept is one where they agree) and its last prompt logits within its f16 SiLU table's
// error; the run state is estimate's.
TEST_CASE("engine llama4: the GGUF twin matches transformers and llama.cpp's greedy ids", "[engine][moe][llama4][gguf]") {
  const json g = json::parse(std::ifstream(test::testdata("engine/llama4-gguf.json"))).at("llama4");
  const std::string path = test::testdata("engine/llama4-gguf/" + g.at("file").get<std::string>());
  auto m = test::load_engine_model(path, test::golden_options(), Device{Device::Kind::Cpu, 0}, {}, 2);
  INFO(m.tf->describe());
  const BlockRecipe& r = m.tf->recipe();
  CHECK((r.layers[0].chunked && r.layers[0].window == 8192 && r.layers[3].nope && !r.layers[2].nope));
  CHECK((r.qk_norm_unit && r.attn_temp_floor == 8192 && r.attn_temp_scale == 0.1f && r.expert_input_weighted));
  CHECK(m.tf->rope_style() == RopeStyle::Interleaved);
  const json& t = g.at("transformers");
  test::check_against_golden(*m.tf, {{"prompt", g.at("prompt")}, {"ids", t.at("ids")},
                                     {"prompt_logits", t.at("prompt_logits")}, {"final_logits", t.at("final_logits")}});
  const auto prompt = g.at("prompt").get<std::vector<int32_t>>();
  auto fresh = test::load_engine_model(path, test::golden_options(), Device{Device::Kind::Cpu, 0}, {}, 2);
  CHECK(test::greedy(*fresh.tf, prompt, 32) == g.at("ids").get<std::vector<int32_t>>());  // llama.cpp's
  auto last = test::load_engine_model(path, test::golden_options(), Device{Device::Kind::Cpu, 0}, {}, 2);
  SeqChunk ch{0, 0, prompt, true};
  const auto out = last.tf->forward({&ch, 1});
  CHECK(test::rel_error(out.data() + (prompt.size() - 1) * size_t(last.tf->vocab()), g.at("last_prompt_logits")) < 2e-3);  // 3.5e-4 measured
  EngineOptions eo;
  eo.max_batch = 2;
  eo.max_context = 100;
  test::check_state_is_estimate(test::load_engine_model(path, eo, Device{Device::Kind::Cpu, 0}, std::nullopt, 2), 2, 100, 2,
                                DType::F32);
}

namespace {

// The CPU backend, claiming not to run one op (as the CUDA backend does not run Llama 4's).
class Without final : public test::ForwardingBackend {
 public:
  explicit Without(Op op) : op_(op) {}
  bool supports(Op op, DType t) const override { return op != op_ && in->supports(op, t); }

 private:
  Op op_;
};

}  // namespace

TEST_CASE("engine llama4: the default fused ops run it, and a backend without chunked attention, the temperature, unit norms or NoPE refuses it",
          "[engine][moe][llama4]") {
  auto m = test::load_engine_model(test::testdata("engine/llama4"), test::golden_options(), Device{Device::Kind::Cpu, 0}, {}, 2);
  {  // every op run: Backend's default rope_and_cache (unit norms, no table) gives the golden too
    test::ForwardingBackend all;
    Transformer tf(m.layout, *m.engine.weights, all, test::golden_options());
    test::check_against_golden(tf, golden());
  }
  for (Op op : {Op::ChunkedAttention, Op::AttnTemperature, Op::UnitNorm, Op::NoRope}) {
    INFO(op_name(op));
    Without be(op);
    try {
      Transformer tf(m.layout, *m.engine.weights, be, test::golden_options());
      FAIL("built without " << op_name(op));
    } catch (const Error& e) {
      CHECK(e.code() == "engine.unsupported_architecture");
      CHECK_THAT(e.what(), Catch::Contains(std::string(op_name(op))) && Catch::Contains("llama4"));
    }
  }
}
