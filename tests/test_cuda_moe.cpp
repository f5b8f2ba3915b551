// Mixture-of-experts models on CUDA (KTransformers' split): attention, norms, shared experts and
// the head on cuda:0, every layer's router and routed experts on a CPU part reading host
// memory. make_engine builds the split when the ops run on a GPU and the model
// has experts; the loader keeps each layer's mixture in host memory when the placement says
// moe_on_host. Checked against transformers' goldens (testdata/engine/moe.json: logits within
// 1e-4, 32 greedy ids) as the CPU engine is. Needs a CUDA device or the emulator build
// (nunchaku_cuda_emu_tests); without either the cases report skipped.
#include <catch2/catch.hpp>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "cuda/engine_ops.hpp"
#include "memory/decode_bound.hpp"
#include "memory/estimate.hpp"
#include "memory/plan.hpp"
#include "tests/helpers.hpp"
#include "tests/test_cuda_helpers.hpp"
#include "tests/test_engine_helpers.hpp"

using namespace nunchaku;
using namespace nunchaku::engine;

namespace {

using test::GpuModel;
using test::have_gpu;

// Every module on cuda:0 but each MoE layer's mixture of experts in host memory (moe_on_host);
// `streamed_layer` >= 0: that layer's rest in host memory too, streamed to the GPU per pass.
void load(GpuModel& m, const std::string& name, bool moe_on_host, int streamed_layer) {
  test::load_on_gpu(m, test::testdata("engine/" + name), test::golden_options(), moe_on_host, streamed_layer);
}

void check_moe_on_gpu(const std::string& name, int streamed_layer) {
  if (!have_gpu()) return;
  const auto goldens = nlohmann::json::parse(std::ifstream(test::testdata("engine/moe.json")));
  GpuModel m;
  load(m, name, true, streamed_layer);
  INFO(m.engine.model->describe());
  CHECK(m.engine.backend->describe().find("cpu") != std::string::npos);
  CHECK(m.engine.backend->describe().find("experts of every layer") != std::string::npos);
  // The CPU part's run state (its activations and the experts' buffers) is host memory.
  CHECK(m.engine.backend->host_part_bytes() > 0);
  CHECK(m.engine.backend->host_part_bytes() < m.engine.model->predicted().allocated());
  test::check_against_golden(*m.engine.model, goldens.at(name));
}

}  // namespace

TEST_CASE("cuda moe: qwen2_moe with its router and experts on the CPU and its shared expert on cuda:0 matches transformers",
          "[cuda][moe]") {
  check_moe_on_gpu("qwen2_moe", -1);
  if (!have_gpu()) return;
  // Where the loader put each piece of layer 0's mixture (moe_on_host): the shared expert's
  // matrices with the layer on the GPU, its sigmoid gate vector, the router and the routed
  // experts in host memory.
  const Device kGpu{Device::Kind::Cuda, 0}, kHost{Device::Kind::Cpu, 0};
  GpuModel m;
  load(m, "qwen2_moe", true, -1);
  const std::string mlp = "model.layers.0.mlp.";
  for (const char* t : {"shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert.down_proj"}) {
    INFO(t);
    REQUIRE(m.load.store.find(mlp + t + ".weight"));
    CHECK(m.load.store.find(mlp + t + ".weight")->device == kGpu);
  }
  for (const char* t : {"shared_expert_gate", "gate", "experts.0.gate_proj", "experts.5.down_proj"}) {
    INFO(t);
    REQUIRE(m.load.store.find(mlp + t + ".weight"));
    CHECK(m.load.store.find(mlp + t + ".weight")->device == kHost);
  }
}

TEST_CASE("cuda moe: qwen3_moe with layer 1 streamed to the GPU and its experts read in host memory", "[cuda][moe]") {
  check_moe_on_gpu("qwen3_moe", 1);
}

