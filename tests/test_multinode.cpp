// Several nodes (--nodes N --gpus G): DeepSpeed's per-GPU and per-node model states against
// DeepSpeed's own estimators with num_nodes (testdata/golden/multinode_deepspeed.json, made by
// scripts/make_multinode_golden.py), and the command line around them.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "memory/estimate.hpp"
#include "memory/multinode.hpp"
#include "model/model.hpp"
#include "tests/arch_fixture.hpp"
#include "tests/helpers.hpp"
#include "tests/json_schema_check.hpp"

using namespace nunchaku;
using nlohmann::json;

namespace {

// The checkpoint index of a golden model: testdata/arch/<case>/tensors.json (name, dtype,
// shape), or a Llama-shaped one from testdata/models/<x>-config/config.json in F16.
Checkpoint golden_checkpoint(const std::string& fixture) {
  const std::string dir = test::testdata(fixture);
  std::vector<std::tuple<std::string, DType, std::vector<int64_t>>> ts;
  if (fixture.rfind("arch/", 0) == 0) {
    for (const auto& t : test::read_json(dir + "/tensors.json"))
      ts.emplace_back(t[0].get<std::string>(), *dtype_from_name(t[1].get<std::string>()), t[2].get<std::vector<int64_t>>());
  } else {
    for (auto& [name, shape] : test::llama_tensors(test::read_json(dir + "/config.json"))) ts.emplace_back(name, DType::F16, shape);
  }
  Checkpoint ck;
  ck.path = "mem";
  ck.config_path = dir + "/config.json";
  ck.files.push_back({"mem/model.safetensors", 0});
  uint64_t off = 0;
  for (const auto& [name, dt, shape] : ts) {
    TensorInfo t;
    t.name = name;
    t.dtype = dt;
    t.shape = shape;
    t.offset = off;
    t.nbytes = *dtype_nbytes(dt, t.numel());
    off += t.nbytes;
    ck.tensors.push_back(t);
  }
  ck.files[0].bytes = off;
  return ck;
}

// DeepSpeed's gpu_mem counts parameters, 16-bit gradients, fp32 master, optimizer and
// gradient copies and the gathered layer: our lines of the same.
uint64_t model_states(const Estimate& e) {
  return e.component("weights") + e.component("gradients") + e.component("master_weights") + e.component("optimizer_states") +
         e.component("zero3_gather");
}

double rel(uint64_t a, uint64_t b) { return b == 0 ? (a == 0 ? 0 : 1) : std::abs(double(a) - double(b)) / double(b); }

}  // namespace

TEST_CASE("multinode: ZeRO-2/3 per GPU and per node equal DeepSpeed's estimators with num_nodes", "[multinode][estimate]") {
  const json g = test::read_json(test::testdata("golden/multinode_deepspeed.json"));
  REQUIRE(g["models"].size() >= 4);
  size_t checked = 0;
  for (const auto& m : g["models"]) {
    const std::string fixture = m["fixture"];
    INFO(fixture);
    Checkpoint ck = golden_checkpoint(fixture);
    ModelLayout layout = describe_model(ck);
    Workload w;
    w.mode = Mode::Train;
    w.context = 1;
    w.dtype = DType::BF16;  // DeepSpeed's estimators assume 16-bit weights with AdamW
    w.runtime = Runtime::DeepSpeed;
    // Independent counts first: transformers' model built from the same config.json.
    const Estimate base = estimate(ck, layout, w);
    CHECK(base.parameters == m["total_params"].get<uint64_t>());
    CHECK(base.largest_layer_parameters == m["largest_layer_params"].get<uint64_t>());
    for (const auto& c : m["cases"]) {
      w.zero = c["stage"];
      w.nodes = c["nodes"];
      w.gpus = c["gpus_per_node"];
      w.offload = parse_offload(c["offload"].get<std::string>());
      INFO("ZeRO-" << w.zero << " " << w.nodes << " nodes x " << w.gpus << " GPUs, offload " << c["offload"]);
      const Estimate e = estimate(ck, layout, w);
      const uint64_t gpu = c["gpu"], cpu = c["cpu"];
      const uint64_t host = e.host_total;
      INFO("gpu ours " << model_states(e) << " DeepSpeed " << gpu << "; host ours " << host << " DeepSpeed " << cpu);
      CHECK(rel(model_states(e), gpu) < 0.01);  // the bound
      CHECK(rel(host, cpu) < 0.01);
      // In fact: each line floor-divided by the rank count on its own (a few bytes), host exact
      // but for DeepSpeed's float rounding of P × 18 / nodes × 1.5.
      CHECK(std::llabs(int64_t(model_states(e)) - int64_t(gpu)) <= 5);
      CHECK(std::llabs(int64_t(host) - int64_t(cpu)) <= 2);
      ++checked;
    }
  }
  CHECK(checked >= 120);
}

