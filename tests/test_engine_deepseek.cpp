// DeepSeek-V2 / V3 on the CPU engine against transformers 5.25 (scripts/make_engine_deepseek.py,
// testdata/engine/deepseek.json): tiny random fp32 DeepseekV2/V3ForCausalLM checkpoints as
// save_pretrained writes them: multi-head latent attention (q direct and low-rank; yarn with
// mscale / mscale_all_dim; interleaved and rotate-half rope), a dense first layer, then routed
// experts with shared experts (V3: sigmoid scores, score-correction bias, group-limited;
// V2: softmax, greedy and group_limited_greedy; routed_scaling_factor). 32 greedy ids exactly,
// logits within 1e-4; routing by hand; the run state (the latent cache) as estimate predicts
// it; streamed experts equal resident ones; malformed checkpoints refused naming the tensor.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "engine/moe_route.hpp"
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

constexpr const char* kModels[] = {"deepseek_v3", "deepseek_v3_neox", "deepseek_v2", "deepseek_v2_lite"};

const json& goldens() {
  static const json g = json::parse(std::ifstream(test::testdata("engine/deepseek.json")));
  return g;
}

}  // namespace

TEST_CASE("engine deepseek: V2 and V3 checkpoints match transformers (32 greedy ids, logits 1e-4)",
          "[engine][moe][deepseek]") {
  for (const char* name : kModels) {
    auto m = test::load_engine_model(test::testdata(std::string("engine/") + name), test::golden_options(),
                                     Device{Device::Kind::Cpu, 0}, {}, 2);
    INFO(name << ": " << m.tf->describe());
    test::check_against_golden(*m.tf, goldens().at(name));
  }
}

TEST_CASE("engine deepseek: the recipe and dimensions the configs give", "[engine][moe][deepseek]") {
  const ModelLayout v3 = describe_model(open_checkpoint(test::testdata("engine/deepseek_v3")));
  REQUIRE(v3.spec);
  CHECK(v3.warnings.empty());
  const BlockRecipe r = recipe_for(*v3.spec);
  CHECK(r.unsupported.empty());
  CHECK((r.mla && r.rope_dims == 8 && r.ropes[0].dims == 8));
  CHECK((r.experts == 8 && r.top_k == 3 && r.routing == Routing::SigmoidTopk && r.norm_topk && r.exp_probs_bias));
  CHECK((r.route_groups == 4 && r.route_groups_used == 2 && r.routed_scale == 2.5f));
  // 1/sqrt(qk_head_dim 16) x yarn mscale(4, mscale_all_dim 1)^2 = 0.25 (0.1 ln 4 + 1)^2
  CHECK(r.attn_scale == Approx(0.32411924819517657).epsilon(1e-6));
  // rope's attention factor: mscale(4, 0.707) / mscale(4, 1)
  CHECK(r.ropes[0].mscale == Approx((0.1 * 0.707 * std::log(4.0) + 1) / (0.1 * std::log(4.0) + 1)).epsilon(1e-6));
  // the engine attends over the latent: one kv head of kv_lora_rank 16 + rope 8
  const EngineDims d = engine_dims(*v3.spec);
  CHECK((d.kv_heads == 1 && d.head_dim == 24 && d.mla_rank == 16 && d.mla_nope == 8 && d.mla_v == 12 && d.q_rank == 24));
  CHECK(d.inter == 48);  // the dense layer's; the shared expert is 16 wide

  const ModelLayout v2 = describe_model(open_checkpoint(test::testdata("engine/deepseek_v2")));
  REQUIRE(v2.spec);
  CHECK(v2.warnings.empty());
  const BlockRecipe r2 = recipe_for(*v2.spec);
  CHECK((r2.routing == Routing::SoftmaxTopk && !r2.norm_topk && !r2.exp_probs_bias));
  CHECK((r2.route_groups == 4 && r2.route_groups_used == 2 && r2.routed_scale == 1.5f));
  CHECK(r2.attn_scale == Approx(0.25));  // default rope: no mscale
  CHECK(engine_dims(*v2.spec).q_rank == 0);
  CHECK(recipe_for(*describe_model(open_checkpoint(test::testdata("engine/deepseek_v2_lite"))).spec).route_groups == 0);
}

