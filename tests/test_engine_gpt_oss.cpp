// gpt-oss on the CPU engine against transformers 5.25 (scripts/make_engine_gpt_oss.py,
// testdata/engine/gpt_oss.json): a tiny random fp32 GptOssForCausalLM as save_pretrained
// writes it (input-major experts) and the same model with MXFP4 experts as the published
// checkpoints store them (*_blocks / *_scales; golden: transformers on the dequantized
// weights). 32 greedy ids exactly, logits within 1e-4; yarn's frequencies as transformers
// computes them; top-k-then-softmax routing by hand; the run state as estimate predicts it;
// streamed experts equal resident ones.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

#include "engine/moe_route.hpp"
#include "engine/rope.hpp"
#include "core/error.hpp"
#include "format/open.hpp"
#include "memory/estimate.hpp"
#include "memory/plan.hpp"
#include "model/recipe.hpp"
#include "tests/helpers.hpp"
#include "tests/test_engine_helpers.hpp"

using namespace nunchaku;
using namespace nunchaku::engine;
using nlohmann::json;

namespace {

const json& goldens() {
  static const json g = json::parse(std::ifstream(test::testdata("engine/gpt_oss.json")));
  return g;
}

// The run state equals estimate --runtime nunchaku's (batch 2, context 100; `kv` when the
// engine's KV dtype is not estimate's default for the file), and streamed equals resident.
void check_state_and_stream(const std::string& path, const std::vector<int32_t>& prompt, std::optional<DType> kv) {
  EngineOptions eo;
  eo.max_batch = 2;
  eo.max_context = 100;
  test::check_state_is_estimate(test::load_engine_model(path, eo, Device{Device::Kind::Cpu, 0}, std::nullopt, 2), 2, 100, 2, kv);
  test::check_streamed_equals_resident(path, prompt, test::golden_options());
}


}  // namespace

TEST_CASE("engine gpt-oss: fp32 and MXFP4 checkpoints match transformers (32 greedy ids, logits 1e-4)",
          "[engine][moe][gpt_oss]") {
  for (const char* name : {"gpt_oss", "gpt_oss_mxfp4"}) {
    auto m = test::load_engine_model(test::testdata(std::string("engine/") + name), test::golden_options(),
                                     Device{Device::Kind::Cpu, 0}, {}, 2);
    INFO(name << ": " << m.tf->describe());
    test::check_against_golden(*m.tf, goldens().at(name));
  }
}

// The GGUF twin (scripts/make_engine_gguf.py gpt_oss, testdata/engine/gpt_oss-gguf.json): a
// gpt-oss with llama.cpp's fixed clamp (alpha 1.702, limit 7) and truncated yarn, MXFP4
// experts repacked by convert_hf_to_gguf into ggml's blocks, gate and up apart with their
// biases. Exact: transformers' forward on the same model (dequantized experts; the greedy
// path of fresh forwards, as transformers 5.25's cached generate departs from its own forward
// at the 27th id here). llama.cpp's logits differ by its 8-bit activations against MXFP4
// (vec_dot_mxfp4_q8_0, ~1e-2 of their scale); its 32 greedy ids are the same.
TEST_CASE("engine gpt-oss: the GGUF twin (ggml MXFP4 experts) matches transformers and llama.cpp's greedy ids",
          "[engine][moe][gpt_oss][gguf]") {
  const json g = json::parse(std::ifstream(test::testdata("engine/gpt_oss-gguf.json"))).at("gpt_oss");
  const std::string path = test::testdata("engine/gpt_oss-gguf/" + g.at("file").get<std::string>());
  auto m = test::load_engine_model(path, test::golden_options(), Device{Device::Kind::Cpu, 0}, {}, 2);
  INFO(m.tf->describe());
  const json& t = g.at("transformers");
  test::check_against_golden(*m.tf, {{"prompt", g.at("prompt")}, {"ids", t.at("ids")},
                                     {"prompt_logits", t.at("prompt_logits")}, {"final_logits", t.at("final_logits")}});
  const auto ours = test::greedy(*m.tf, g.at("prompt").get<std::vector<int32_t>>(), 32);
  CHECK(ours == g.at("ids").get<std::vector<int32_t>>());  // llama.cpp's
  // The last prompt position: llama.cpp's logits within its 8-bit activations' error.
  const auto prompt = g.at("prompt").get<std::vector<int32_t>>();
  auto fresh = test::load_engine_model(path, test::golden_options(), Device{Device::Kind::Cpu, 0}, {}, 2);
  SeqChunk ch{0, 0, prompt, true};
  const auto out = fresh.tf->forward({&ch, 1});
  CHECK(test::rel_error(out.data() + (prompt.size() - 1) * size_t(fresh.tf->vocab()), g.at("last_prompt_logits")) < 2e-2);
  // The clamp and the biases are in play: the generator kept a seed where gate values pass 7.
  CHECK(t.at("clamp_hits").get<int>() > 0);
}

