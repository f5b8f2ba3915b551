// FSDP as a training runtime (--runtime fsdp, src/memory/fsdp.hpp): each rank's sharded model
// states against what FSDP2's fully_shard itself puts on a rank under torch's fake process
// group (testdata/golden/fsdp_shards.json, scripts/make_fsdp_golden.py), the accelerate
// export against what accelerate's own code read (testdata/golden/fsdp_exports_check.json,
// scripts/check_fsdp_exports.py), and the command line around them.
#include <catch2/catch.hpp>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "format/open.hpp"
#include "memory/estimate.hpp"
#include "memory/fsdp.hpp"
#include "model/model.hpp"
#include "tests/arch_fixture.hpp"
#include "tests/helpers.hpp"
#include "tests/json_schema_check.hpp"

using namespace nunchaku;
using nlohmann::json;

namespace {

// A header-only checkpoint of a golden model in `dir`: testdata/arch/<case> (its tensors.json),
// a Llama from testdata/models/<x>-config/config.json, or the golden's own config (F16).
void write_golden_model(const json& m, const std::string& dir) {
  const std::string fixture = m["fixture"];
  if (fixture.rfind("arch/", 0) == 0) {
    test::write_arch_fixture(test::testdata(fixture), dir);
  } else if (m.contains("config")) {
    test::write_file(dir + "/config.json", m["config"].dump(1));
    test::write_sparse_llama(dir, dir + "/config.json");
  } else {
    test::write_sparse_llama(dir, test::testdata(fixture + "/config.json"));
  }
}

}  // namespace

TEST_CASE("fsdp: each rank's shards, gradients and AdamW states equal FSDP2's own (fake process group golden)",
          "[fsdp][estimate]") {
  const json g = test::read_json(test::testdata("golden/fsdp_shards.json"));
  REQUIRE(g["models"].size() >= 6);
  size_t checked = 0, padded = 0;
  for (const auto& m : g["models"]) {
    const std::string fixture = m["fixture"];
    INFO(fixture);
    test::TempDir dir;
    write_golden_model(m, dir.path.string());
    const Checkpoint ck = open_checkpoint(dir.path.string());
    const ModelLayout layout = describe_model(ck);
    const EstimateBasis basis = estimate_basis(ck, layout);
    Workload w;
    w.mode = Mode::Train;
    w.context = 1;
    w.dtype = DType::BF16;  // bf16 weights, mixed precision: accelerate upcasts the trainable ones to fp32
    w.runtime = Runtime::Fsdp;
    for (const auto& c : m["cases"]) {
      w.nodes = c["nodes"];
      w.gpus = c["gpus_per_node"];
      w.fsdp = parse_fsdp_strategy(c["strategy"].get<std::string>());
      INFO(w.nodes << " nodes x " << w.gpus << " GPUs, " << c["strategy"] << " shard over " << c["shard_ranks"]);
      const Estimate e = estimate(ck, layout, w, basis);
      CHECK(e.parameters == m["num_parameters"].get<uint64_t>());
      CHECK(fsdp_shard_ranks(e.workload) == c["shard_ranks"].get<uint64_t>());
      const json& r0 = c["rank0"];
      // Rank 0 always holds a full chunk: its local shard is the padded storage (torch pads
      // dim 0 to ceil(dim0 / S) rows on every rank), and nunchaku charges that fullest rank.
      CHECK(r0["param_bytes"] == r0["param_storage_bytes"]);
      CHECK(e.component("weights") == r0["param_bytes"].get<uint64_t>());
      CHECK(e.component("gradients") == r0["grad_bytes"].get<uint64_t>());
      CHECK(e.component("optimizer_states") == r0["adamw_state_bytes"].get<uint64_t>());
      CHECK(e.component("master_weights") == 0);
      // The last rank's shard is shorter where dim 0 does not divide (the padding).
      CHECK(c["last_rank"]["param_bytes"].get<uint64_t>() <= r0["param_bytes"].get<uint64_t>());
      padded += c["last_rank"]["param_bytes"] != r0["param_bytes"];
      // The units fully_shard made, as fsdp_units lists them (the all-gathered term's sizes).
      std::vector<std::pair<std::string, uint64_t>> ours, theirs;
      for (const auto& u : fsdp_units(e)) ours.push_back({u.name, u.parameters});
      for (const auto& u : c["units"])
        if (u["num_parameters"].get<uint64_t>() > 0) theirs.push_back({u["name"], u["num_parameters"]});
      CHECK(ours == theirs);
      ++checked;
    }
  }
  CHECK(checked >= 72);
  CHECK(padded >= 6);  // the odd model pads dim 0 at every world size
}