TEST_CASE("engine deepseek: sigmoid group-limited and softmax group-limited routing by hand", "[engine][moe][deepseek]") {
  // V3: scores sigmoid(logit), ranked with the bias; groups of 2 by their two best keys:
  // keys 0.5, 1.0, 0.881, 0.119, 0.731, 0.731, 0.269, 0.053 -> groups 1.5, 1.0, 1.462, 0.321:
  // groups 0 and 2, so expert 2 (key 0.881) is out and experts 1, 4, 5 are chosen; weights
  // their scores without the bias, sigmoid(0), sigmoid(1), sigmoid(1), normalized, times 2.5.
  const float logits[] = {0, 0, 2, -2, 1, 1, -1, 3};
  const float bias[] = {0, 0.5f, 0, 0, 0, 0, 0, -0.9f};
  int32_t e[3];
  float w[3];
  route_token(logits, true, e, w, Routing::SigmoidTopk, {4, 2, bias, 2.5f, true});
  CHECK((e[0] == 1 && e[1] == 4 && e[2] == 5));
  CHECK(w[0] == Approx(0.6370669536092112).epsilon(1e-6));
  CHECK(w[1] == Approx(0.9314665231953945).epsilon(1e-6));
  CHECK(w[2] == Approx(0.9314665231953945).epsilon(1e-6));
  // No group limit: expert 2 comes in.
  route_token(logits, true, e, w, Routing::SigmoidTopk, {0, 0, bias, 1.0f});
  CHECK((e[0] == 1 && e[1] == 2 && e[2] == 4));
  // V2 group_limited_greedy: groups of 2 by their best logit (1, 3, 2.5): group 1 only, so
  // experts 2 and 3 (not 5); weights the softmax over all six, times 1.5:
  // e^3 / sum e^l * 1.5 and e^-1 / sum e^l * 1.5.
  const float l2[] = {1, 0, 3, -1, 2, 2.5f};
  int32_t e2[2];
  float w2[2];
  route_token(l2, false, e2, w2, Routing::SoftmaxTopk, {3, 1, nullptr, 1.5f, false});
  CHECK((e2[0] == 2 && e2[1] == 3));
  CHECK(w2[0] == Approx(0.6887532725257203).epsilon(1e-6));
  CHECK(w2[1] == Approx(0.012614956223015013).epsilon(1e-6));
  // llama.cpp ranks a group by its two best probabilities summed: groups e^1 + e^0 = 3.72,
  // e^3 + e^-1 = 20.45, e^2 + e^2.5 = 19.57 (as logits the sums would rank group 2 first:
  // 4.5 > 2): group 1 again; with top-2 groups 1 and 2, experts 2 and 5.
  route_token(l2, false, e2, w2, Routing::SoftmaxTopk, {3, 1, nullptr, 1.0f, true});
  CHECK((e2[0] == 2 && e2[1] == 3));
  route_token(l2, false, e2, w2, Routing::SoftmaxTopk, {3, 2, nullptr, 1.0f, true});
  CHECK((e2[0] == 2 && e2[1] == 5));
}

TEST_CASE("engine deepseek: estimate --runtime nunchaku predicts the run state (the latent cache), streamed equals resident",
          "[engine][moe][deepseek][stream]") {
  for (const char* name : {"deepseek_v3", "deepseek_v2"}) {
    INFO(name);
    const std::string path = test::testdata(std::string("engine/") + name);
    EngineOptions eo;
    eo.max_batch = 2;
    eo.max_context = 100;
    auto m = test::load_engine_model(path, eo, Device{Device::Kind::Cpu, 0}, std::nullopt, 2);
    const uint64_t kv = test::check_state_is_estimate(m, 2, 100, 2);
    // The cache is the latent: 3 layers x 2 slots x 100 positions x (16 + 8) x 4 B, no V.
    CHECK(m.tf->predicted().kv_cache == 3ull * 2 * 100 * 24 * 4);
    CHECK(kv == 3ull * 2 * 100 * 24 * 4);
    test::check_streamed_equals_resident(path, goldens().at(name).at("prompt").get<std::vector<int32_t>>(), test::golden_options());
  }
}

namespace {

// The engine's error for a copy of testdata/engine/<name> whose safetensors header went
// through `edit` ("" if it builds); *tensor: the tensor the error names.
std::string engine_error(const std::string& name, const std::function<void(json&)>& edit, std::string* tensor) {
  return test::engine_error_of(test::testdata("engine/" + name), edit, test::golden_options(), tensor);
}

}  // namespace