TEST_CASE("engine gpt-oss: the GGUF twin's run state is estimate's, streamed experts equal resident",
          "[engine][moe][gpt_oss][gguf][stream]") {
  const json g = json::parse(std::ifstream(test::testdata("engine/gpt_oss-gguf.json")));
  // The engine's KV for an F32 model's attention (EngineOptions' default), where estimate's
  // default for a quantized file is f16.
  check_state_and_stream(test::testdata("engine/gpt_oss-gguf/gpt_oss.gguf"), g["gpt_oss"]["prompt"].get<std::vector<int32_t>>(),
                         DType::F32);
}

TEST_CASE("engine gpt-oss: the recipe its config gives", "[engine][moe][gpt_oss]") {
  const ModelLayout layout = describe_model(open_checkpoint(test::testdata("engine/gpt_oss")));
  const ModelSpec& s = *layout.spec;
  const BlockRecipe r = recipe_for(s);
  CHECK(r.unsupported.empty());
  CHECK((r.experts == 8 && r.top_k == 4 && r.routing == Routing::TopkSoftmax && r.router_bias));
  CHECK((r.attn_sinks && r.clamped_swiglu && r.swiglu_alpha == 1.3f && r.swiglu_limit == 1.0f));
  REQUIRE(r.layers.size() == 4);
  CHECK((r.layers[0].window == 6 && r.layers[1].window == 0 && r.layers[2].window == 6 && r.layers[3].window == 0));
  CHECK(r.attn_scale == Approx(1 / std::sqrt(8.0)));
  // yarn: cos and sin times 0.1 ln(factor) + 1 (transformers' attention factor)
  CHECK(r.ropes[0].mscale == Approx(goldens()["yarn"]["fixture"]["attention_factor"].get<double>()).epsilon(1e-7));
  // The published config without rope_scaling gets GptOssConfig's default yarn.
  ModelSpec bare = s;
  bare.rope_scaling = nullptr;
  CHECK(recipe_for(bare).ropes[0].mscale == Approx(0.1 * std::log(32.0) + 1));
  // MXFP4 experts: the same dimensions, the blocks' roles from the table
  const ModelLayout q = describe_model(open_checkpoint(test::testdata("engine/gpt_oss_mxfp4")));
  CHECK(engine_dims(*q.spec).expert_inter == 32);
  size_t scales = 0;
  for (const Module& mod : q.modules)
    for (Role role : mod.roles) scales += role == Role::ExpGateUpScales || role == Role::ExpDownScales;
  CHECK(scales == 8);
}

TEST_CASE("engine gpt-oss: yarn inverse frequencies and attention factor as transformers computes them",
          "[engine][rope]") {
  for (const auto& [name, c] : goldens()["yarn"].items()) {
    INFO(name);
    ModelSpec s;
    s.architecture = "llama";
    s.hidden_size = 64;
    s.num_heads = 1;
    s.head_dim = c["head_dim"].get<int64_t>();
    s.num_layers = 1;
    s.max_context = c["max_position_embeddings"].get<int64_t>();
    s.rope_theta = c["rope_parameters"]["rope_theta"].get<double>();
    s.rope_scaling = c["rope_parameters"];
    const BlockRecipe r = recipe_for(s);
    CHECK(r.ropes[0].mscale == Approx(c["attention_factor"].get<double>()).epsilon(1e-7));
    const std::vector<float> f = rope_inv_freq(r.ropes[0], s.head_dim, {}, 4096);
    const auto want = c["inv_freq"].get<std::vector<double>>();
    REQUIRE(f.size() == want.size());
    for (size_t i = 0; i < f.size(); ++i) {
      INFO("i = " << i);
      CHECK(double(f[i]) == Approx(want[i]).epsilon(1e-6));
    }
  }
}

