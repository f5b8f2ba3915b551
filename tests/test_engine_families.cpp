// The recipe families (gemma, gemma2, gemma3 text, phi3, a phi-4-mini-like phi3 with partial
// rotary and longrope) against transformers itself: tiny random fp32 checkpoints and their
// goldens written by scripts/make_engine_families.py (testdata/engine/families.json). The
// first 32 greedy ids must equal transformers' generate (eager attention, do_sample=False)
// exactly; the logits of every prompt position and of the last position of prompt + ids
// within 1e-4 of each row's largest |logit| (fp32 on both sides, summed in different orders:
// ~1e-6 here; a wrong norm, cap, scale or rope base moves them by > 1e-2).
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/backend_split.hpp"
#include "engine/weights.hpp"
#include "format/open.hpp"
#include "model/recipe.hpp"
#include "tests/helpers.hpp"
#include "tests/test_engine_helpers.hpp"

using namespace nunchaku;
using namespace nunchaku::engine;
using nlohmann::json;

namespace {

const json& families() {
  static const json g = json::parse(std::ifstream(test::testdata("engine/families.json")));
  return g;
}

EngineOptions family_options() {
  EngineOptions o;
  o.max_context = 64;
  o.logit_rows = 64;
  o.max_tokens = 16;  // a prompt of 8 and the 40-token replay below both take several passes
  return o;
}

// Prompt logits (one pass, every row), 32 greedy ids, then the final logits of the whole
// sequence fed again in passes of max_tokens (slot 1: a second sequence beside the first).
void check_family(const std::string& name, Transformer& tf) {
  INFO(name << ": " << tf.describe());
  const json& g = families().at(name);
  test::check_against_golden(tf, g);
}

}  // namespace

TEST_CASE("engine families: gemma, gemma2, gemma3, phi3 and phi4-mini match transformers (32 greedy ids, logits 1e-4)",
          "[engine][families]") {
  for (const char* name : {"gemma", "gemma2", "gemma3", "phi3", "phi4-mini"}) {
    auto opts = family_options();
    opts.max_batch = 2;
    auto m = test::load_engine_model(test::testdata(std::string("engine/") + name), opts, Device{Device::Kind::Cpu, 0}, {}, 2);
    check_family(name, *m.tf);
    CHECK(m.tf->state_bytes() == m.tf->predicted().allocated());
  }
}

TEST_CASE("engine families: the recipe each family's config gives", "[engine][families]") {
  auto recipe = [](const char* name) {
    return recipe_for(*describe_model(open_checkpoint(test::testdata(std::string("engine/") + name))).spec);
  };
  const BlockRecipe g = recipe("gemma");
  CHECK(g.norm == NormKind::RmsOnePlus);
  CHECK(g.act == Activation::GeluTanh);
  CHECK(g.embed_scale == Approx(std::sqrt(32.0)));
  CHECK(g.tied_head);
  CHECK_FALSE(g.post_attn_norm);
  const BlockRecipe g2 = recipe("gemma2");
  CHECK((g2.post_attn_norm && g2.post_ffn_norm));
  CHECK(g2.attn_softcap == 1.5f);
  CHECK(g2.final_softcap == 2.5f);
  CHECK(g2.attn_scale == Approx(1 / std::sqrt(12.0)));
  REQUIRE(g2.layers.size() == 4);
  CHECK(g2.layers[0].window == 6);  // even layers local, odd global (layer_types)
  CHECK(g2.layers[1].window == 0);
  const BlockRecipe g3 = recipe("gemma3");
  CHECK(g3.qk_norm);
  REQUIRE(g3.ropes.size() == 2);
  CHECK(g3.ropes[0].theta == 1e6);
  CHECK(g3.ropes[0].scaling.value("rope_type", "") == "linear");
  CHECK(g3.ropes[1].theta == 1e4);
  REQUIRE(g3.layers.size() == 6);
  for (int l = 0; l < 5; ++l) CHECK((g3.layers[size_t(l)].window == 5 && g3.layers[size_t(l)].rope == 1));
  CHECK((g3.layers[5].window == 0 && g3.layers[5].rope == 0));
  const BlockRecipe p = recipe("phi4-mini");
  CHECK((p.fused_qkv && p.fused_gate_up && p.act == Activation::Silu && p.norm == NormKind::Rms));
  CHECK(p.ropes[0].dims == 4);  // partial_rotary_factor 0.5 of head_dim 8
  // longrope's attention factor sqrt(1 + ln(256/64) / ln 64) on cos and sin.
  CHECK(p.ropes[0].mscale == Approx(std::sqrt(1 + std::log(4.0) / std::log(64.0))));
  CHECK(p.attn_scale == Approx(1 / std::sqrt(8.0)));
  CHECK(recipe("phi3").ropes[0].dims == 8);
}

TEST_CASE("engine families: a sliding layer's KV cache is a ring of window + max_tokens - 1 positions", "[engine][families]") {
  auto m = test::load_engine_model(test::testdata("engine/gemma3"), family_options(), Device{Device::Kind::Cpu, 0}, {}, 2);
  const EngineMemory& mem = m.tf->predicted();
  REQUIRE(mem.kv_positions.size() == 6);
  for (int l = 0; l < 5; ++l) CHECK(mem.kv_positions[size_t(l)] == 5 + 16 - 1);
  CHECK(mem.kv_positions[5] == 64);
  // 2 x (5 x 20 + 64) positions x 2 kv heads x 8 values x 4 bytes, one slot.
  CHECK(mem.kv_cache == uint64_t(2 * (5 * 20 + 64) * 16 * 4));
  CHECK(m.tf->state_bytes() == mem.allocated());
}

TEST_CASE("engine families: gemma3 over two CPU parts equals one backend bit for bit", "[engine][families][multi]") {
  const std::string path = test::testdata("engine/gemma3");
  auto one = test::load_engine_model(path, family_options(), Device{Device::Kind::Cpu, 0}, {}, 2);
  const auto p = families().at("gemma3").at("prompt").get<std::vector<int32_t>>();
  SeqChunk c{0, 0, p, true};
  auto ref = one.tf->forward({&c, 1});
  const std::vector<float> want(ref.begin(), ref.end());
  std::vector<std::unique_ptr<Backend>> parts;
  parts.push_back(make_cpu_backend(2));
  parts.push_back(make_cpu_backend(2));
  auto split = make_split_backend(std::move(parts), {{0, 0, 0, 1, 1, 1}, 0, 1, -1});
  ResidentProvider provider(one.layout, one.load.store);
  Transformer tf(one.layout, provider, *split, family_options());
  auto got = tf.forward({&c, 1});
  REQUIRE(got.size() == want.size());
  CHECK(std::memcmp(got.data(), want.data(), want.size() * 4) == 0);
}