TEST_CASE("multinode: Llama-2-70B ZeRO-3 host memory is per node, not one node of 16", "[multinode][estimate]") {
  // The case: 16 GPUs as 2 nodes of 8 hold 11.72 GiB of host model states each
  // (DeepSpeed's figure); read as one node of 16 it was 23.44 GiB.
  Checkpoint ck = golden_checkpoint("models/llama2-70b-config");
  ModelLayout layout = describe_model(ck);
  Workload w;
  w.mode = Mode::Train;
  w.zero = 3;
  w.context = 1;
  w.gpus = 8;
  w.nodes = 2;
  const Estimate two = estimate(ck, layout, w);
  CHECK(two.host_total == 262144000ull * 4 * 8 * 3 / 2);  // 11.72 GiB
  w.gpus = 16;
  w.nodes = 1;
  const Estimate one = estimate(ck, layout, w);
  CHECK(one.host_total == 2 * two.host_total);
  CHECK(model_states(one) == model_states(two));  // 16 ranks either way
}

TEST_CASE("multinode: 70B full training over 2 x 8 x 80 GiB fits with ZeRO-3, over 1 x 8 not, and the verdict says why",
          "[multinode][cli]") {
  test::TempDir dir;
  test::write_sparse_llama(dir.path.string(), test::testdata("models/llama2-70b-config/config.json"));
  const std::vector<std::string> base = {"estimate", dir.path.string(), "--mode", "train", "--zero", "3", "--gpus", "8", "--vram", "80G",
                                         "--grad-checkpointing", "--context", "2048", "--json"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return test::run_cli(a);
  };
  const auto two = with({"--nodes", "2"});
  REQUIRE(two.exit_code == 0);
  const json j2 = json::parse(two.out);
  CHECK(j2["verdict"]["fits"] == true);
  CHECK(j2["workload"]["nodes"] == 2);
  CHECK(j2["topology"]["num_ranks"] == 16);
  CHECK(j2["topology"]["node_gpu_bytes"] == j2["total_bytes"].get<uint64_t>() * 8);
  CHECK(j2["topology"]["node_host_bytes"] == 262144000ull * 4 * 8 * 3 / 2);
  CHECK_THAT(j2["verdict"]["text"].get<std::string>(), Catch::Contains("ZeRO-3 over 2 nodes × 8 GPUs (16 ranks)"));
  const json schema = test::read_json(std::string(NUNCHAKU_SOURCE_DIR) + "/docs/schema/estimate.json");
  CHECK(test::schema_errors(schema, j2).empty());

  const auto one = with({});
  CHECK(one.exit_code == 3);
  const json j1 = json::parse(one.out);
  CHECK(j1["verdict"]["fits"] == false);
  // Why: the model states of 68.98B parameters over 8 ranks (18 B/param / 8 + the gathered layer).
  const std::string why = j1["verdict"]["text"];
  CHECK_THAT(why, Catch::Contains("per GPU: model states 145.52 GiB (ZeRO-3 over 8 GPUs)"));
  bool more_nodes = false;
  for (const auto& f : j1["fixes"]) more_nodes = more_nodes || f["flags"].get<std::string>().find("--nodes") != std::string::npos;
  CHECK(more_nodes);
}