TEST_CASE("fsdp: the all-gathered units at their peak equal FSDP2's own tracker (FSDPMemTracker golden)", "[fsdp][estimate]") {
  // testdata/golden/fsdp_peaks.json: scripts/measure_fsdp_peak.py ran two AdamW steps of small
  // random Llamas wrapped as accelerate does, under torch's fake process group, inside torch's
  // FSDPMemTracker, and kept the largest sum of what exists only because FSDP gathers units
  // (unsharded params and grads, all-gather and reduce-scatter buffers) over its snapshots.
  const json g = test::read_json(test::testdata("golden/fsdp_peaks.json"));
  REQUIRE(g["cases"].size() >= 4);
  for (const auto& c : g["cases"]) {
    INFO(c["name"].get<std::string>() << ", measured at " << c["fsdp_transient_max_at"].get<std::string>());
    test::TempDir dir;
    const json& cfg = c["config"];
    test::write_file(dir.file("config.json"), cfg.dump(1));
    json hdr = json::object();
    uint64_t off = 0;
    for (const auto& [name, shape] : test::llama_tensors(cfg)) {
      if (name == "lm_head.weight" && cfg["tie_word_embeddings"].get<bool>()) continue;
      uint64_t n = 2;
      for (auto d : shape) n *= uint64_t(d);
      hdr[name] = {{"dtype", "BF16"}, {"shape", shape}, {"data_offsets", {off, off + n}}};
      off += n;
    }
    test::write_sparse_safetensors(dir.file("model.safetensors"), hdr, off);
    const Checkpoint ck = open_checkpoint(dir.path.string());
    const ModelLayout layout = describe_model(ck);
    Workload w;
    w.mode = Mode::Train;
    w.runtime = Runtime::Fsdp;
    w.batch = c["batch"];
    w.context = c["context"];
    w.nodes = c["nodes"];
    w.gpus = c["gpus_per_node"];
    w.fsdp = parse_fsdp_strategy(c["strategy"].get<std::string>());
    const Estimate e = estimate(ck, layout, w);
    const uint64_t ours = e.component("fsdp_unsharded"), theirs = c["fsdp_transient_max_bytes"];
    INFO("ours " << ours << " FSDPMemTracker " << theirs);
    // Equal but for a norm weight's gradient (512 B) the tracker saw outside the buffers.
    CHECK(std::llabs(int64_t(ours) - int64_t(theirs)) <= 512);
  }
}

TEST_CASE("fsdp: dim 0 padded to a multiple of the shard ranks, rank 0 holding a full chunk", "[fsdp][estimate]") {
  CHECK(fsdp_local_numel(1001 * 100, 1001, 8) == 126 * 100);  // torch.chunk: ceil(1001 / 8) rows
  CHECK(fsdp_local_numel(4096 * 4096, 4096, 16) == 256 * 4096);
  CHECK(fsdp_local_numel(5, 5, 8) == 1);  // fewer rows than ranks: one row each, 3 ranks empty
  CHECK(fsdp_local_numel(12, 0, 5) == 3);  // no shape: one flat dimension
  Workload w;
  w.gpus = 8;
  w.nodes = 4;
  CHECK(fsdp_shard_ranks(w) == 32);
  w.fsdp = FsdpStrategy::Hybrid;
  CHECK(fsdp_shard_ranks(w) == 8);
}

