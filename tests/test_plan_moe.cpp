// Tensor-granular MoE plans: attention, norms and router of every layer on the GPU, routed
// experts on the CPU, exported in llama.cpp's own terms (--n-cpu-moe, --cpu-moe, -ot).
// Expectations are hand-computed from the published Qwen3-30B-A3B config (testdata/arch):
// each layer's routed experts are 128 × (gate, up, down) of 768 × 2048 in bf16.
#include <cmath>
#include <fstream>
#include <regex>
#include <set>
#include <string>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "core/units.hpp"
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

namespace {

// vLLM's UVA offloader (vllm/model_executor/offloader/uva.py at 00593fa7a4832bdabac6fcd06c1710d13c462fbf)
// walks each decoder layer's parameters in order and moves every one whose name has a
// --cpu-offload-params segment while fewer than int(cpu_offload_gb * 2^30) bytes are moved.
// A Qwen3-MoE layer's FusedMoE holds w13_weight (gate and up: 2/3 of its experts) then
// w2_weight (1/3). Returns the parameters moved, counted in thirds of a layer's experts.
int uva_walk(double cpu_offload_gb, uint64_t layer_experts, int layers) {
  const uint64_t max = static_cast<uint64_t>(cpu_offload_gb * double(1ull << 30));
  uint64_t moved = 0;
  int thirds = 0;
  for (int l = 0; l < layers; ++l)
    for (uint64_t part : {layer_experts / 3 * 2, layer_experts / 3}) {
      if (moved >= max) return thirds;
      moved += part;
      thirds += part == layer_experts / 3 ? 1 : 2;
    }
  return thirds;
}

// What the vLLM estimate is short of the budget per GPU (estimate --runtime vllm, hand-checked
// there): its total less its budget.
uint64_t vllm_short(const std::string& dir, const std::string& vram) {
  auto r = test::run_cli({"estimate", dir, "--runtime", "vllm", "--vram", vram, "--context", "4096", "--json"});
  const json e = json::parse(r.out);
  return e["total_bytes"].get<uint64_t>() - e["verdict"]["budget_bytes"].get<uint64_t>();
}

}  // namespace

TEST_CASE("MoE plan --format vllm: the first layers' routed experts, named by --cpu-offload-params experts", "[plan][moe][vllm]") {
  test::TempDir tmp;
  const std::string dir = qwen3_moe(tmp);
  const uint64_t short_by = vllm_short(dir, "40G");
  REQUIRE(short_by > 0);
  const uint64_t k = (short_by + kExpertBytesPerLayer - 1) / kExpertBytesPerLayer;  // whole layers' experts
  REQUIRE(k < 48);
  auto r = test::run_cli({"plan", dir, "--vram", "40G", "--context", "4096", "--cpu-ram", "200G", "--format", "vllm"});
  REQUIRE(r.exit_code == 0);
  // Each layer's experts are 1.125 GiB in bf16: k of them, exactly.
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m, std::regex("--cpu-offload-gb ([0-9.]+) --cpu-offload-params experts\n$")));
  CHECK(std::stod(m[1]) == 1.125 * double(k));
  // vLLM's walk with that number moves layers 0..k-1's experts whole and nothing of layer k.
  CHECK(uva_walk(std::stod(m[1]), kExpertBytesPerLayer, 48) == int(3 * k));
  CHECK_THAT(r.err, Catch::Contains(fmt::format("the experts of layers 0-{} ", k - 1)) && Catch::Contains("over PCIe") &&
                        Catch::Contains("PR #34535"));
  // The plan's own expert map for vLLM's runtime moves the same layers.
  auto p = test::run_cli({"plan", dir, "--vram", "40G", "--context", "4096", "--cpu-ram", "200G", "--runtime", "vllm", "--json"});
  REQUIRE(p.exit_code == 0);
  CHECK(json::parse(p.out)["expert_map"].size() == k);
}

