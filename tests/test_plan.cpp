// plan: the balanced/sequential planner on hand-built costs with hand-computed partitions,
// --compat accelerate against maps made by accelerate itself (scripts/make_golden_plan.py),
// the exports, and the CLI (plan -> load round trip, exit 3).
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/thread_memory.hpp"
#include "format/open.hpp"
#include "memory/plan.hpp"
#include "memory/plan_accelerate.hpp"
#include "memory/plan_export.hpp"
#include "model/model.hpp"
#include "tests/helpers.hpp"

using namespace nunchaku;
using nlohmann::json;

namespace {

const Device kCpu{Device::Kind::Cpu, 0};
const Device kDisk{Device::Kind::Disk, 0};
Device gpu(int i) { return Device{Device::Kind::Cuda, i}; }

// emb 5 B | 4 layers of 10 B (KV 1 B each) | norm 1 B | head 5 B; activations 2, logits 3,
// one overhead of 4 B per GPU in use.
Estimate toy() {
  Estimate e;
  e.spec.num_layers = 4;
  e.workload.mode = Mode::Infer;
  e.runtime = Runtime::Transformers;  // disk modules as mmap views (no stream slots)
  e.modules.push_back({"emb", ModuleKind::Embedding, -1, 5, 5, 0, 0, 0});
  for (int i = 0; i < 4; ++i) e.modules.push_back({"L" + std::to_string(i), ModuleKind::Layer, i, 10, 10, 1, 0, 0});
  e.modules.push_back({"norm", ModuleKind::FinalNorm, -1, 1, 1, 0, 0, 0});
  e.modules.push_back({"head", ModuleKind::Head, -1, 5, 5, 0, 0, 0});
  e.activation_bytes = 2;
  e.logits_bytes = 3;
  e.gpu.push_back({"cuda_context", 4, "", true});
  return e;
}

PlanRequest req(std::vector<uint64_t> vram, uint64_t cpu = 100, Strategy s = Strategy::Balanced) {
  PlanRequest r;
  r.vram = std::move(vram);
  r.cpu_ram = cpu;
  r.strategy = s;
  return r;
}

std::vector<Device> devices_of(const DevicePlan& p) { return p.module_device; }

std::string dev_str(const json& v) { return v.is_number() ? std::to_string(v.get<int>()) : v.get<std::string>(); }
std::string dev_str(const Device& d) {
  return d.kind == Device::Kind::Cuda ? std::to_string(d.index) : d.kind == Device::Kind::Cpu ? "cpu" : "disk";
}

}  // namespace

TEST_CASE("plan: sequential fills cuda:0 first, balanced evens the load (hand-computed)", "[plan]") {
  const Estimate e = toy();
  // Caps 60, 60. Sequential: cuda:0 takes emb..norm = 46 weights + 4 KV + 2 act + 4 overhead = 56;
  // adding the head would make 64 (+5 weights, +3 logits). cuda:1 gets the head: 5 + 3 + 4 = 12.
  DevicePlan s = make_plan(e, req({60, 60}, 100, Strategy::Sequential));
  REQUIRE(s.fits);
  CHECK(devices_of(s) == std::vector<Device>{gpu(0), gpu(0), gpu(0), gpu(0), gpu(0), gpu(0), gpu(1)});
  CHECK(s.devices[0].total() == 56);
  CHECK(s.devices[1].total() == 12);
  // Balanced: the split after L1 gives 33 | 37 (max 37); after L0 48 on cuda:1, after L2 44 on cuda:0.
  DevicePlan b = make_plan(e, req({60, 60}));
  REQUIRE(b.fits);
  CHECK(devices_of(b) == std::vector<Device>{gpu(0), gpu(0), gpu(0), gpu(1), gpu(1), gpu(1), gpu(1)});
  CHECK(b.devices[0].total() == 33);
  CHECK(b.devices[1].total() == 37);
  CHECK(b.devices[1].logits == 3);
  CHECK(b.devices[0].layers == 2);
  CHECK(b.devices[1].first_layer == 2);
  CHECK(b.devices[1].last_layer == 3);
}