TEST_CASE("multinode: --nodes the runtime cannot span is a usage error", "[multinode][cli]") {
  const std::string m = test::testdata("models/llama");
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--nodes", "0"}, "--nodes: 0 is out of range 1..4096"},
      {{"--nodes", "2"}, "--runtime nunchaku runs on one machine"},
      {{"--nodes", "2", "--runtime", "llama.cpp"}, "--runtime llama.cpp runs on one machine"},
      {{"--nodes", "2", "--mode", "train", "--runtime", "transformers"}, "--runtime transformers runs on one machine"},
      {{"--nodes", "2", "--mode", "train", "--device", "cpu"}, "--nodes 2 with --device cpu"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> a = {"estimate", m};
    a.insert(a.end(), c.args.begin(), c.args.end());
    const auto r = test::run_cli(a);
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(c.says));
  }
  // Training over nodes without a runtime named is DeepSpeed's.
  const auto r = test::run_cli({"estimate", m, "--nodes", "2", "--gpus", "4", "--mode", "train", "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK(json::parse(r.out)["runtime"] == "deepspeed");
}

TEST_CASE("multinode: vLLM's pipeline stages split layers as get_pp_indices does", "[multinode][estimate]") {
  // vllm/distributed/utils.py: L / PP each, the remainder one more each from the second-to-last stage back.
  CHECK(vllm_pp_partition(80, 2) == std::vector<int64_t>{40, 40});
  CHECK(vllm_pp_partition(80, 3) == std::vector<int64_t>{27, 27, 26});
  CHECK(vllm_pp_partition(10, 4) == std::vector<int64_t>{2, 3, 3, 2});
  CHECK(vllm_pp_partition(32, 5) == std::vector<int64_t>{6, 6, 7, 7, 6});
}

namespace {

// Every "--flag" of the vllm and ray lines on `text` is in testdata/golden/vllm_flags.json.
void flags_known(const std::string& text) {
  const json g = test::read_json(test::testdata("golden/vllm_flags.json"));
  std::istringstream lines(text);
  std::string line;
  size_t seen = 0;
  while (std::getline(lines, line)) {
    const auto at = line.find("ray start");
    const bool vllm = line.rfind("vllm serve", 0) == 0, ray = at != std::string::npos;
    if (!vllm && !ray) continue;
    std::istringstream words(line.substr(vllm ? 0 : at));
    for (std::string w; words >> w;) {
      if (w.rfind("--", 0) != 0) continue;
      const std::string flag = w.substr(0, w.find('='));
      INFO(line);
      CHECK(g[vllm ? "vllm" : "ray"]["flags"].contains(flag));
      ++seen;
    }
  }
  CHECK(seen > 10);
}

}  // namespace

TEST_CASE("multinode: Llama-2-70B fp16 on 2 x 8 x 24 GiB exports vLLM TP 8 x PP 2 with Ray and multiprocessing lines",
          "[multinode][cli]") {
  test::TempDir dir;
  const std::string cfg = test::testdata("models/llama2-70b-config/config.json");
  test::write_sparse_llama(dir.path.string(), cfg);
  const auto r = test::run_cli({"plan", dir.path.string(), "--format", "vllm", "--nodes", "2", "--gpus", "8", "--vram", "24G"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("--tensor-parallel-size 8 --pipeline-parallel-size 2"));
  CHECK_THAT(r.out, Catch::Contains("--distributed-executor-backend ray"));
  CHECK_THAT(r.out, Catch::Contains("--nnodes 2 --node-rank 1 --master-addr $HEAD_NODE_IP --headless"));
  CHECK_THAT(r.out, Catch::Contains("ray start --head --port=6379"));
  CHECK_THAT(r.err, Catch::Contains("fits on 2 nodes × 8 GPUs: TP 8 × PP 2"));
  flags_known(r.out);
  // Per rank, by hand from config.json: stage 1 holds layers 40-79, the final norm and lm_head
  // (stage 0 layers 0-39 and the embedding: the same size), fp16, over TP 8.
  const json c = test::read_json(cfg);
  const uint64_t h = c["hidden_size"], I = c["intermediate_size"], V = c["vocab_size"];
  const uint64_t kv_dim = h / c["num_attention_heads"].get<uint64_t>() * c["num_key_value_heads"].get<uint64_t>();
  const uint64_t layer = 2 * h * h + 2 * kv_dim * h + 3 * h * I + 2 * h;
  const uint64_t stage1 = (40 * layer + h + V * h) * 2 / 8;
  const auto e = test::run_cli({"estimate", dir.path.string(), "--runtime", "vllm", "--nodes", "2", "--gpus", "8", "--vram", "24G", "--json"});
  REQUIRE(e.exit_code == 0);
  const json j = json::parse(e.out);
  CHECK(j["component_bytes"]["weights"] == stage1);
  // KV: 40 layers × 2 × 1 of 8 KV heads × 128 × 2 B per token, 4096 tokens (blocks of 16).
  CHECK(j["component_bytes"]["kv_cache"] == uint64_t(40) * 2 * 128 * 2 * 4096);
  CHECK(j["topology"]["num_ranks"] == 16);
  const json schema = test::read_json(std::string(NUNCHAKU_SOURCE_DIR) + "/docs/schema/estimate.json");
  CHECK(test::schema_errors(schema, j).empty());
}

TEST_CASE("multinode: plan --nodes refuses what does not span machines", "[multinode][cli]") {
  test::TempDir dir;
  test::write_sparse_llama(dir.path.string(), test::testdata("models/llama2-70b-config/config.json"));
  const std::string m = dir.path.string();
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"plan", m, "--nodes", "2", "--gpus", "8", "--vram", "24G"}, "--format vllm (inference), deepspeed or fsdp (training)"},
      {{"plan", m, "--nodes", "2", "--gpus", "6", "--vram", "24G", "--format", "vllm"}, "must divide the 64 attention heads"},
      {{"plan", m, "--nodes", "2", "--gpus", "8", "--format", "vllm"}, "plan --nodes needs --vram"},
      {{"estimate", m, "--nodes", "81", "--gpus", "8", "--runtime", "vllm"}, "more than the 80 layers"},
  };
  for (const auto& c : cases) {
    const auto r = test::run_cli(c.args);
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(c.says));
  }
}

