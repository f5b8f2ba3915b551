// The recipe families (gemma, gemma2, gemma3 text, phi3, a phi-4-mini-like phi3 with partial
// rotary and longrope) against transformers itself: tiny random fp32 checkpoints and their
// goldens written by scripts/make_engine_families.py (testdata/engine/families.json). The
// first 32 greedy ids must equal transformers' generate (eager attention, do_sample=False)
// exactly; the logits of every prompt position and of the last position of prompt + ids
// within 1e-4 of each row's largest |logit| (fp32 on both sides, summed in different orders:
// ~1e-6 here; a wrong norm, cap, scale or rope base moves them by > 1e-2). Their GGUF twins
// (and qwen3's, qwen2's) written by llama.cpp's convert_hf_to_gguf give llama.cpp's greedy
// ids (scripts/make_engine_gguf.py, testdata/engine/dense-gguf.json).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <span>

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

TEST_CASE("engine families: GGUF twins from convert_hf_to_gguf give llama.cpp's greedy ids", "[engine][families][gguf]") {
  // scripts/make_engine_gguf.py dense: each fixture converted by llama.cpp's own converter
  // (f32; gemma norms stored as 1 + w, phi3's fused attn_qkv / ffn_up, phi4-mini's longrope
  // factors as rope_factors_long/short tensors, no query_pre_attn_scalar) and llama.cpp's 32
  // greedy ids (llama-cpp-python fed ids, one thread) at its context n_ctx (64 asked, padded
  // to 256: past phi4-mini's original 64, so the long factors), which the engine's run holds
  // too. "transformers" is transformers on the model as llama.cpp reads the file (gemma2/3:
  // query_pre_attn_scalar = head_dim; phi4-mini: the long factors throughout); its ids equal
  // llama.cpp's for every twin, while on the fixtures unchanged llama.cpp gives 18/32
  // (gemma2), 2/32 (gemma3) and 4/32 (phi4-mini) of transformers' ids.
  const json g = json::parse(std::ifstream(test::testdata("engine/dense-gguf.json")));
  REQUIRE(g.size() == 7);
  for (const auto& [key, ref] : g.items()) {
    EngineOptions o = family_options();
    o.max_context = ref.at("n_ctx").get<int64_t>();
    auto m = test::load_engine_model(test::testdata("engine/dense-gguf/" + ref.at("file").get<std::string>()), o,
                                     Device{Device::Kind::Cpu, 0}, {}, 2);
    INFO(key << ": " << m.tf->describe());
    CHECK(m.layout.naming == Naming::GGUF);
    const json& hf = ref.at("transformers");
    const auto prompt = ref.at("prompt").get<std::vector<int32_t>>();
    const auto ids = ref.at("ids").get<std::vector<int32_t>>();
    SeqChunk ch{0, 0, prompt, false};
    auto out = m.tf->forward({&ch, 1});
    // Against transformers: fp32 on both sides, as the HF fixtures (1e-4). Against llama.cpp:
    // its CPU ops approximate (GELU through an f16 table, its exp and SiLU), which moved its
    // logits by 3e-5 (qwen2) to 9e-4 (gemma2) of their scale from transformers' here.
    CHECK(test::rel_error(out.data(), hf.at("last_prompt_logits")) < 1e-4);
    CHECK(test::rel_error(out.data(), ref.at("last_prompt_logits")) < 3e-3);
    CHECK(test::greedy(*m.tf, prompt, int(ids.size())) == ids);
    CHECK(hf.at("ids") == ref.at("ids"));
    std::vector<int32_t> seq = prompt;  // the whole sequence again, in passes of max_tokens
    seq.insert(seq.end(), ids.begin(), ids.end() - 1);
    std::span<const float> last;
    for (size_t at = 0; at < seq.size(); at += size_t(o.max_tokens)) {
      const size_t n = std::min(seq.size() - at, size_t(o.max_tokens));
      SeqChunk part{0, int64_t(at), std::span<const int32_t>(seq).subspan(at, n), false};
      last = m.tf->forward({&part, 1});
    }
    CHECK(test::rel_error(last.data(), hf.at("final_logits")) < 1e-4);
    CHECK(test::rel_error(last.data(), ref.at("final_logits")) < 3e-3);
    CHECK(m.tf->state_bytes() == m.tf->predicted().allocated());
  }
}