namespace {

std::string sparse_70b(const test::TempDir& dir) {
  test::write_sparse_llama(dir.path.string(), test::testdata("models/llama2-70b-config/config.json"));
  return dir.path.string();
}

}  // namespace

TEST_CASE("fsdp: estimate --runtime fsdp says what a rank holds, over nodes, full and hybrid", "[fsdp][cli]") {
  test::TempDir dir;
  const std::string m = sparse_70b(dir);
  const std::vector<std::string> base = {"estimate", m, "--mode", "train", "--runtime", "fsdp", "--gpus", "8", "--nodes", "2",
                                         "--vram", "80G", "--grad-checkpointing", "--context", "2048"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return test::run_cli(a);
  };
  const auto full = with({"--json"});
  INFO(full.err);
  REQUIRE(full.exit_code == 0);
  const json j = json::parse(full.out);
  CHECK(j["runtime"] == "fsdp");
  CHECK(j["topology"]["fsdp"]["strategy"] == "full");
  CHECK(j["topology"]["fsdp"]["shard_ranks"] == 16);
  CHECK(j["topology"]["fsdp"]["replicas"] == 1);
  // 68.98B parameters, none padded at 16 ranks: fp32 shards + fp32 gradients + AdamW = 16 B / 16 ranks.
  const uint64_t P = 68976648192ull;
  CHECK(j["component_bytes"]["weights"] == P * 4 / 16);
  CHECK(j["component_bytes"]["gradients"] == P * 4 / 16);
  CHECK(j["component_bytes"]["optimizer_states"] == P * 8 / 16);
  // A layer's post-backward: its parameters and gradients in fp16, the next layer's all-gather
  // buffer and the previous layer's reduce-scatter input, one layer's size each.
  const json c = test::read_json(test::testdata("models/llama2-70b-config/config.json"));
  const uint64_t h = c["hidden_size"], I = c["intermediate_size"];
  const uint64_t kv_dim = h / c["num_attention_heads"].get<uint64_t>() * c["num_key_value_heads"].get<uint64_t>();
  const uint64_t layer = 2 * h * h + 2 * kv_dim * h + 3 * h * I + 2 * h;
  CHECK(j["component_bytes"]["fsdp_unsharded"] == 4 * layer * 2);
  CHECK(j["topology"]["fsdp"]["largest_unit_num_parameters"] == layer);
  CHECK_THAT(j["verdict"]["text"].get<std::string>(), Catch::Contains("FSDP full shard over 2 nodes × 8 GPUs (16 ranks)"));
  CHECK_THAT(j["verdict"]["text"].get<std::string>(), Catch::Contains("all-gathered units"));
  CHECK(j["host_component_bytes"].empty());
  const json schema = test::read_json(std::string(NUNCHAKU_SOURCE_DIR) + "/docs/schema/estimate.json");
  CHECK(test::schema_errors(schema, j).empty());
  // Full shard crosses nodes as ZeRO-3 does: 2 gathers + a reduce-scatter, half of each on 2 nodes.
  REQUIRE(j["topology"]["network"].size() == 1);
  CHECK(j["topology"]["network"][0]["name"] == "fsdp_gather_reduce");
  CHECK(j["topology"]["network"][0]["bytes_per_step"] == 3 * P);

  // Hybrid: shards over the 8 GPUs of a node (twice the states), only the gradient all-reduce crosses.
  const auto hy = with({"--fsdp-strategy", "hybrid", "--json"});
  REQUIRE(hy.exit_code != 2);
  const json jh = json::parse(hy.out);
  CHECK(jh["topology"]["fsdp"]["shard_ranks"] == 8);
  CHECK(jh["topology"]["fsdp"]["replicas"] == 2);
  CHECK(jh["component_bytes"]["weights"] == P * 4 / 8);
  CHECK(jh["topology"]["network"][0]["name"] == "hsdp_gradient_allreduce");
  CHECK(jh["topology"]["network"][0]["bytes_per_step"] == P * 2);
  CHECK(jh["topology"]["network"][0]["crosses_nodes"] == true);
  CHECK(jh["topology"]["network"][1]["crosses_nodes"] == false);
  CHECK(test::schema_errors(schema, jh).empty());

  // CPU offload: parameters, gradients and optimizer states in host memory, per node 8 ranks' worth.
  const auto off = with({"--offload", "params", "--json"});
  REQUIRE(off.exit_code == 0);
  const json jo = json::parse(off.out);
  CHECK(jo["component_bytes"]["weights"] == 0);
  CHECK(jo["component_bytes"]["optimizer_states"] == 0);
  CHECK(jo["host_component_bytes"]["host_model_states"] == 8 * (P * 16 / 16));
  CHECK(jo["topology"]["fsdp"]["cpu_offload"] == true);

  // --explain: the formulas, what a rank holds.
  const auto ex = with({"--explain"});
  CHECK_THAT(ex.out, Catch::Contains("fsdp_unsharded"));
  CHECK_THAT(ex.out, Catch::Contains("dim 0 padded to a multiple of 16"));
  CHECK_THAT(ex.out, Catch::Contains("FSDP full shard over 2 nodes × 8 GPUs (16 ranks)"));
}