TEST_CASE("multinode: plan --format deepspeed -o DIR writes what DeepSpeed's own code read (golden)", "[multinode][cli]") {
  // testdata/golden/deepspeed_exports_check.json: scripts/check_deepspeed_exports.py ran these
  // cases and fed each file to DeepSpeed (DeepSpeedConfig with the plan's world size,
  // _parse_hostfile, the launcher's parse_args). The files must still be those.
  const json g = test::read_json(test::testdata("golden/deepspeed_exports_check.json"));
  REQUIRE(g["cases"].size() >= 4);
  test::TempDir dir;
  const std::string model = dir.file("model");
  std::filesystem::create_directories(model);
  test::write_sparse_llama(model, test::testdata("models/llama2-70b-config/config.json"));
  int k = 0;
  for (const auto& c : g["cases"]) {
    const std::string out = dir.file("out" + std::to_string(k++)) + "/";
    std::vector<std::string> args;
    for (const auto& a : c["args"]) args.push_back(a == "MODEL" ? model : a == "OUT/" ? out : a.get<std::string>());
    const auto r = test::run_cli(args);
    INFO(r.out << r.err);
    CHECK(r.exit_code == c["exit_code"].get<int>());
    for (const auto& [name, text] : c["files"].items()) CHECK(test::read_text(out + name) == text.get<std::string>());
    const json& ds = c["deepspeed_read"];
    // What DeepSpeed read: a world of every rank, one hostfile entry per node.
    CHECK(ds["train_batch_size"].get<int64_t>() == ds["train_micro_batch_size_per_gpu"].get<int64_t>() * ds["world_size"].get<int64_t>());
    CHECK(ds["launches"].size() == 2);
    CHECK(ds["launches"][1]["no_ssh"] == true);
  }
}