TEST_CASE("engine families: the phi4-mini GGUF twin within its original context takes the short factors", "[engine][families][gguf]") {
  // rope_factors_short.weight at a run of 64 positions (= rope.scaling.original_context_length)
  // with the attention factor from rope.scaling.attn_factor: transformers' own phi4-mini
  // golden (families.json, 40 positions: short factors) within 1e-4.
  auto opts = family_options();
  opts.max_batch = 2;
  auto m = test::load_engine_model(test::testdata("engine/dense-gguf/phi4-mini.gguf"), opts, Device{Device::Kind::Cpu, 0}, {}, 2);
  const BlockRecipe r = recipe_for(*m.layout.spec);
  CHECK(r.ropes[0].dims == 4);
  CHECK(r.ropes[0].mscale == Approx(std::sqrt(1 + std::log(4.0) / std::log(64.0))).epsilon(1e-6));  // f32 in the file
  check_family("phi4-mini", *m.tf);
}

TEST_CASE("engine families: GGUF metadata gives llama.cpp's attention scale and phi3 longrope", "[engine][families][gguf]") {
  auto gguf_recipe = [](const std::string& arch, int64_t layers, int64_t hidden, int64_t heads, int64_t head_dim, json extra) {
    json md = {{"general.architecture", arch},
               {arch + ".block_count", layers},
               {arch + ".embedding_length", hidden},
               {arch + ".attention.head_count", heads},
               {arch + ".attention.head_count_kv", heads / 2},
               {arch + ".attention.key_length", head_dim}};
    md.update(extra);
    auto s = spec_from_gguf(md);
    REQUIRE(s);
    return recipe_for(*s);
  };
  // No query_pre_attn_scalar in a GGUF: llama.cpp scales by 1/sqrt(head_dim), by
  // 1/sqrt(hidden / heads) for the 27Bs. Gemma 2 9B: 42 layers, head_dim 256 (its config:
  // query_pre_attn_scalar 256); Gemma 2 27B: 46 layers, 4608 / 32 = 144 (config: 144, while
  // head_dim is 128); Gemma 3 27B: 62 layers, 5376 / 32 = 168 (config: 168, head_dim 128).
  CHECK(gguf_recipe("gemma2", 42, 3584, 16, 256, json::object()).attn_scale == Approx(1 / 16.0));
  CHECK(gguf_recipe("gemma2", 46, 4608, 32, 128, json::object()).attn_scale == Approx(1 / 12.0));
  CHECK(gguf_recipe("gemma3", 62, 5376, 32, 128, json::object()).attn_scale == Approx(1 / std::sqrt(168.0)));
  CHECK(gguf_recipe("gemma3", 48, 3840, 16, 256, json::object()).attn_scale == Approx(1 / 16.0));
  // Phi-3 mini 128k as convert_hf_to_gguf writes it: attn_factor sqrt(1 + ln(32) / ln(4096))
  // = 1.1902, original context 4096, the factors as tensors and no scaling type.
  const BlockRecipe p = gguf_recipe("phi3", 32, 3072, 32, 96,
                                    {{"phi3.rope.scaling.attn_factor", 1.190238},
                                     {"phi3.rope.scaling.original_context_length", 4096},
                                     {"phi3.context_length", 131072}});
  CHECK(p.ropes[0].scaling.value("rope_type", "") == "longrope");
  CHECK(p.ropes[0].scaling.value("original_max_position_embeddings", 0) == 4096);
  CHECK(p.ropes[0].mscale == Approx(1.190238));
  // Phi-3 mini 4k: no attn_factor, no scaling.
  CHECK(gguf_recipe("phi3", 32, 3072, 32, 96, {{"phi3.rope.scaling.original_context_length", 4096}}).ropes[0].scaling.is_null());
}