TEST_CASE("plan: most layers on the GPUs first, the rest on the CPU, then the disk", "[plan]") {
  const Estimate e = toy();
  // Caps 30, 30: cuda:0 holds emb+L0 (22; +L1 = 33), cuda:1 holds L1+L2 (28; +L3 = 39).
  DevicePlan p = make_plan(e, req({30, 30}));
  REQUIRE(p.fits);
  CHECK(devices_of(p) == std::vector<Device>{gpu(0), gpu(0), gpu(1), gpu(1), kCpu, kCpu, kCpu});
  // The CPU runs L3: 16 weights + 1 KV + 2 activations + 3 logits, no CUDA overhead.
  CHECK(p.devices[2].total() == 22);
  CHECK(p.gpu_layers() == 3);

  // The CPU short by 1 byte: no fit without disk, and the message says what is short.
  DevicePlan shortp = make_plan(e, req({30, 30}, 21));
  CHECK_FALSE(shortp.fits);
  CHECK_THAT(shortp.shortfall, Catch::Contains("cpu needs"));
  // With --disk the tail goes to disk: the head's 5 B weights leave host memory (its logits stay).
  PlanRequest r = req({30, 30}, 21);
  r.allow_disk = true;
  DevicePlan d = make_plan(e, r);
  REQUIRE(d.fits);
  CHECK(d.module_device.back() == kDisk);
  CHECK(d.devices[2].total() == 17);
}

TEST_CASE("plan: min VRAM per GPU is the best contiguous split (hand-computed)", "[plan]") {
  const Estimate e = toy();
  CHECK(min_vram(e, 1) == 64u);  // everything: 51 weights + 4 KV + 2 + 3 + 4
  CHECK(min_vram(e, 2) == 37u);  // split after L1: max(33, 37)
  DevicePlan p = make_plan(e, req({37, 37}));
  CHECK(p.fits);
  CHECK(p.gpu_layers() == 4);
  DevicePlan q = make_plan(e, req({36, 36}));
  CHECK(q.module_device.back() == kCpu);  // the head no longer fits
}

TEST_CASE("plan: min VRAM of a runtime that takes a share of each GPU is the GPU's size, not the share", "[plan]") {
  // vLLM-like: half of each GPU plus 3 B made before its snapshot (--gpu-memory-utilization):
  // 64 B on one GPU need floor(D / 2) + 3 >= 64, D = 122; two GPUs need 37 each, D = 68.
  Estimate e = toy();
  e.usable_fraction = 0.5;
  e.outside_budget = 3;
  CHECK(min_vram(e, 1) == 122u);
  CHECK(min_vram(e, 2) == 68u);
  CHECK(make_plan(e, req({68, 68})).gpu_layers() == 4);
  CHECK(make_plan(e, req({67, 67})).module_device.back() == kCpu);
}

TEST_CASE("plan: streamed offload charges cuda:0 a double buffer and the offloaded KV", "[plan]") {
  const Estimate e = toy();
  PlanRequest r = req({100}, 100);
  r.offload_exec = OffloadExec::Gpu;
  DevicePlan p = charge_plan(e, r, {gpu(0), gpu(0), kCpu, kCpu, kCpu, kCpu, kCpu});
  // cuda:0: weights 15, KV of all 4 layers 4, activations 2, logits 3 (it runs the head),
  // overhead 4, staging 2 × 10 (largest offloaded module).
  CHECK(p.devices[0].staging == 20);
  CHECK(p.devices[0].total() == 15 + 4 + 2 + 3 + 4 + 20);
  CHECK(p.devices[1].total() == 36);  // the CPU only stores weights
}

TEST_CASE("plan: llama.cpp counts the output layer once every layer is on a GPU", "[plan]") {
  const Estimate e = toy();
  DevicePlan all = make_plan(e, req({60, 60}));
  auto a = llama_cpp_args(all, e);
  CHECK(a.n_gpu_layers == 5);
  CHECK(a.tensor_split == std::vector<size_t>{2, 2});
  DevicePlan part = make_plan(e, req({30, 30}));
  auto b = llama_cpp_args(part, e);
  CHECK(b.n_gpu_layers == 3);
  CHECK_THAT(b.command, Catch::StartsWith("-ngl 3 --tensor-split 1,2"));
}

