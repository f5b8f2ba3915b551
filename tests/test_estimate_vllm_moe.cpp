// estimate --runtime vllm on mixture-of-experts models: the profile run's activations at
// max_num_batched_tokens (8192) tokens through the fused-MoE path (docs/estimate.md). Each
// expectation is hand-computed from the published config.json (testdata/arch) with vLLM's
// own shapes: the Triton experts' workspace13 t·k·max(I, h) and workspace2 t·k·max(2I, h)
// (I = moe_intermediate_size / TP), kept for the later layers; router logits t·E, the top-k
// tables t·k·(4 + 4 + 4), moe_align_block_size's (t·k + E·63) sorted ids, their
// ceil(/64) expert ids and one count, all int32; residual 2·t·h; q|k|v t·(a + 2·kv)·d.
#include <string>

#include <catch2/catch.hpp>

#include "tests/arch_fixture.hpp"
#include "tests/helpers.hpp"

using nlohmann::json;
using namespace nunchaku;

namespace {

constexpr uint64_t t = 8192;

std::string fixture(const test::TempDir& tmp, const std::string& name) {
  test::write_arch_fixture(std::filesystem::path(test::testdata("arch")) / name, tmp.path.string());
  return tmp.path.string();
}

json vllm_estimate(const std::string& dir, const std::string& gpus) {
  auto r = test::run_cli({"estimate", dir, "--runtime", "vllm", "--gpus", gpus, "--context", "4096", "--json"});
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out);
}

uint64_t activations(const json& j) { return j.at("component_bytes").at("activations").get<uint64_t>(); }

std::string activations_text(const json& j) { return j.at("formulas").at("activations").get<std::string>(); }

// Router logits (bf16), top-k tables, block alignment (BLOCK_SIZE_M 64): freed with the layer.
constexpr uint64_t router(uint64_t E, uint64_t k) {
  const uint64_t padded = t * k + E * 63;
  return t * E * 2 + t * k * 12 + (padded + (padded + 63) / 64 + 1) * 4;
}

}  // namespace

TEST_CASE("vLLM MoE activations: Qwen3-30B-A3B's fused-MoE workspaces, not the unused dense intermediate_size", "[estimate][vllm][moe]") {
  test::TempDir tmp;
  const std::string dir = fixture(tmp, "qwen3-30b-a3b");
  // h 2048, 32 heads, 4 KV heads of 128, 128 experts, top-8, moe_intermediate_size 768.
  const uint64_t residual = 2 * t * 2048 * 2, qkv = t * (32 + 2 * 4) * 128 * 2;
  // I = 768 (TP 1) or 384 (TP 2): hidden 2048 is wider than I and 2I either way.
  const uint64_t ws = t * 8 * 2048 * 2 + t * 8 * 2048 * 2;  // 512 MiB
  static_assert(router(128, 8) == 3182588);
  const uint64_t expected = residual + ws + std::max(qkv, router(128, 8));
  CHECK(expected == 687865856);
  for (const std::string gpus : {"1", "2"}) {
    const json j = vllm_estimate(dir, gpus);
    INFO("--gpus " << gpus);
    CHECK(activations(j) == expected);
    // The dense MLP (3·t·6144·2 = 288 MiB) is not what vLLM runs for these layers.
    CHECK_THAT(activations_text(j), Catch::Contains("fused-MoE layer") && Catch::Contains("I=" + std::string(gpus == "1" ? "768" : "384")) &&
                                        !Catch::Contains("mlp 3·t·I"));
  }
}

TEST_CASE("vLLM MoE activations: Mixtral-8x7B's workspaces split I_expert over tensor parallel GPUs", "[estimate][vllm][moe]") {
  test::TempDir tmp;
  const std::string dir = fixture(tmp, "mixtral-8x7b");
  // h 4096, 32 heads, 8 KV heads of 128, 8 experts, top-2, intermediate_size 14336 per expert.
  const uint64_t residual = 2 * t * 4096 * 2, qkv = t * (32 + 2 * 8) * 128 * 2;
  static_assert(router(8, 2) == 396292);
  const uint64_t tp1 = residual + (t * 2 * 14336 * 2 + t * 2 * 28672 * 2) + std::max(qkv, router(8, 2));
  const uint64_t tp2 = residual + (t * 2 * 7168 * 2 + t * 2 * 14336 * 2) + std::max(qkv, router(8, 2));
  CHECK(tp1 == 1644167168);
  CHECK(tp2 == 939524096);
  CHECK(activations(vllm_estimate(dir, "1")) == tp1);
  CHECK(activations(vllm_estimate(dir, "2")) == tp2);
}