TEST_CASE("multinode: --interconnect times the bytes a step sends across nodes", "[multinode][cli]") {
  test::TempDir dir;
  test::write_sparse_llama(dir.path.string(), test::testdata("models/llama2-70b-config/config.json"));
  const std::string m = dir.path.string();
  // ZeRO-3 on 2 nodes: each node's link carries half of two 16-bit parameter gathers and one
  // gradient reduce-scatter per step: 3 × P × 2 B / 2 = 3P bytes; 400 Gb/s = 50e9 B/s.
  const uint64_t P = 68976648192ull;
  auto ds = test::run_cli({"estimate", m, "--mode", "train", "--zero", "3", "--nodes", "2", "--gpus", "8", "--interconnect", "400Gb", "--json"});
  REQUIRE(ds.exit_code == 0);
  const json t = json::parse(ds.out)["topology"];
  CHECK(t["interconnect_bytes_per_s"] == 50000000000ull);
  REQUIRE(t["network"].size() == 1);
  CHECK(t["network"][0]["bytes_per_step"] == 3 * P);
  CHECK(t["network"][0]["seconds_per_step"].get<double>() == Approx(3.0 * double(P) / 50e9));
  // vLLM PP 2: a decode step sends hidden_states + residual of one token (2 × 8192 × 2 B) across
  // the boundary; the tensor-parallel all-reduce stays inside the node.
  auto v = test::run_cli({"estimate", m, "--runtime", "vllm", "--nodes", "2", "--gpus", "8", "--interconnect", "50GB/s", "--json"});
  REQUIRE(v.exit_code == 0);
  const json n = json::parse(v.out)["topology"]["network"];
  CHECK(n[0]["name"] == "pp_activations_decode");
  CHECK(n[0]["bytes_per_step"] == 2 * 8192 * 2);
  CHECK(n[1]["bytes_per_step"] == uint64_t(2) * 8192 * 8192 * 2);
  CHECK(n[2]["crosses_nodes"] == false);
  CHECK(n[2]["seconds_per_step"].is_null());
  const auto explain = test::run_cli({"estimate", m, "--runtime", "vllm", "--nodes", "2", "--gpus", "8", "--interconnect", "400Gbps", "--explain"});
  CHECK_THAT(explain.out, Catch::Contains("at --interconnect 400 Gb/s (50 GB/s): 5.37 ms per step"));
  CHECK(test::run_cli({"estimate", m, "--runtime", "vllm", "--nodes", "2", "--interconnect", "fast"}).exit_code == 2);
  // One node: nothing crosses.
  auto one = test::run_cli({"estimate", m, "--mode", "train", "--zero", "3", "--gpus", "8", "--json"});
  CHECK(json::parse(one.out)["topology"]["network"].empty());
}

TEST_CASE("multinode: a MoE short of GPU memory offloads each stage's first layers' routed experts (--cpu-offload-params experts)",
          "[multinode][cli][moe]") {
  test::TempDir dir;
  test::write_arch_fixture(test::testdata("arch/qwen3-30b-a3b"), dir.path.string());
  const auto r = test::run_cli({"plan", dir.path.string(), "--format", "vllm", "--nodes", "2", "--gpus", "2", "--vram", "12G"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 3);
  const size_t at = r.out.find("--cpu-offload-gb ");
  REQUIRE(at != std::string::npos);
  const std::string experts = " --cpu-offload-params experts";
  CHECK(r.out.compare(r.out.find(' ', at + 17), experts.size(), experts) == 0);
  // vLLM's walk moves whole layers' experts: a layer's 128 experts x (gate, up, down) of
  // 768 x 2048 bf16 values over TP 2 is 603979776 B = 0.5625 GiB per GPU, so the flag is a
  // whole number of those (GiB with six decimals: exact here).
  const double gib = std::stod(r.out.substr(at + 17));
  const double layers = gib / 0.5625;
  CHECK(layers >= 1);
  CHECK(layers == std::floor(layers));
  CHECK_THAT(r.err, Catch::Contains("vLLM would need --cpu-offload-gb ") && Catch::Contains("--cpu-offload-params experts (per GPU)"));
  flags_known(r.out);
}
