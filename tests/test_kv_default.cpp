// The engine's KV cache dtype without --kv-dtype (issue 38 item 3): the model's 16-bit
// dtype (f16, the engine's one 16-bit KV type) for a 16-bit or quantized model, as llama.cpp
// and transformers keep it; f32 for an fp32 model. run/bench and estimate's nunchaku runtime
// take the same default (memory/engine_memory.hpp engine_kv_default).
#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/helpers.hpp"

using nlohmann::json;
using namespace nunchaku;

namespace {

json estimate_cpu(const std::string& model, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a = {"estimate", model, "--device", "cpu", "--context", "64", "--json"};
  a.insert(a.end(), extra.begin(), extra.end());
  auto r = test::run_cli(a);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out);
}

// The dtype bench ran with, from its JSONL rows (one engine for every row).
std::string bench_kv(const std::string& model, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a = {"bench", model, "-p", "4", "-n", "2", "-r", "1", "-o", "jsonl"};
  a.insert(a.end(), extra.begin(), extra.end());
  auto r = test::run_cli(a);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::istringstream in(r.out);
  std::string line, kv;
  while (std::getline(in, line)) {
    const std::string k = json::parse(line).at("kv_dtype");
    if (!kv.empty()) CHECK(k == kv);
    kv = k;
  }
  return kv;
}

}  // namespace

TEST_CASE("kv default: f16 for 16-bit and quantized models, f32 for fp32 ones, in run and estimate alike", "[estimate][run][kv]") {
  // llama-small: 2 layers, 2 KV heads of 8: K and V are 2 x 2 x 8 = 32 values per layer and
  // position, 64 per position, 64 positions (--context 64), one sequence.
  const uint64_t values = 2 * 2 * 2 * 8 * 64;
  struct Model {
    std::string path, kv;
  };
  const Model models[] = {
      {test::testdata("engine/llama-small-bf16"), "f16"},
      {test::testdata("engine/llama-small-f16"), "f16"},
      {test::testdata("engine/llama-small-gguf/llama-small-q8_0.gguf"), "f16"},
      {test::testdata("engine/llama-small"), "f32"},
      {test::testdata("engine/llama-small-gguf/llama-small-f32.gguf"), "f32"},
  };
  for (const Model& m : models) {
    INFO(m.path);
    const json e = estimate_cpu(m.path);
    CHECK(e["workload"]["kv_dtype"] == (m.kv == "f16" ? "F16" : "F32"));
    CHECK(e["component_bytes"]["kv_cache"] == values * (m.kv == "f16" ? 2 : 4));
    CHECK(bench_kv(m.path) == m.kv);
  }
  // --kv-dtype still decides, both ways.
  CHECK(bench_kv(test::testdata("engine/llama-small-bf16"), {"--kv-dtype", "f32"}) == "f32");
  CHECK(estimate_cpu(test::testdata("engine/llama-small-bf16"), {"--kv-dtype", "f32"})["component_bytes"]["kv_cache"] == values * 4);
  CHECK(bench_kv(test::testdata("engine/llama-small"), {"--kv-dtype", "f16"}) == "f16");
  // estimate offers an f16 KV cache as a fix only where it is not already the default.
  auto fixes = [](const std::string& model, const std::string& batch) {
    auto r = test::run_cli({"estimate", model, "--runtime", "nunchaku", "--context", "128", "--batch", batch, "--vram", "640M", "--json"});
    REQUIRE(r.exit_code == 3);
    const json doc = json::parse(r.out);  // kept: a range-for over parse(...)["fixes"] would read a dead temporary
    std::string all;
    for (const auto& f : doc["fixes"]) all += f["flags"].get<std::string>() + ";";
    return all;
  };
  CHECK(fixes(test::testdata("engine/llama-small"), "4096").find("--kv-dtype f16") != std::string::npos);
  CHECK(fixes(test::testdata("engine/llama-small-bf16"), "8192").find("--kv-dtype") == std::string::npos);
}