TEST_CASE("engine gpt-oss: top-k-then-softmax routing, ties, NaN and infinities", "[engine][moe][gpt_oss]") {
  int32_t e[3];
  float w[3];
  const float l1[] = {0.0f, 2.0f, 1.0f, 2.0f, -1.0f};
  route_token(l1, false, e, w, Routing::TopkSoftmax);
  CHECK((e[0] == 1 && e[1] == 3 && e[2] == 2));
  const double z = 2 + std::exp(-1.0);  // softmax over the chosen {2, 2, 1} only
  CHECK(w[0] == Approx(1 / z));
  CHECK(w[1] == Approx(1 / z));
  CHECK(w[2] == Approx(std::exp(-1.0) / z));
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float l2[] = {nan, 0.5f, nan, -3.0f};
  route_token(l2, false, e, w, Routing::TopkSoftmax);
  CHECK((e[0] == 1 && e[1] == 3 && w[2] == 0.0f));
  CHECK(w[0] + w[1] == Approx(1.0));
  const float l3[] = {nan, nan, nan};
  route_token(l3, false, e, w, Routing::TopkSoftmax);
  CHECK((w[0] == 0.0f && w[1] == 0.0f && w[2] == 0.0f));
  const float l4[] = {1.0f, inf, 0.0f, inf};
  route_token(l4, false, e, w, Routing::TopkSoftmax);
  CHECK((e[0] == 1 && e[1] == 3 && w[0] == 0.5f && w[1] == 0.5f && w[2] == 0.0f));
}

TEST_CASE("engine gpt-oss: estimate --runtime nunchaku predicts the run state, and streamed experts equal resident",
          "[engine][moe][gpt_oss][stream]") {
  for (const char* name : {"gpt_oss", "gpt_oss_mxfp4"}) {
    INFO(name);
    check_state_and_stream(test::testdata(std::string("engine/") + name),
                           goldens().at(name).at("prompt").get<std::vector<int32_t>>(), std::nullopt);
  }
}

namespace {

// The engine's error for testdata/engine/<name> with its header edited ("" if it builds).
std::string engine_error(const std::string& name, const std::function<void(json&)>& edit, std::string* tensor) {
  return test::engine_error_of(test::testdata("engine/" + name), edit, test::golden_options(), tensor);
}

}  // namespace

TEST_CASE("engine gpt-oss: malformed experts are refused naming the tensor (exit 2)", "[engine][moe][gpt_oss]") {
  const std::string L0 = "model.layers.0.mlp.experts.";
  std::string tensor;
  // MXFP4 blocks without their scales
  CHECK(engine_error("gpt_oss_mxfp4", [&](json& h) { test::rename_tensor(h, L0 + "down_proj_scales", L0 + "down_proj_scalez"); },
                     &tensor) == "engine.missing_tensor");
  CHECK(tensor == L0 + "down_proj_blocks");
  // scales of another shape (the same bytes as [8, 32, 2])
  CHECK(engine_error("gpt_oss_mxfp4", [&](json& h) { h[L0 + "gate_up_proj_scales"]["shape"] = {8, 32, 2}; }, &tensor) ==
        "engine.bad_shape");
  CHECK(tensor == L0 + "gate_up_proj_scales");
  // input-major experts stored the other way round ([E, 2I, H] where the file must hold [E, H, 2I])
  CHECK(engine_error("gpt_oss", [&](json& h) { h[L0 + "gate_up_proj"]["shape"] = {8, 64, 32}; }, &tensor) == "engine.bad_shape");
  CHECK(tensor == L0 + "gate_up_proj");
  // no sinks: the recipe needs them
  CHECK(engine_error("gpt_oss", [&](json& h) { test::rename_tensor(h, "model.layers.1.self_attn.sinks", "model.layers.1.self_attn.sinkz"); },
                     &tensor) == "engine.missing_tensor");
  // the untouched copy builds
  CHECK(engine_error("gpt_oss", [](json&) {}, &tensor).empty());
}