TEST_CASE("accelerate compat: its own test case (64/72/100 B over {0: 200, 1: 200})", "[plan]") {
  const json g = test::read_json(test::testdata("golden/plan_accelerate.json"))["modules_case"];
  TorchTree t;
  t.nodes.push_back(TorchNode{});
  size_t l1 = t.child(0, "linear1"), bn = t.child(0, "batchnorm"), l2 = t.child(0, "linear2");
  t.add(l1, "weight", true, 12 * 4), t.add(l1, "bias", true, 4 * 4);
  t.add(bn, "weight", true, 16), t.add(bn, "bias", true, 16);
  t.add(bn, "running_mean", true, 16, true), t.add(bn, "running_var", true, 16, true), t.add(bn, "num_batches_tracked", true, 8, true);
  t.add(l2, "weight", true, 20 * 4), t.add(l2, "bias", true, 5 * 4);
  CHECK(g["sizes"]["linear1"] == 64);
  CHECK(g["sizes"]["batchnorm"] == 72);
  CHECK(g["sizes"]["linear2"] == 100);
  auto m = infer_auto_device_map(t, {{gpu(0), 200}, {gpu(1), 200}});
  std::map<std::string, std::string> got;
  for (const auto& [k, d] : m) got[k] = dev_str(d);
  std::map<std::string, std::string> want;
  for (const auto& [k, v] : g["device_map"].items()) want[k] = dev_str(v);
  CHECK(got == want);
  CHECK(got == std::map<std::string, std::string>{{"linear1", "0"}, {"batchnorm", "1"}, {"linear2", "1"}});
}

TEST_CASE("accelerate compat: maps equal accelerate's on the fixtures", "[plan]") {
  const json g = test::read_json(test::testdata("golden/plan_accelerate.json"));
  int compared = 0;
  for (const auto& [name, model] : g["models"].items()) {
    Checkpoint ck = open_checkpoint(test::testdata(name));
    ModelLayout layout = describe_model(ck);
    TorchTree tree = torch_tree(ck, layout, std::nullopt);
    uint64_t total = 0;
    for (const auto& n : tree.nodes)
      if (n.tensor) total += n.bytes;
    INFO(name);
    CHECK(total == model["total_bytes"].get<uint64_t>());
    for (const auto& c : model["cases"]) {
      std::vector<std::pair<Device, uint64_t>> mm;
      for (int i = 0; c["max_memory"].contains(std::to_string(i)); ++i) mm.push_back({gpu(i), c["max_memory"][std::to_string(i)]});
      if (c["max_memory"].contains("cpu")) mm.push_back({kCpu, c["max_memory"]["cpu"]});
      std::map<std::string, std::string> got, want;
      for (const auto& [k, d] : infer_auto_device_map(tree, mm)) got[k] = dev_str(d);
      for (const auto& [k, v] : c["device_map"].items()) want[k] = dev_str(v);
      INFO(c["label"].get<std::string>());
      CHECK(got == want);
      ++compared;
    }
  }
  CHECK(compared >= 80);
}