TEST_CASE("cuda moe: mixtral and olmoe with their experts on the CPU match transformers", "[cuda][moe]") {
  check_moe_on_gpu("mixtral", 0);
  check_moe_on_gpu("olmoe", -1);
}

TEST_CASE("cuda moe: a router left in device memory is refused before the run, naming the tensor", "[cuda][moe]") {
  if (!have_gpu()) return;
  GpuModel m;
  try {
    load(m, "qwen2_moe", false, -1);  // routed experts on the host, router and shared expert on cuda:0
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == "engine.not_readable");
    CHECK(std::string(e.what()).find("cuda:0 memory") != std::string::npos);
    CHECK(e.context().tensor.find("gate") != std::string::npos);
  }
}

TEST_CASE("estimate: nunchaku on a GPU charges each mixture of experts to the host, a CPU-only plan does not",
          "[estimate][moe]") {
  const std::string path = test::testdata("engine/moe-gguf/qwen3_moe.gguf");
  const Checkpoint ck = open_checkpoint(path);
  const ModelLayout layout = describe_model(ck);
  uint64_t moe = 0, routed = 0, all = 0;  // from the tensor table's roles, independently of estimate
  for (const Module& m : layout.modules)
    for (size_t k = 0; k < m.tensors.size(); ++k) {
      const uint64_t n = ck.tensors[m.tensors[k]].nbytes;
      all += n;
      if (m.kind == ModuleKind::Layer && k < m.roles.size() && is_expert_part_role(m.roles[k])) moe += n;
      if (m.kind == ModuleKind::Layer && k < m.roles.size() && is_expert_role(m.roles[k])) routed += n;
    }
  REQUIRE(moe > 0);
  Workload w;
  w.runtime = Runtime::Nunchaku;
  w.context = 64;
  const Estimate gpu = estimate(ck, layout, w);
  auto line = [](const std::vector<Component>& cs, const std::string& name) -> uint64_t {
    for (const Component& c : cs)
      if (c.name == name) return c.bytes;
    return 0;
  };
  CHECK(line(gpu.host, "moe_weights") == moe);
  CHECK(line(gpu.gpu, "weights") == all - moe);
  // The decode bound reads the router whole, and at batch 1 top_k / E = 3 / 8
  // of the routed experts, on the CPU at the host rate; the GPU reads the rest.
  PlanRequest req;
  req.vram = {1ull << 30};
  req.cpu_ram = 1ull << 30;  // holds the mapped experts
  const DevicePlan p = make_plan(gpu, req);
  REQUIRE(p.fits);
  const Bandwidths bw;
  const DecodeBound d = decode_bound(gpu, p, 1, bw);
  CHECK(double(d.cpu_moe_bytes) == Approx(double(moe - routed) + double(routed) * 3 / 8).margin(1));
  CHECK(d.cpu_moe_disk_bytes == 0);
  CHECK(d.host_bytes == 0);
  CHECK(d.seconds == Approx(double(d.gpu_bytes) / bw.gpu + double(d.cpu_moe_bytes) / bw.host));
  // No host budget: the kernel reads every mapped expert page from the file again.
  req.cpu_ram = 0;
  const DecodeBound none = decode_bound(gpu, make_plan(gpu, req), 1, bw);
  CHECK(none.cpu_moe_bytes == 0);
  CHECK(double(none.cpu_moe_disk_bytes) == Approx(double(d.cpu_moe_bytes)).margin(1));
  CHECK(none.seconds == Approx(double(none.gpu_bytes) / bw.gpu + double(none.cpu_moe_disk_bytes) / bw.disk));
  w.no_gpu_placement = true;
  const Estimate cpu = estimate(ck, layout, w);
  CHECK(line(cpu.host, "moe_weights") == 0);
  CHECK(line(cpu.gpu, "weights") == all);
  w.no_gpu_placement = false;
  w.runtime = Runtime::LlamaCpp;  // llama.cpp's own placement: not nunchaku's split
  CHECK(line(estimate(ck, layout, w).host, "moe_weights") == 0);
}