TEST_CASE("fsdp: workloads FSDP does not run are usage errors", "[fsdp][cli]") {
  const std::string m = test::testdata("models/llama");
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--runtime", "fsdp"}, "--runtime fsdp is modelled for training only"},
      {{"--mode", "train", "--runtime", "fsdp", "--offload", "optimizer"}, "--offload params"},
      {{"--mode", "train", "--runtime", "fsdp", "--fsdp-strategy", "hybrid"}, "needs --gpus 2 or more"},
      {{"--mode", "train", "--fsdp-strategy", "hybrid", "--gpus", "8"}, "--fsdp-strategy is FSDP's"},
      {{"--mode", "train", "--runtime", "fsdp", "--fsdp-strategy", "zero3"}, "unknown strategy 'zero3'"},
      {{"--mode", "train", "--runtime", "fsdp", "--device", "cpu"}, "FSDP is modelled on CUDA GPUs"},
      {{"--mode", "train", "--runtime", "fsdp", "--zero", "3"}, "--zero is DeepSpeed's"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> a = {"estimate", m};
    a.insert(a.end(), c.args.begin(), c.args.end());
    const auto r = test::run_cli(a);
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(c.says));
  }
  // --runtime all compares FSDP beside transformers and DeepSpeed on GPUs, not on the CPU.
  const auto all = test::run_cli({"estimate", m, "--mode", "train", "--runtime", "all", "--json"});
  REQUIRE(all.exit_code == 0);
  CHECK(json::parse(all.out)["runtimes"].contains("fsdp"));
  const auto cpu = test::run_cli({"estimate", m, "--mode", "train", "--runtime", "all", "--device", "cpu", "--json"});
  REQUIRE(cpu.exit_code == 0);
  CHECK_FALSE(json::parse(cpu.out)["runtimes"].contains("fsdp"));
}

TEST_CASE("fsdp: plan --runtime fsdp --json and --format fsdp on stdout", "[fsdp][cli]") {
  const std::string m = test::testdata("models/llama");
  const auto j = test::run_cli({"plan", m, "--mode", "train", "--runtime", "fsdp", "--gpus", "2", "--vram", "8G", "--json"});
  INFO(j.err);
  REQUIRE(j.exit_code == 0);
  const json plan = json::parse(j.out);
  CHECK(plan["runtime"] == "fsdp");
  const json schema = test::read_json(std::string(NUNCHAKU_SOURCE_DIR) + "/docs/schema/plan.json");
  CHECK(test::schema_errors(schema, plan).empty());
  // The YAML on stdout (one machine: no parallelism_config, the plain launch line), the words on stderr.
  const auto y = test::run_cli({"plan", m, "--mode", "train", "--format", "fsdp", "--gpus", "2", "--vram", "8G"});
  REQUIRE(y.exit_code == 0);
  CHECK_THAT(y.out, Catch::Contains("distributed_type: FSDP\n"));
  CHECK_THAT(y.out, Catch::Contains("num_processes: 2"));
  CHECK(y.out.find("parallelism_config") == std::string::npos);
  CHECK_THAT(y.err, Catch::Contains("fits with FSDP full shard; per GPU: model states"));
  CHECK(test::run_cli({"plan", m, "--format", "fsdp", "--vram", "8G"}).exit_code == 2);  // inference
  CHECK(test::run_cli({"plan", m, "--mode", "train", "--format", "fsdp", "--runtime", "deepspeed", "--vram", "8G"}).exit_code == 2);
}

