// Tensor-granular MoE plans: attention, norms and router of every layer on the GPU, routed
// experts on the CPU, exported in llama.cpp's own terms (--n-cpu-moe, --cpu-moe, -ot).
// Expectations are hand-computed from the published Qwen3-30B-A3B config (testdata/arch):
// each layer's routed experts are 128 × (gate, up, down) of 768 × 2048 in bf16.
#include <fstream>
#include <regex>
#include <set>
#include <string>

#include <catch2/catch.hpp>

#include "tests/arch_fixture.hpp"
#include "tests/helpers.hpp"

using nlohmann::json;
using namespace nunchaku;

namespace {

constexpr uint64_t kExpertBytesPerLayer = 128ull * 3 * 768 * 2048 * 2;  // bf16
constexpr uint64_t kGiB = 1ull << 30;

std::string qwen3_moe(const test::TempDir& tmp) {
  test::write_arch_fixture(std::filesystem::path(test::testdata("arch")) / "qwen3-30b-a3b", tmp.path.string());
  return tmp.path.string();
}

json plan_json(const std::string& dir, const std::string& vram) {
  auto r = test::run_cli({"plan", dir, "--vram", vram, "--runtime", "llama.cpp", "--context", "4096", "--cpu-ram", "200G", "--json"});
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out);
}

const json& device(const json& plan, const std::string& name) {
  for (const auto& d : plan["devices"])
    if (d["device"] == name) return d;
  FAIL("no device " << name);
  return plan;
}

}  // namespace

