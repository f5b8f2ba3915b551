// The engine's mixture-of-experts layers against transformers: tiny random fp32 Mixtral,
// Qwen2-MoE (shared expert, a dense layer), Qwen3-MoE (a dense mlp_only layer) and OLMoE
// checkpoints with their goldens from scripts/make_engine_moe.py (testdata/engine/moe.json,
// checked like the other families: 32 greedy ids exactly, logits within 1e-4); the routing
// arithmetic (top-k, ties, NaN) against hand-computed values.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "engine/moe_route.hpp"
#include "format/open.hpp"
#include "model/recipe.hpp"
#include "tests/helpers.hpp"
#include "tests/test_engine_helpers.hpp"

using namespace nunchaku;
using namespace nunchaku::engine;
using nlohmann::json;

namespace {

const json& goldens() {
  static const json g = json::parse(std::ifstream(test::testdata("engine/moe.json")));
  return g;
}

}  // namespace

TEST_CASE("engine moe: mixtral, qwen2_moe, qwen3_moe and olmoe match transformers (32 greedy ids, logits 1e-4)",
          "[engine][moe]") {
  for (const char* name : {"mixtral", "qwen2_moe", "qwen3_moe", "olmoe"}) {
    auto m = test::load_engine_model(test::testdata(std::string("engine/") + name), test::golden_options(16, 2),
                                     Device{Device::Kind::Cpu, 0}, {}, 2);
    INFO(name << ": " << m.tf->describe());
    const json& g = goldens().at(name);
    test::check_against_golden(*m.tf, g);  // cpu_moe_bytes charged exactly
  }
}

TEST_CASE("engine moe: the recipe and dimensions each MoE config gives", "[engine][moe]") {
  auto spec = [](const char* name) {
    return *describe_model(open_checkpoint(test::testdata(std::string("engine/") + name))).spec;
  };
  const ModelSpec q3 = spec("qwen3_moe");
  const BlockRecipe r3 = recipe_for(q3);
  CHECK(r3.unsupported.empty());
  CHECK((r3.experts == 8 && r3.top_k == 3 && r3.norm_topk && r3.qk_norm && !r3.qk_norm_full));
  CHECK(q3.moe_intermediate_size == 16);
  const EngineDims d3 = engine_dims(q3);
  CHECK((d3.experts == 8 && d3.top_k == 3 && d3.expert_inter == 16 && d3.inter == 40));
  const BlockRecipe r2 = recipe_for(spec("qwen2_moe"));
  CHECK((r2.experts == 6 && r2.top_k == 2 && !r2.norm_topk));
  CHECK(engine_dims(spec("qwen2_moe")).inter == 40);  // max(dense 40, shared 24)
  CHECK(recipe_for(spec("mixtral")).norm_topk);       // Mixtral renormalizes whatever the config says
  const BlockRecipe ro = recipe_for(spec("olmoe"));
  CHECK((ro.qk_norm && ro.qk_norm_full && !ro.norm_topk));
  // cpu_moe_bytes by hand for qwen3_moe at 16 tokens: router 16x8x4, 48 assignments x (16 +
  // 2x32x4 + 2x16x4), 9 expert offsets x 8, 16 shared-gate floats.
  CHECK(cpu_moe_bytes(d3, 16) == uint64_t(16 * 8 * 4 + 48 * (16 + 256 + 128) + 9 * 8 + 16 * 4));
}

TEST_CASE("engine moe: routing picks the top-k by softmax weight, and ties, NaN and -inf are defined", "[engine][moe]") {
  int32_t e[3];
  float w[3];
  const float l1[] = {0.0f, 2.0f, 1.0f, 2.0f, -1.0f};
  route_token(l1, false, e, w);
  CHECK((e[0] == 1 && e[1] == 3 && e[2] == 2));  // the tie 2.0 / 2.0 goes to the lower index first
  double z = 0;
  for (float v : l1) z += std::exp(double(v) - 2.0);
  CHECK(w[0] == Approx(1.0 / z));
  CHECK(w[2] == Approx(std::exp(-1.0) / z));
  route_token(l1, true, e, w);
  CHECK(w[0] + w[1] + w[2] == Approx(1.0));
  CHECK(w[0] == Approx(1.0 / (2 + std::exp(-1.0))));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float l2[] = {nan, 0.5f, nan, -3.0f};
  route_token(l2, true, e, w);
  CHECK((e[0] == 1 && e[1] == 3));  // numbers first, then a NaN with weight 0
  CHECK(w[2] == 0.0f);
  CHECK(std::isfinite(w[0]));
  const float l3[] = {nan, nan, nan};
  route_token(l3, true, e, w);
  CHECK((e[0] == 0 && e[1] == 1 && e[2] == 2));
  CHECK((w[0] == 0.0f && w[1] == 0.0f && w[2] == 0.0f));
  const float inf = std::numeric_limits<float>::infinity();
  const float l4[] = {1.0f, inf, 0.0f, inf};
  route_token(l4, false, e, w);
  CHECK((e[0] == 1 && e[1] == 3 && w[0] == 0.5f && w[1] == 0.5f && w[2] == 0.0f));

  // Every token to expert 2 (a collapsed router), k = 2: grouped by expert, token-major.
  const int32_t choice[] = {2, 0, 2, 1, 2, 0};
  int64_t first[4];
  int32_t order[6];
  group_by_expert(choice, 3, first, order);
  CHECK((first[0] == 0 && first[1] == 2 && first[2] == 3 && first[3] == 6));
  CHECK((order[0] == 1 && order[1] == 5 && order[2] == 3 && order[3] == 0 && order[4] == 2 && order[5] == 4));
}

TEST_CASE("engine moe: GGUF twins from convert_hf_to_gguf (stacked experts) give llama.cpp's greedy ids", "[engine][moe]") {
  // scripts/make_engine_gguf.py moe: llama.cpp's converter and llama-cpp-python's ids; the
  // qwen2moe/qwen3moe files are all-sparse variants (llama.cpp's graphs have no dense layers).
  const json g = json::parse(std::ifstream(test::testdata("engine/moe-gguf.json")));
  for (const char* name : {"mixtral", "qwen2_moe", "qwen3_moe", "olmoe"}) {
    const json& ref = g.at(name);
    auto m = test::load_engine_model(test::testdata(std::string("engine/moe-gguf/") + name + ".gguf"), test::golden_options(16, 1),
                                     Device{Device::Kind::Cpu, 0}, {}, 2);
    INFO(name << ": " << m.tf->describe());
    CHECK(recipe_for(*m.layout.spec).norm_topk == (std::string(name) == "mixtral" || std::string(name) == "qwen3_moe"));
    const auto prompt = ref.at("prompt").get<std::vector<int32_t>>();
    SeqChunk ch{0, 0, prompt, false};
    auto out = m.tf->forward({&ch, 1});
    // convert_hf_to_gguf writes OLMoE's rms eps as 1e-5 whatever the config says (1e-6 here):
    // that file is not the transformers model, so only llama.cpp is its reference.
    if (std::string(name) != "olmoe") CHECK(test::rel_error(out.data(), ref.at("transformers_last_prompt_logits")) < 1e-4);
    CHECK(test::rel_error(out.data(), ref.at("last_prompt_logits")) < 3e-3);  // llama.cpp's exp/SiLU approximations
    CHECK(test::greedy(*m.tf, prompt, int(ref.at("ids").size())) == ref.at("ids").get<std::vector<int32_t>>());
    CHECK(m.tf->state_bytes() == m.tf->predicted().allocated());
  }
}
