// estimate --runtime transformers on a mixture-of-experts model: the MLP term of the layer
// peak is transformers 5's grouped_mm experts (integrations/moe.py), four (t·k, h) tensors at
// once, not 3·t·intermediate_size. Checked two ways on a Qwen3-MoE of hidden 512, 16 experts,
// top-4, experts of 256 and an unused dense intermediate_size of 1024
// (testdata/measured_torch/qwen3moe-30m): the activations equal the hand-computed sum, and the
// experts' term is within 7 % of one MoE block's transient as measured in fresh processes
// (scripts/measure_torch.py moe-block, testdata/golden/measured_torch_moe.json).
#include <cmath>
#include <string>

#include <catch2/catch.hpp>

#include "tests/arch_fixture.hpp"
#include "tests/helpers.hpp"

using nlohmann::json;
using namespace nunchaku;

namespace {

constexpr uint64_t h = 512, E = 16, k = 4, heads = 8, kv_heads = 2, d = 64;

// grouped_mm_experts_forward at t tokens: 4 × (t·k, h) + int64 sort order, expert ids and
// inverse order + the gathered weights per (token, expert) + router logits and fp32 softmax.
uint64_t experts(uint64_t t, uint64_t el) { return 4 * t * k * h * el + t * k * (24 + el) + t * E * (el + 4); }

}  // namespace

TEST_CASE("transformers MoE activations: grouped_mm experts, hand-computed and against a measured MoE block", "[estimate][moe][estimate-measured]") {
  const json g = test::read_json(test::testdata("golden/measured_torch_moe.json"));
  test::TempDir tmp;
  test::write_arch_fixture(test::testdata("measured_torch/qwen3moe-30m"), tmp.path.string());
  REQUIRE(g.at("cases").size() == 6);
  for (const auto& c : g.at("cases")) {
    const uint64_t t = c.at("tokens").get<uint64_t>(), el = c.at("dtype") == "bfloat16" ? 2 : 4;
    INFO(c.at("dtype").get<std::string>() << " t=" << t << " (transformers " << g.at("transformers").get<std::string>() << ")");
    CHECK(c.at("experts_implementation") == "grouped_mm");
    const double measured = c.at("transient").get<double>();
    CHECK(std::abs(double(experts(t, el)) - measured) <= 0.07 * measured);
    std::vector<std::string> args = {"estimate", tmp.path.string(), "--runtime", "transformers", "--device", "cpu",
                                     "--context", std::to_string(t), "--json"};
    if (el == 2) args.insert(args.end(), {"--dtype", "bf16"});
    auto r = test::run_cli(args);
    REQUIRE(r.exit_code == 0);
    const json j = json::parse(r.out);
    // residual + max(q|k|v, experts); the prompt is the context, so no decode step grows the
    // cache by torch.cat (the prefill's one cat into the empty cache is in the cache itself).
    const uint64_t expected = 2 * t * h * el + std::max(t * (heads + 2 * kv_heads) * d * el, experts(t, el));
    CHECK(j.at("component_bytes").at("activations").get<uint64_t>() == expected);
    CHECK_THAT(j.at("formulas").at("activations").get<std::string>(), Catch::Contains("grouped_mm experts"));
  }
}