TEST_CASE("fsdp: plan --format fsdp -o DIR writes what accelerate's own code read (golden)", "[fsdp][cli]") {
  // testdata/golden/fsdp_exports_check.json: scripts/check_fsdp_exports.py ran these cases and
  // fed each file to accelerate 1.16 (ClusterConfig.from_yaml_file, the launcher's parser and
  // prepare_multi_gpu_env, FullyShardedDataParallelPlugin, ParallelismConfig and its device
  // mesh under a fake process group). The files must still be those.
  const json g = test::read_json(test::testdata("golden/fsdp_exports_check.json"));
  REQUIRE(g["cases"].size() >= 4);
  test::TempDir dir;
  const std::string model = dir.file("model");
  std::filesystem::create_directories(model);
  test::write_sparse_llama(model, test::testdata("models/llama2-70b-config/config.json"));
  int k = 0;
  size_t hybrid = 0, offload = 0;
  for (const auto& c : g["cases"]) {
    const std::string out = dir.file("out" + std::to_string(k++)) + "/";
    std::vector<std::string> args;
    for (const auto& a : c["args"]) args.push_back(a == "MODEL" ? model : a == "OUT/" ? out : a.get<std::string>());
    const auto r = test::run_cli(args);
    INFO(r.out << r.err);
    CHECK(r.exit_code == c["exit_code"].get<int>());
    for (const auto& [name, text] : c["files"].items()) CHECK(test::read_text(out + name) == text.get<std::string>());
    for (const auto& v : c["verdict"]) CHECK_THAT(r.out, Catch::Contains(v.get<std::string>()));
    const json& a = c["accelerate_read"];
    const int64_t nodes = std::stoll(args[std::find(args.begin(), args.end(), "--nodes") - args.begin() + 1]);
    const int64_t gpus = std::stoll(args[std::find(args.begin(), args.end(), "--gpus") - args.begin() + 1]);
    // What accelerate read: FSDP2 over every GPU of every node, torchrun per node with G processes.
    CHECK(a["config"]["distributed_type"] == "FSDP");
    CHECK(a["config"]["num_processes"] == nodes * gpus);
    CHECK(a["config"]["num_machines"] == nodes);
    CHECK(a["launch"]["nnodes"] == nodes);
    CHECK(a["launch"]["nproc_per_node"] == gpus);
    CHECK(a["fsdp_plugin"]["fsdp_version"] == 2);
    CHECK(a["mesh"]["world_size"] == nodes * gpus);
    // The ranks accelerate's mesh shards each parameter over: those the verdict's estimate used.
    const bool is_hybrid = c["verdict"][0].get<std::string>().find("FSDP hybrid shard") != std::string::npos;
    const bool is_offload = c["verdict"][0].get<std::string>().find("CPU offload") != std::string::npos;
    CHECK(a["mesh"]["shard_ranks"] == (is_hybrid && nodes > 1 ? gpus : nodes * gpus));
    CHECK(a["fsdp_plugin"]["cpu_offload"] == (is_offload ? "CPUOffloadPolicy" : "OffloadPolicy"));
    hybrid += is_hybrid;
    offload += is_offload;
  }
  CHECK(hybrid >= 1);
  CHECK(offload >= 1);
}