TEST_CASE("MoE plan: every layer on the GPU, experts of the first layers on the CPU (--n-cpu-moe)", "[plan][moe]") {
  test::TempDir tmp;
  const std::string dir = qwen3_moe(tmp);
  const json p = plan_json(dir, "40G");
  const json& gpu = device(p, "cuda:0");
  const json& cpu = device(p, "cpu");
  CHECK(gpu["num_layers"] == 48);  // attention never leaves the GPU
  CHECK(cpu["num_layers"] == 0);
  const uint64_t n = cpu["num_expert_layers"].get<uint64_t>();
  REQUIRE(n > 0);
  REQUIRE(n < 48);
  CHECK(cpu["weight_bytes"].get<uint64_t>() == n * kExpertBytesPerLayer);  // only routed experts
  // Its decode bound at batch 1 reads 8 of each CPU layer's 128 experts from host memory.
  CHECK(p["decode_bound"]["bytes_per_step"]["host"].get<uint64_t>() == n * kExpertBytesPerLayer / 16);
  // As llama.cpp's --n-cpu-moe N: the experts of layers 0..N-1.
  std::set<std::string> apart;
  for (auto it = p["expert_map"].begin(); it != p["expert_map"].end(); ++it) {
    CHECK(it.value() == "cpu");
    apart.insert(it.key());
  }
  CHECK(apart.size() == n);
  for (uint64_t l = 0; l < n; ++l) CHECK(apart.count("model.layers." + std::to_string(l)) == 1);
  // The GPU is used: one more layer's experts would not fit, and at least 70 % is planned.
  const uint64_t total = gpu["total_bytes"].get<uint64_t>(), budget = 40 * kGiB;
  CHECK(total <= budget);
  CHECK(total + kExpertBytesPerLayer > budget);
  CHECK(total >= budget / 10 * 7);

  auto r = test::run_cli({"plan", dir, "--vram", "40G", "--context", "4096", "--cpu-ram", "200G", "--format", "llama.cpp"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == "-ngl 49 -c 4096 --n-cpu-moe " + std::to_string(n) + " -fit off\n");
}

TEST_CASE("MoE plan: weights read per token count top_k of the routed experts", "[plan][moe]") {
  test::TempDir tmp;
  const std::string dir = qwen3_moe(tmp);
  auto r = test::run_cli({"estimate", dir, "--runtime", "llama.cpp", "--json"});
  REQUIRE(r.exit_code == 0);
  const json e = json::parse(r.out);
  uint64_t stored = 0;  // every weight as the fixture stores it (bf16)
  for (const auto& m : e["modules"]) stored += m["weight_bytes"].get<uint64_t>();
  const uint64_t experts = 48 * kExpertBytesPerLayer;
  CHECK(e["weight_bytes_per_token"].get<uint64_t>() == stored - experts + experts * 8 / 128);
}

TEST_CASE("MoE plan: experts apart on two GPUs are exported as -ot naming exactly those layers", "[plan][moe]") {
  test::TempDir tmp;
  const std::string dir = qwen3_moe(tmp);
  const json p = plan_json(dir, "20G,20G");
  std::set<int> apart;
  for (auto it = p["expert_map"].begin(); it != p["expert_map"].end(); ++it)
    apart.insert(std::stoi(it.key().substr(std::string("model.layers.").size())));
  REQUIRE(!apart.empty());
  CHECK(device(p, "cuda:0")["num_layers"].get<int>() + device(p, "cuda:1")["num_layers"].get<int>() == 48);
  auto r = test::run_cli({"plan", dir, "--vram", "20G,20G", "--context", "4096", "--cpu-ram", "200G", "--format", "llama.cpp"});
  REQUIRE(r.exit_code == 0);
  std::smatch m;
  const std::string out = r.out;
  if (out.find("--n-cpu-moe") != std::string::npos) {
    // Exact only when the experts apart are layers 0..N-1.
    REQUIRE(std::regex_search(out, m, std::regex("--n-cpu-moe (\\d+)")));
    const int n = std::stoi(m[1]);
    CHECK(static_cast<int>(apart.size()) == n);
    CHECK(*apart.rbegin() == n - 1);
  } else {
    REQUIRE(std::regex_search(out, m, std::regex("-ot \"(.*)=CPU\"")));
    // llama.cpp matches the pattern against every tensor name with regex_search.
    const std::regex ot(m[1].str());
    for (int l = 0; l < 48; ++l) {
      const bool cpu = std::regex_search("blk." + std::to_string(l) + ".ffn_up_exps.weight", ot);
      CHECK(cpu == (apart.count(l) == 1));
      CHECK_FALSE(std::regex_search("blk." + std::to_string(l) + ".attn_q.weight", ot));
    }
  }
  CHECK(out.find("-fit off") != std::string::npos);
}

TEST_CASE("MoE plan: a dense model keeps whole layers (no expert map)", "[plan][moe]") {
  test::TempDir tmp;
  test::write_arch_fixture(std::filesystem::path(test::testdata("arch")) / "llama3-8b", tmp.path.string());
  const json p = plan_json(tmp.path.string(), "8G");
  CHECK(p["expert_map"].empty());
  CHECK(device(p, "cpu")["num_layers"].get<int>() > 0);
  CHECK(device(p, "cpu")["num_expert_layers"] == 0);
}

TEST_CASE("MoE plan: the accelerate map covers every tensor once, experts apart by their own key", "[plan][moe]") {
  test::TempDir tmp;
  const std::string dir = qwen3_moe(tmp);
  auto r = test::run_cli({"plan", dir, "--vram", "40G", "--context", "4096", "--cpu-ram", "200G", "--format", "accelerate"});
  REQUIRE(r.exit_code == 0);
  const json map = json::parse(r.out);
  // The tensor names as the fixture's safetensors header holds them.
  std::ifstream f(dir + "/model.safetensors", std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string hdr(n, '\0');
  f.read(hdr.data(), static_cast<std::streamsize>(n));
  size_t experts_on_cpu = 0;
  const json header = json::parse(hdr);
  for (const auto& [name, _] : header.items()) {
    if (name == "__metadata__") continue;
    // transformers' expand_device_map: a key covers a parameter equal to it or below it.
    std::vector<std::string> keys;
    for (const auto& [k, v] : map.items())
      if (name == k || name.rfind(k + ".", 0) == 0) keys.push_back(k);
    INFO(name);
    REQUIRE(keys.size() == 1);
    const bool expert = name.find(".mlp.experts.") != std::string::npos;
    if (map[keys[0]] == "cpu") {
      CHECK(expert);
      experts_on_cpu += 1;
    }
  }
  CHECK(experts_on_cpu > 0);
}

TEST_CASE("MoE plan: --min-vram names the budget for attention on the GPU and every expert on the CPU", "[plan][moe]") {
  test::TempDir tmp;
  const std::string dir = qwen3_moe(tmp);
  auto r = test::run_cli({"plan", dir, "--min-vram", "--runtime", "llama.cpp", "--context", "4096", "--cpu-ram", "200G"});
  std::smatch m;
  const std::string all = r.out + r.err;
  REQUIRE(std::regex_search(all, m, std::regex("routed experts in host memory[^:]*: [^(]*\\((\\d+) B\\)")));
  const uint64_t b = std::stoull(m[1]);
  auto at = [&](uint64_t v) {
    return test::run_cli({"plan", dir, "--vram", std::to_string(v) + "B", "--context", "4096", "--cpu-ram", "200G", "--format", "llama.cpp"});
  };
  const auto fit = at(b);
  CHECK(fit.exit_code == 0);
  CHECK(fit.out == "-ngl 49 -c 4096 --cpu-moe -fit off\n");
  const auto below = at(b - 1);  // one byte less: some layer's attention leaves the GPU
  CHECK(below.out.find("-ngl 49") == std::string::npos);
}
