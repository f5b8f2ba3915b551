// estimate --device cpu's measured decode speed (engine/speed_probe.hpp, cli/cpu_speed.hpp):
// which weights a decode step reads, by hand on two fixtures; the probe's arithmetic from its
// own measured rates; types it cannot time listed, not guessed.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include "engine/kernels_fast_bf16.hpp"
#include "engine/kernels_q8.hpp"
#include "engine/speed_probe.hpp"
#include "tests/helpers.hpp"

using namespace nunchaku;
using nlohmann::json;

namespace {
// matrices_per_step of each "DTYPE ROWSxCOLS" class in estimate --json's cpu_decode_probe.
std::map<std::string, double> classes_of(const json& probe) {
  std::map<std::string, double> out;
  for (const auto& t : probe.at("types"))
    out[t.at("dtype").get<std::string>() + " " + std::to_string(t.at("rows").get<int64_t>()) + "x" +
        std::to_string(t.at("cols").get<int64_t>()) + (t.at("exact_only").get<bool>() ? " exact" : "")] = t.at("matrices_per_step").get<double>();
  return out;
}
}  // namespace

TEST_CASE("estimate --device cpu: the matrices a decode step multiplies by, by hand on the llama and mixtral fixtures", "[estimate][speed-probe][cli]") {
  // llama (fp32, hidden 64, 4 heads of 16, 2 KV heads, FFN 128, vocab 256, untied, 2 layers):
  // per layer q and o 64x64, k and v 32x64, gate and up 128x64, down 64x128; the head 256x64.
  // The embedding is a lookup (the head is its own matrix): not counted.
  const auto r = test::run_cli({"estimate", test::testdata("models/llama"), "--device", "cpu", "--json"});
  REQUIRE(r.exit_code == 0);
  const json p = json::parse(r.out).at("cpu_decode_probe");
  CHECK(classes_of(p) == std::map<std::string, double>{{"F32 64x64", 4}, {"F32 32x64", 4}, {"F32 128x64", 4}, {"F32 64x128", 2},
                                                        {"F32 256x64", 1}});
  CHECK(p.at("not_probed").empty());
  // mixtral (fp32, hidden 32, 4 heads of 8, 2 KV heads, 4 experts of FFN 64, top 2, vocab 128):
  // per layer q and o 32x32, k and v 16x32, the router 4x32, and of the 4 experts' gate and up
  // (64x32) and down (32x64) the share 1 - (1 - 2/4)^B a batch of B reaches; the head 128x32.
  // The router and the routed experts run exactly under --fast-math too (the moe op).
  for (int64_t batch : {1, 4}) {
    INFO("batch " << batch);
    const double reach = 1 - std::pow(0.5, double(batch));
    const auto m = test::run_cli({"estimate", test::testdata("models/mixtral"), "--device", "cpu", "--json", "--batch", std::to_string(batch)});
    REQUIRE(m.exit_code == 0);
    const auto c = classes_of(json::parse(m.out).at("cpu_decode_probe"));
    CHECK(c.size() == 6);
    CHECK(c.at("F32 32x32") == 4);
    CHECK(c.at("F32 16x32") == 4);
    CHECK(c.at("F32 4x32 exact") == 2);
    CHECK(c.at("F32 128x32") == 1);
    CHECK(c.at("F32 64x32 exact") == Approx(2 * 2 * 4 * reach));
    CHECK(c.at("F32 32x64 exact") == Approx(2 * 4 * reach));
  }
}

TEST_CASE("estimate --device cpu: the measured decode speed in text and JSON, only for the engine on the CPU", "[estimate][speed-probe][cli]") {
  const std::string llama = test::testdata("models/llama");
  const auto t = test::run_cli({"estimate", llama, "--device", "cpu"});
  REQUIRE(t.exit_code == 0);
  CHECK_THAT(t.out, Catch::Contains("decode on this CPU at batch 1, measured: at most "));
  const auto j = json::parse(test::run_cli({"estimate", llama, "--device", "cpu", "--json"}).out).at("cpu_decode_probe");
  // tok/s from the measured times: batch / sum(matrices x seconds per matrix).
  double step = 0;
  for (const auto& x : j.at("types")) {
    CHECK(x.at("exact_seconds").get<double>() > 0);
    CHECK(x.at("fast_math_seconds") == x.at("exact_seconds"));  // F32: no fast path
    CHECK_FALSE(x.at("fast_math_path").get<bool>());
    step += x.at("matrices_per_step").get<double>() * x.at("exact_seconds").get<double>();
  }
  CHECK(j.at("exact_tokens_per_s").get<double>() == Approx(1 / step));
  CHECK(j.at("fast_math_tokens_per_s") == j.at("exact_tokens_per_s"));
  // Not the engine on this CPU, or asked not to: no probe.
  for (std::vector<std::string> args : {std::vector<std::string>{"--device", "cpu", "--no-probe"}, {"--vram", "1G"},
                                        {"--device", "cpu", "--runtime", "llama.cpp"}, {"--device", "cpu", "--mode", "lora"}}) {
    args.insert(args.begin(), {"estimate", llama, "--json"});
    INFO(args.back());
    const auto x = test::run_cli(args);
    REQUIRE(x.exit_code == 0);
    CHECK(json::parse(x.out).at("cpu_decode_probe").is_null());
  }
  CHECK_THAT(test::run_cli({"estimate", llama, "--device", "cpu", "--no-probe"}).out, !Catch::Contains("decode on this CPU"));
}

TEST_CASE("speed probe: K-quants timed both ways, types the dense matmul cannot read listed apart", "[engine][speed-probe]") {
  using namespace nunchaku::engine;
  // Q4_K twice: as a dense matrix, and as routed experts (exact under --fast-math too).
  const ProbeClass classes[] = {{DType::Q4_K, 512, 256, 2},    {DType::F32, 64, 64, 3.5},        {DType::MXFP4, 128, 64, 1},
                                {DType::Q8_0, 64, 96, 0},      {DType::Q4_K, 256, 256, 1.5, true}};
  const SpeedProbe p = probe_decode(classes, 2, 2);
  REQUIRE(p.rates.size() == 3);  // Q8_0: none per step, left out
  REQUIRE(p.skipped.size() == 1);
  CHECK(p.skipped[0].dtype == DType::MXFP4);
  CHECK(p.threads == 2);
  CHECK(p.batch == 2);
  CHECK(p.fast_path == (fast_math_path(DType::Q4_K, 256) == FastPath::Q8K));
  double exact = 0, fast = 0;
  for (const ProbeRate& r : p.rates) {
    CHECK(r.exact > 0);
    if (r.of.dtype == DType::F32 || r.of.exact_only) {
      CHECK(r.fast == r.exact);
      CHECK_FALSE(r.fast_path);
    }
    exact += r.of.count * r.exact, fast += r.of.count * r.fast;
  }
  CHECK(p.exact_tok_s == Approx(2 / exact));
  CHECK(p.fast_tok_s == Approx(2 / fast));
  // The synthetic weights: this step's own bytes when the cache holds them (timed from the
  // cache, as the model would be), at least 1 MiB: Q4_K 2 x 512 rows x 144 B + 1.5 x 256 rows
  // x 144 B + F32 3.5 x 64 x 256 B + MXFP4 128 rows x 34 B, far under 1 MiB.
  CHECK(p.buffer_bytes == 1 << 20);
}