TEST_CASE("MoE plan --format vllm: tensor parallel offloads each GPU's share of the experts", "[plan][moe][vllm]") {
  test::TempDir tmp;
  const std::string dir = qwen3_moe(tmp);
  // Two GPUs: every layer on both (TP 2), each holding half of every expert.
  const uint64_t short_by = vllm_short(dir, "20G,20G");
  REQUIRE(short_by > 0);
  const uint64_t half = kExpertBytesPerLayer / 2, k = (short_by + half - 1) / half;
  auto r = test::run_cli({"plan", dir, "--vram", "20G,20G", "--context", "4096", "--cpu-ram", "200G", "--format", "vllm"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("--tensor-parallel-size 2 "));
  CHECK_THAT(r.out, Catch::EndsWith(fmt::format("--cpu-offload-gb {} --cpu-offload-params experts\n", 0.5625 * double(k))));
}

TEST_CASE("MoE plan --format vllm: when the experts are not enough, plain --cpu-offload-gb says so", "[plan][moe][vllm]") {
  test::TempDir tmp;
  const std::string dir = qwen3_moe(tmp);
  const uint64_t short_by = vllm_short(dir, "4G");
  REQUIRE(short_by > 48 * kExpertBytesPerLayer);  // more than every expert of the model
  auto r = test::run_cli({"plan", dir, "--vram", "4G", "--context", "4096", "--cpu-ram", "200G", "--format", "vllm"});
  REQUIRE(r.exit_code == 0);
  const double gb = std::ceil(double(short_by) / double(kGiB) * 10) / 10;  // vLLM's GiB, rounded up to 0.1
  CHECK_THAT(r.out, Catch::EndsWith(fmt::format("--cpu-offload-gb {:.1f}\n", gb)));
  CHECK_THAT(r.err, Catch::Contains("the routed experts of every layer are less than") && Catch::Contains("attention included"));
}

TEST_CASE("MoE plan --format deepspeed: says that ZeRO cannot keep the experts apart", "[plan][moe]") {
  test::TempDir tmp;
  const std::string dir = qwen3_moe(tmp);
  auto r = test::run_cli({"plan", dir, "--vram", "80G", "--mode", "lora", "--format", "deepspeed", "--cpu-ram", "400G"});
  CHECK(json::parse(r.out).contains("zero_optimization"));
  CHECK_THAT(r.err, Catch::Contains("DeepSpeed cannot keep the routed experts apart") && Catch::Contains("offload_param"));
}

TEST_CASE("MoE plan: Mixtral's accelerate map names the modules transformers 5 builds (mlp.experts, mlp.gate)", "[plan][moe]") {
  test::TempDir tmp;
  test::write_arch_fixture(std::filesystem::path(test::testdata("arch")) / "mixtral-8x7b", tmp.path.string());
  const std::string dir = tmp.path.string();
  auto r = test::run_cli({"plan", dir, "--vram", "40G", "--context", "4096", "--cpu-ram", "200G", "--format", "accelerate"});
  REQUIRE(r.exit_code == 0);
  const json map = json::parse(r.out);
  // transformers 5's conversion_mapping.py ("mixtral", huggingface/transformers at 000c33fd):
  // block_sparse_moe.gate loads as mlp.gate, block_sparse_moe.experts.*.w1/w2/w3 as the fused
  // mlp.experts.gate_up_proj and mlp.experts.down_proj.
  auto loaded_as = [](std::string n) {
    const std::regex experts("\\.block_sparse_moe\\.experts\\.\\d+\\.(w1|w2|w3)\\.weight$");
    std::smatch m;
    if (std::regex_search(n, m, experts))
      return n.substr(0, size_t(m.position(0))) + (m[1] == "w2" ? ".mlp.experts.down_proj" : ".mlp.experts.gate_up_proj");
    return std::regex_replace(n, std::regex("\\.block_sparse_moe\\.gate\\."), ".mlp.gate.");
  };
  std::ifstream f(dir + "/model.safetensors", std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string hdr(n, '\0');
  f.read(hdr.data(), static_cast<std::streamsize>(n));
  const json header = json::parse(hdr);
  size_t experts_apart = 0;
  for (const auto& [stored, _] : header.items()) {
    if (stored == "__metadata__") continue;
    const std::string name = loaded_as(stored);
    std::vector<std::string> keys;
    for (const auto& [k, v] : map.items())
      if (name == k || name.rfind(k + ".", 0) == 0) keys.push_back(k);
    INFO(stored << " loaded as " << name);
    REQUIRE(keys.size() == 1);  // as transformers' expand_device_map: one key per parameter
    if (keys[0].ends_with(".mlp.experts") && map[keys[0]] == "cpu") experts_apart += 1;
  }
  CHECK(experts_apart > 0);
  for (const auto& [k, v] : map.items()) CHECK(k.find("block_sparse_moe") == std::string::npos);
}

TEST_CASE("MoE plan with no usable GPU: the CPU holds the experts (--vram 0, or GPUs too small for any layer)",
          "[plan][moe]") {
  // nunchaku beside a GPU keeps each layer's experts in host memory apart from the layers; with
  // no layer on a GPU the CPU engine runs them in its layers, so the CPU's row holds them and
  // --cpu-ram is checked against them. Before: the CPU row showed the layers without their
  // experts (3 GiB of 57) and a 30G host "fit".
  test::TempDir tmp;
  const std::string dir = qwen3_moe(tmp);
  for (const char* vram : {"0", "100M"}) {
    INFO("--vram " << vram);
    auto r = test::run_cli({"plan", dir, "--vram", vram, "--context", "4096", "--cpu-ram", "200G", "--json"});
    REQUIRE(r.exit_code == 0);
    const json p = json::parse(r.out);
    const json& cpu = device(p, "cpu");
    CHECK(cpu["num_layers"] == 48);
    CHECK(cpu["weight_bytes"].get<uint64_t>() > 48 * kExpertBytesPerLayer);
    auto small = test::run_cli({"plan", dir, "--vram", vram, "--context", "4096", "--cpu-ram", "30G"});
    CHECK(small.exit_code == 3);
  }
}

TEST_CASE("MoE plan beside a GPU: experts that outgrow --cpu-ram are named as read from disk again", "[plan][moe]") {
  test::TempDir tmp;
  const std::string dir = qwen3_moe(tmp);
  auto est = test::run_cli({"estimate", dir, "--vram", "40G", "--context", "4096", "--json"});
  REQUIRE(est.exit_code == 0);
  const uint64_t moe = json::parse(est.out)["host_component_bytes"]["moe_weights"].get<uint64_t>();
  REQUIRE(moe > 48 * kExpertBytesPerLayer);  // every layer's routed experts, and its router
  const auto note_of = [](const json& plan) {
    for (const auto& n : plan["notes"])
      if (n.get<std::string>().find("read from disk again") != std::string::npos) return n.get<std::string>();
    return std::string();
  };
  bool named = false;
  for (const char* ram : {"20G", "200G"}) {
    INFO("--cpu-ram " << ram);
    auto r = test::run_cli({"plan", dir, "--vram", "40G", "--context", "4096", "--cpu-ram", ram, "--json"});
    REQUIRE(r.exit_code == 0);
    const json p = json::parse(r.out);
    const json& cpu = device(p, "cpu");
    const uint64_t left = cpu["budget_bytes"].get<uint64_t>() - cpu["total_bytes"].get<uint64_t>();
    const std::string note = note_of(p);
    if (moe <= left) {
      CHECK(note.empty());
      CHECK(p["decode_bound"]["bytes_per_step"]["cpu_moe_disk"] == 0);
    } else {
      CHECK(std::string(ram) == "20G");
      named = true;
      // The decode bound reads that share of the experts from disk: (moe - left) / moe of them.
      const json& b = p["decode_bound"]["bytes_per_step"];
      const double on_disk = b["cpu_moe_disk"].get<double>(), read = on_disk + b["cpu_moe"].get<double>();
      CHECK(on_disk / read == Approx(double(moe - left) / double(moe)).epsilon(1e-6));
      CHECK(note.find(fmt::format("with {} of --cpu-ram left, up to {} of them", format_bytes(left), format_bytes(moe - left))) !=
            std::string::npos);
    }
  }
  CHECK(named);
}

TEST_CASE("MoE estimate: when the weights as they are fit no offload, the answer is plan's offload with 8-bit weights",
          "[estimate][plan][moe]") {
  // Qwen3-30B-A3B in bf16 (57 GiB) fits in no split of 8G of VRAM and 24G of host memory; at
  // q8_0 (30 GiB) plan's offload fits. The answer comes first among the fixes, as plan's.
  test::TempDir tmp;
  const std::string dir = qwen3_moe(tmp);
  const std::vector<std::string> flags = {"--vram", "8G", "--cpu-ram", "24G", "--runtime", "llama.cpp", "--context", "4096"};
  std::vector<std::string> args = {"estimate", dir, "--json"};
  args.insert(args.end(), flags.begin(), flags.end());
  auto r = test::run_cli(args);
  REQUIRE(r.exit_code == 3);
  const json fix = json::parse(r.out)["fixes"].at(0);
  CHECK(fix["subcommand"] == "plan");
  CHECK(fix["flags"] == "--quant q8_0");
  CHECK(fix["verdict"]["status"] == "fits_with_offload");
  args = {"plan", dir, "--json", "--quant", "q8_0"};
  args.insert(args.end(), flags.begin(), flags.end());
  auto p = test::run_cli(args);
  REQUIRE(p.exit_code == 0);
  CHECK(json::parse(p.out)["verdict"]["text"] == fix["verdict"]["text"]);
}
