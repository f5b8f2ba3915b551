// plan's decode bound (memory/decode_bound.hpp): the bytes a decode step reads from each
// place the plan puts them, over the rates it is read at; checked by hand on a small plan,
// and on plan's own output.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "memory/decode_bound.hpp"
#include "tests/helpers.hpp"

using namespace nunchaku;

namespace {
ModuleCost module(const char* name, ModuleKind kind, uint64_t weights, uint64_t experts = 0, uint64_t kv = 0) {
  ModuleCost m;
  m.name = name;
  m.kind = kind;
  m.weight_bytes = weights;
  m.expert_bytes = experts;
  m.kv_bytes = kv;
  return m;
}
}  // namespace

TEST_CASE("decode bound: bytes per step by place and tok/s, by hand", "[plan][decode-bound]") {
  Estimate e;
  e.spec.num_experts = 8;
  e.spec.num_experts_per_tok = 2;
  e.spec.vocab_size = 1000;
  e.modules = {module("embed", ModuleKind::Embedding, 1000000), module("layers.0", ModuleKind::Layer, 10000, 8000, 500),
               module("layers.1", ModuleKind::Layer, 10000, 8000, 500), module("head", ModuleKind::Head, 1000000)};
  const Device gpu{Device::Kind::Cuda, 0}, cpu{Device::Kind::Cpu, 0};
  DevicePlan p;
  p.module_device = {gpu, gpu, gpu, gpu};
  p.expert_device = {gpu, gpu, cpu, gpu};  // layer 1's routed experts in host memory (--n-cpu-moe 1)
  Bandwidths bw;
  bw.gpu = 1e9, bw.host = 1e8, bw.pcie = 5e7, bw.disk = 1e7;
  // Batch 1: a quarter of the experts (top 2 of 8). GPU: 1 embedding row of 1000 (1000 B),
  // layer 0 2000 + 8000/4 + 500 KV, layer 1's 2000 + 500, the head 1e6 = 1008000 B; host:
  // layer 1's experts 8000/4 = 2000 B. 1008000/1e9 + 2000/1e8 = 0.001028 s.
  DecodeBound d = decode_bound(e, p, 1, bw);
  CHECK(d.gpu_bytes == 1008000);
  CHECK(d.host_bytes == 2000);
  CHECK(d.disk_bytes == 0);
  CHECK_FALSE(d.host_over_pcie);
  CHECK(d.seconds == Approx(0.001028));
  CHECK(d.tokens_per_s == Approx(1 / 0.001028));
  // Batch 4: 1 - (3/4)^4 = 0.68359375 of the experts, 4 embedding rows. GPU 4000 + 2000 +
  // 5468.75 + 500 + 2500 + 1e6 = 1014468.75; host 5468.75.
  d = decode_bound(e, p, 4, bw);
  CHECK(d.gpu_bytes == 1014468);
  CHECK(d.host_bytes == 5468);
  CHECK(d.tokens_per_s == Approx(4 / (1014468.75 / 1e9 + 5468.75 / 1e8)));
  // Offloaded modules streamed to the GPU: host bytes cross PCIe (5e7), disk at min(disk, PCIe).
  p.offload_exec = OffloadExec::Gpu;
  p.module_device = {gpu, gpu, Device{Device::Kind::Disk, 0}, gpu};
  p.expert_device.clear();
  d = decode_bound(e, p, 1, bw);
  CHECK(d.host_over_pcie);
  CHECK(d.disk_bytes == 2000 + 2000 + 500);  // layer 1 whole: its rest, a quarter of its experts, its KV
  CHECK(d.seconds == Approx((1000 + 4500 + 1000000) / 1e9 + 4500 / 1e7));
  // No head (tied embeddings): the embedding is the output projection, read whole.
  e.modules.pop_back();
  p.module_device.pop_back();
  CHECK(decode_bound(e, p, 1, bw).gpu_bytes == 1000000 + 4500);
  CHECK(routed_fraction(0, 0, 8) == 1.0);  // dense
}

TEST_CASE("plan: the decode bound in text and JSON, --bandwidth read or refused", "[plan][decode-bound][cli]") {
  const std::string mixtral = test::testdata("models/mixtral");
  const auto j = test::run_cli({"plan", mixtral, "--vram", "10G", "--json", "--bandwidth", "gpu=2TB,host=40GB"});
  REQUIRE(j.exit_code == 0);
  const nlohmann::json doc = nlohmann::json::parse(j.out);
  const auto& d = doc.at("decode_bound");
  CHECK(d.at("bandwidth_bytes_per_s").at("gpu").get<double>() == 2e12);
  CHECK(d.at("bandwidth_bytes_per_s").at("host").get<double>() == 40e9);
  CHECK(d.at("bandwidth_bytes_per_s").at("pcie").get<double>() == 25e9);  // the default stays
  // Everything on the GPU but the mixtures of experts, which nunchaku's CPU part reads in host
  // memory: tok/s = batch / (gpu bytes / 2e12 + experts' bytes / 40e9).
  CHECK(d.at("bytes_per_step").at("host").get<uint64_t>() == 0);
  const double gpu = double(d.at("bytes_per_step").at("gpu").get<uint64_t>());
  const double experts = double(d.at("bytes_per_step").at("cpu_moe").get<uint64_t>());
  CHECK(gpu > 0);
  CHECK(experts > 0);
  CHECK(d.at("tokens_per_s").get<double>() == Approx(1 / (gpu / 2e12 + experts / 40e9)).epsilon(1e-6));
  const auto t = test::run_cli({"plan", mixtral, "--vram", "10G"});
  CHECK_THAT(t.out, Catch::Contains("decode at batch 1: at most "));
  for (const char* bad : {"gpu", "gpu=0", "vram=1TB", "gpu=fast"}) {
    INFO(bad);
    const auto r = test::run_cli({"plan", mixtral, "--vram", "10G", "--bandwidth", bad});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("--bandwidth"));
  }
}

TEST_CASE("estimate: the decode bound on its own device, by hand on the llama fixture", "[estimate][decode-bound][cli]") {
  // testdata/models/llama (fp32, vocab 256, context 128 by default): one embedding row of
  // 65536/256 = 256 B, two layers of 147968 B with 65536 B of KV each, the norm 256 B and the
  // head 65536 B: 493056 B per step.
  const auto cpu = test::run_cli({"estimate", test::testdata("models/llama"), "--device", "cpu", "--json", "--bandwidth", "host=10GB"});
  REQUIRE(cpu.exit_code == 0);
  const auto d = nlohmann::json::parse(cpu.out).at("decode_bound");
  CHECK(d.at("bytes_per_step").at("host").get<uint64_t>() == 493056);
  CHECK(d.at("bytes_per_step").at("gpu").get<uint64_t>() == 0);
  CHECK(d.at("tokens_per_s").get<double>() == Approx(1e10 / 493056));
  // On a GPU that holds it, the same bytes from GPU memory; none when it does not fit.
  const auto gpu = test::run_cli({"estimate", test::testdata("models/llama"), "--vram", "1G", "--json"});
  CHECK(nlohmann::json::parse(gpu.out).at("decode_bound").at("bytes_per_step").at("gpu").get<uint64_t>() == 493056);
  const auto oom = test::run_cli({"estimate", test::testdata("models/llama"), "--vram", "100K", "--json"});
  CHECK(oom.exit_code == 3);
  CHECK(nlohmann::json::parse(oom.out).at("decode_bound").is_null());
}