TEST_CASE("engine deepseek: malformed MLA and router tensors are refused naming them (exit 2)", "[engine][moe][deepseek]") {
  const std::string L1 = "model.layers.1.";
  std::string tensor;
  // no kv_a_layernorm
  CHECK(engine_error("deepseek_v3", [&](json& h) { test::rename_tensor(h, L1 + "self_attn.kv_a_layernorm.weight", L1 + "self_attn.kv_a_layernorm.weigth"); },
                     &tensor) == "engine.missing_tensor");
  CHECK(tensor == "model.layers.1");
  // no q_a_layernorm (the low-rank q needs it)
  CHECK(engine_error("deepseek_v3", [&](json& h) { test::rename_tensor(h, L1 + "self_attn.q_a_layernorm.weight", L1 + "self_attn.q_a_norm.weight"); },
                     &tensor) == "engine.missing_tensor");
  CHECK(tensor == "model.layers.1");
  // no score-correction bias: V3 ranks by it
  CHECK(engine_error("deepseek_v3", [&](json& h) { test::rename_tensor(h, L1 + "mlp.gate.e_score_correction_bias", L1 + "mlp.gate.bias"); },
                     &tensor) == "engine.missing_tensor");
  CHECK(tensor == "model.layers.1");
  // kv_b_proj of another shape (the same bytes as [40, 32])
  CHECK(engine_error("deepseek_v2", [&](json& h) { h[L1 + "self_attn.kv_b_proj.weight"]["shape"] = {40, 32}; }, &tensor) ==
        "engine.bad_shape");
  CHECK(tensor == L1 + "self_attn.kv_b_proj.weight");
  // kv_a_proj_with_mqa stored the other way round ([32, 24] where the model needs [24, 32])
  CHECK(engine_error("deepseek_v2", [&](json& h) { h[L1 + "self_attn.kv_a_proj_with_mqa.weight"]["shape"] = {32, 24}; },
                     &tensor) == "engine.bad_shape");
  CHECK(tensor == L1 + "self_attn.kv_a_proj_with_mqa.weight");
  // the untouched copy builds
  CHECK(engine_error("deepseek_v3", [](json&) {}, &tensor).empty());
}

TEST_CASE("engine deepseek: GGUF twins (deepseek2, attn_k_b / attn_v_b, exp_probs_b) give llama.cpp's greedy ids",
          "[engine][moe][deepseek][gguf]") {
  // scripts/make_engine_gguf.py deepseek: default-rope variants of deepseek_v3 (sigmoid,
  // groups, correction bias) and deepseek_v2_lite (softmax, greedy), and deepseek_v2_lite with
  // its yarn (rope.scaling.yarn_log_multiplier), converted by llama.cpp's convert_hf_to_gguf,
  // llama-cpp-python's ids (seeds where they equal transformers').
  const json g = json::parse(std::ifstream(test::testdata("engine/deepseek-gguf.json")));
  for (const char* name : {"deepseek_v3", "deepseek_v2_lite", "deepseek_v2_lite_yarn"}) {
    const json& ref = g.at(name);
    const std::string path = test::testdata(std::string("engine/deepseek-gguf/") + name + ".gguf");
    auto m = test::load_engine_model(path, test::golden_options(), Device{Device::Kind::Cpu, 0}, {}, 2);
    INFO(name << ": " << m.tf->describe());
    CHECK(m.layout.warnings.empty());
    const BlockRecipe r = recipe_for(*m.layout.spec);
    CHECK(r.routing == (std::string(name) == "deepseek_v3" ? Routing::SigmoidTopk : Routing::SoftmaxTopk));
    // yarn from the file: mscale = mscale_all_dim = 0.707, so cos/sin unscaled and the softmax
    // scale 1/sqrt(16) x (0.1 x 0.707 x ln 4 + 1)^2
    if (std::string(name) == "deepseek_v2_lite_yarn") {
      CHECK(r.ropes[0].mscale == Approx(1.0).epsilon(1e-6));
      CHECK(r.attn_scale == Approx(0.30140704525112816).epsilon(1e-5));
    }
    const auto prompt = ref.at("prompt").get<std::vector<int32_t>>();
    SeqChunk ch{0, 0, prompt, false};
    auto out = m.tf->forward({&ch, 1});
    CHECK(test::rel_error(out.data(), ref.at("transformers_last_prompt_logits")) < 1e-4);
    CHECK(test::rel_error(out.data(), ref.at("last_prompt_logits")) < 3e-3);  // llama.cpp's exp/SiLU approximations
    CHECK(test::greedy(*m.tf, prompt, int(ref.at("ids").size())) == ref.at("ids").get<std::vector<int32_t>>());
    CHECK(m.tf->state_bytes() == m.tf->predicted().allocated());
    // estimate --runtime nunchaku on the file: the run state as allocated
    EngineOptions eo;
    eo.max_batch = 2;
    eo.max_context = 100;
    auto e = test::load_engine_model(path, eo, Device{Device::Kind::Cpu, 0}, std::nullopt, 2);
    test::check_state_is_estimate(e, 2, 100, 2);
    // stacked experts (ffn_*_exps) streamed as row-range pieces: the resident logits bit for bit
    SeqChunk all{0, 0, prompt, true};
    auto res = test::load_engine_model(path, test::golden_options(), Device{Device::Kind::Cpu, 0}, {}, 2);
    const auto a = res.tf->forward({&all, 1});
    const std::vector<float> resident(a.begin(), a.end());
    StreamOptions so;
    so.expert_pieces = true;
    auto st = test::load_engine_model(path, test::golden_options(), Device{Device::Kind::Disk, 0}, so, 2);
    const auto b = st.tf->forward({&all, 1});
    CHECK(std::equal(resident.begin(), resident.end(), b.begin(), b.end()));
    CHECK(test::greedy(*st.tf, prompt, int(ref.at("ids").size())) == ref.at("ids").get<std::vector<int32_t>>());
  }
}