TEST_CASE("plan CLI: json plan loads, accelerate map covers every module, exit 3 when short", "[plan][cli]") {
  test::TempDir dir;
  const std::string plan = dir.file("plan.json");
  auto r = test::run_cli({"plan", test::testdata("models/llama"), "--format", "json", "-o", plan, "--context", "64"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("runs on the CPU"));
  Placement p = read_plan_file(plan);
  Checkpoint ck = open_checkpoint(test::testdata("models/llama"));
  ModelLayout layout = describe_model(ck);
  check_placement(p, layout);  // throws when a module is missing or unknown
  auto l = test::run_cli({"load", test::testdata("models/llama"), "--plan", plan, "--verify"});
  CHECK(l.exit_code == 0);

  auto a = test::run_cli({"plan", test::testdata("models/qwen2"), "--vram", "600M", "--format", "accelerate"});
  REQUIRE(a.exit_code == 0);
  json m = json::parse(a.out);
  Checkpoint qck = open_checkpoint(test::testdata("models/qwen2"));
  for (const auto& mod : describe_model(qck).modules) CHECK(m.contains(mod.name));
  CHECK(m.contains("lm_head"));  // tied to the embedding: not in the file, but from_pretrained maps it
  CHECK(m["lm_head"] == m["model.embed_tokens"]);

  auto s = test::run_cli({"plan", test::testdata("models/llama"), "--vram", "1M", "--cpu-ram", "1K"});
  CHECK(s.exit_code == 3);
  CHECK_THAT(s.out, Catch::Contains("does NOT fit"));
  auto bad = test::run_cli({"plan", test::testdata("models/llama"), "--format", "yaml"});
  CHECK(bad.exit_code == 2);
  auto nodir = test::run_cli({"plan", test::testdata("models/llama"), "--format", "json", "-o", dir.file("no/such/dir/p.json")});
  CHECK(nodir.exit_code == 2);
}

TEST_CASE("load --cpu-ram plans with the planner: the tail stays on disk, KV and activations reserved", "[plan][cli]") {
  // The llama fixture at its default context (256), charged as nunchaku's engine runs it:
  // weights 427,264 B (embedding 65,536, layers 147,968 each, norm 256, head 65,536) + run
  // state: KV 131,072 + activations 659,464 + logits 1,280 + scratch 1,024 × threads + the
  // kernels' thread buffers X = (threads − 1) × static TLS (f32 weights: no GEMM panel).
  // All on the CPU: 1,219,080 + 1,024·T + X. With the layers, norm and head on disk the CPU
  // keeps the embedding and two stream slots of the largest disk module:
  // 65,536 + 2 × 147,968 + 791,816 + 1,024·T + X = 1,153,288 + 1,024·T + X, which fits
  // between the two.
  const uint64_t T = std::max(1u, std::thread::hardware_concurrency()), X = (T - 1) * static_tls_bytes();
  const auto bytes = [](uint64_t b) { return std::to_string(b) + "B"; };
  auto r = test::run_cli({"load", test::testdata("models/llama"), "--cpu-ram", bytes(1186000 + 1024 * T + X), "--json"});
  REQUIRE(r.exit_code == 0);
  json j = json::parse(r.out);
  CHECK(j["device_bytes"]["cpu"] == 65536);
  CHECK(j["device_bytes"]["disk"] == 427264 - 65536);
  std::map<std::string, std::string> where;
  for (const auto& m : j["modules"]) where[m["name"]] = m["device"];
  CHECK(where["model.embed_tokens"] == "cpu");
  CHECK(where["lm_head"] == "disk");
  CHECK(where["model.layers.0"] == "disk");
  // Even with every module on disk, run state + stream slots need 1,085,704 + 1,024·T + X.
  auto s = test::run_cli({"load", test::testdata("models/llama"), "--cpu-ram", bytes(1085000 + 1024 * T + X)});
  CHECK(s.exit_code == 3);
  CHECK_THAT(s.err, Catch::Contains("cpu needs"));
}

TEST_CASE("plan: nunchaku charges the CPU two stream slots for disk modules", "[plan]") {
  Estimate e = toy();
  e.runtime = Runtime::Nunchaku;
  PlanRequest r = req({30, 30}, 100);
  r.allow_disk = true;
  DevicePlan p = charge_plan(e, r, {gpu(0), gpu(0), gpu(1), gpu(1), kCpu, kCpu, kDisk});
  CHECK(p.devices[2].staging == 2 * 5);  // the head (5 B) is the largest disk module
  CHECK(p.devices[2].total() == 17 + 2 * 5);
  e.runtime = Runtime::LlamaCpp;  // mmap views, no slots
  CHECK(charge_plan(e, r, {gpu(0), gpu(0), gpu(1), gpu(1), kCpu, kCpu, kDisk}).devices[2].staging == 0);
}

TEST_CASE("plan CLI: runtimes of the exports, clamped context, --gpus, no KV when training", "[plan][cli]") {
  const std::string model = test::testdata("models/llama");  // max_position_embeddings 256
  auto v = test::run_cli({"plan", model, "--vram", "1G", "--format", "vllm", "--context", "1000"});
  REQUIRE(v.exit_code == 0);
  CHECK_THAT(v.out, Catch::Contains("--max-model-len 256"));
  CHECK_THAT(v.out, Catch::Contains("--max-num-batched-tokens 8192 --max-num-seqs 256"));  // the profile run estimated
  CHECK_THAT(v.err, Catch::Contains("clamped from 1000"));
  auto l = test::run_cli({"plan", model, "--vram", "1G", "--format", "llama.cpp", "--context", "1000", "--batch", "2"});
  REQUIRE(l.exit_code == 0);
  CHECK_THAT(l.out, Catch::Contains("-c 512 -np 2"));  // 2 slots of the clamped 256
  CHECK_THAT(l.err, Catch::Contains("clamped from 1000"));
  CHECK(test::run_cli({"plan", model, "--vram", "1G", "--format", "vllm", "--runtime", "llama.cpp"}).exit_code == 2);
  CHECK(test::run_cli({"plan", model, "--vram", "1G", "--runtime", "all"}).exit_code == 2);
  // One --vram size and --gpus 2: two GPUs planned.
  auto g = json::parse(test::run_cli({"plan", model, "--vram", "1G", "--gpus", "2", "--format", "json"}).out);
  std::vector<std::string> devs;
  for (const auto& d : g["devices"]) devs.push_back(d["device"]);
  CHECK(std::count(devs.begin(), devs.end(), "cuda:1") == 1);
  // The deepspeed export says which ZeRO setting fits, not where layers would go.
  auto ds = test::run_cli({"plan", model, "--vram", "1G", "--mode", "train", "--format", "deepspeed"});
  REQUIRE(ds.exit_code == 0);
  CHECK(json::parse(ds.out)["zero_optimization"]["stage"] == 0);  // 538.5 MiB of 1 GiB: no partitioning needed
  CHECK_THAT(ds.err, Catch::Contains("fits with ZeRO-0 offload none"));
  CHECK_THAT(ds.err, !Catch::Contains("layers on"));
  auto small = test::run_cli({"plan", model, "--vram", "100K", "--mode", "train", "--format", "deepspeed"});
  CHECK(small.exit_code == 3);  // the 500 MiB CUDA context alone is more
  CHECK_THAT(small.err, Catch::Contains("does NOT fit: no ZeRO stage or offload fits --vram"));
  // Training keeps no KV cache on any device.
  auto t = json::parse(test::run_cli({"plan", model, "--vram", "1G,1G", "--mode", "train", "--format", "json"}).out);
  for (const auto& d : t["devices"]) CHECK(d["kv_cache_bytes"] == 0);
}

TEST_CASE("plan: exports the target cannot run are refused with the reason", "[plan][cli]") {
  const std::string model = test::testdata("models/llama");
  // accelerate places a transformers checkpoint's modules; a GGUF's blk.N names are not those.
  auto a = test::run_cli({"plan", test::testdata("models/llama-gguf/model.gguf"), "--vram", "1G", "--format", "accelerate"});
  CHECK(a.exit_code == 2);
  CHECK(a.out.empty());
  CHECK_THAT(a.err, Catch::Contains("is a GGUF file") && Catch::Contains("--format llama.cpp runs this file"));
  // The way the hint gives, typed: converted to HF names, the same model exports.
  test::TempDir dir;
  const std::string hf = dir.file("hf");
  REQUIRE(test::run_cli({"convert", test::testdata("models/llama-gguf/model.gguf"), hf, "--names", "hf"}).exit_code == 0);
  auto converted = test::run_cli({"plan", hf, "--vram", "1G", "--format", "accelerate"});
  REQUIRE(converted.exit_code == 0);
  CHECK(json::parse(converted.out).contains("model.layers.0"));
  // vLLM has no disk tier.
  auto v = test::run_cli({"plan", model, "--vram", "1G", "--disk", "--format", "vllm"});
  CHECK(v.exit_code == 2);
  CHECK(v.out.empty());
  CHECK_THAT(v.err, Catch::Contains("--format vllm cannot use --disk: vLLM has no disk tier"));
  // deepspeed without training: the message names the flag that was typed, not a --runtime.
  auto d = test::run_cli({"plan", model, "--vram", "1G", "--format", "deepspeed"});
  CHECK(d.exit_code == 2);
  CHECK_THAT(d.err, Catch::Contains("--format deepspeed writes a DeepSpeed training config") && Catch::Contains("--mode train"));
  CHECK_THAT(d.err, !Catch::Contains("--runtime"));
}

TEST_CASE("plan --format vllm: more CPU offload than the host memory is refused, never exported", "[plan][cli]") {
  // Llama-2-7B in F16 (12.55 GiB of weights) on one 8 GiB GPU: vLLM must offload > 5 GiB of weights
  // to host memory, which 4 GiB cannot hold and 64 GiB can.
  test::TempDir d;
  test::write_sparse_llama(d.path.string(), test::testdata("models/llama2-7b-config/config.json"));
  auto small = test::run_cli({"plan", d.path.string(), "--vram", "8G", "--cpu-ram", "4G", "--format", "vllm"});
  CHECK(small.exit_code == 3);
  CHECK(small.out.empty());
  CHECK_THAT(small.err, Catch::Contains("--format vllm: vLLM would need --cpu-offload-gb") &&
                            Catch::Contains("more than --cpu-ram 4.00 GiB (vLLM has no disk tier)"));
  auto big = test::run_cli({"plan", d.path.string(), "--vram", "8G", "--cpu-ram", "64G", "--format", "vllm"});
  CHECK(big.exit_code == 0);
  CHECK_THAT(big.out, Catch::Contains("--cpu-offload-gb"));
  // Its fixes never suggest --disk, which the vLLM export refuses.
  CHECK_THAT(big.err, !Catch::Contains("--disk"));
}
