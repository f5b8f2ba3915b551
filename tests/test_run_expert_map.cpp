// `run --plan` with an expert map: a nunchaku plan for the CPU engine short of host memory
// keeps every module in memory and moves the first layers' routed experts to disk
// ("expert_map"); run loads those layers without their experts and reads the experts a token
// routes to, expert by expert, into the bounded piece pool. Checked against the resident run
// (itself checked against transformers and llama.cpp in test_engine_moe.cpp): the same logits
// bit for bit and the same greedy ids; and against the plan: the loader holds in memory and
// on disk exactly the weight bytes the plan put there, and the engine allocates the piece pool
// and run state the plan charged the CPU.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/units.hpp"
#include "engine/stream_provider.hpp"
#include "memory/plan_export.hpp"
#include "tests/helpers.hpp"
#include "tests/test_engine_helpers.hpp"

using nlohmann::json;
using namespace nunchaku;
using namespace nunchaku::engine;

namespace {

const char* const kFixtures[] = {"engine/qwen3_moe", "engine/mixtral", "engine/qwen2_moe", "engine/olmoe",
                                 "engine/moe-gguf/qwen3_moe.gguf"};

const json& device(const json& plan, const std::string& name) {
  for (const auto& d : plan["devices"])
    if (d["device"] == name) return d;
  FAIL("no device " << name);
  return plan;
}

// Each MoE layer's routed-expert bytes (layer order) and the piece pool the engine streams
// them through.
struct Experts {
  std::vector<uint64_t> per_layer;
  std::vector<int64_t> layers;  // their layer indices
  uint64_t pool = 0;
};
Experts experts_of(const std::string& path) {
  const Checkpoint ck = open_checkpoint(path);
  const ModelLayout layout = describe_model(ck);
  Experts x;
  uint64_t piece = 0;
  for (const Module& m : layout.modules) {
    uint64_t bytes = 0;
    for (size_t k = 0; k < m.tensors.size(); ++k)
      if (k < m.roles.size() && is_expert_role(m.roles[k])) bytes += ck.tensors[m.tensors[k]].nbytes;
    if (bytes) x.per_layer.push_back(bytes), x.layers.push_back(m.layer);
    piece = std::max(piece, stream_piece_bytes(ck, m));
  }
  x.pool = uint64_t(stream_piece_slots(layout.spec->num_experts_per_tok)) * piece;
  return x;
}

// `plan PATH --cpu-ram B --disk --json` (written to `file`) for the budget that holds the model
// in memory less the routed experts of its first n MoE layers plus the piece pool they are then
// read through, n the fewest whose experts outweigh the pool (a tiny model's experts are small
// beside page-aligned piece slots): the plan must move exactly those n layers' experts.
json plan_with_experts_on_disk(const std::string& path, const std::string& file) {
  auto all = test::run_cli({"plan", path, "--json"});
  REQUIRE(all.exit_code == 0);
  const uint64_t in_memory = device(json::parse(all.out), "cpu")["total_bytes"].get<uint64_t>();
  const Experts x = experts_of(path);
  uint64_t moved = 0;
  size_t n = 0;
  while (n < x.per_layer.size() && moved <= x.pool) moved += x.per_layer[n++];
  REQUIRE(moved > x.pool);  // else no budget makes experts on disk pay
  const uint64_t budget = in_memory - moved + x.pool;
  auto r = test::run_cli({"plan", path, "--cpu-ram", std::to_string(budget) + "B", "--disk", "--json", "-o", file});
  REQUIRE(r.exit_code == 0);
  // The table says where the experts went, and not that they left a GPU.
  CHECK_THAT(r.out, Catch::Contains(fmt::format("routed experts of {} on disk, read expert by expert", plural(n, "layer"))) &&
                        Catch::Contains("layers " + format_ranges({x.layers.begin(), x.layers.begin() + long(n)}) + "\n"));
  CHECK_THAT(r.out, !Catch::Contains("off the GPUs"));
  const json p = json::parse(test::read_text(file));
  CHECK(device(p, "cpu")["total_bytes"].get<uint64_t>() == budget);  // all of it, by construction
  CHECK(p["expert_map"].size() == n);
  return p;
}


}  // namespace

TEST_CASE("run --plan: routed experts on disk by the plan's expert_map give the resident logits and ids", "[run][moe][stream]") {
  for (const char* rel : kFixtures) {
    INFO(rel);
    const std::string path = test::testdata(rel);
    test::TempDir tmp;
    const json p = plan_with_experts_on_disk(path, tmp.file("plan.json"));
    // Every module in memory; the experts of the first layers on disk, nothing else there.
    for (const auto& [name, d] : p["device_map"].items()) CHECK(d == "cpu");
    REQUIRE(!p["expert_map"].empty());
    for (const auto& [name, d] : p["expert_map"].items()) CHECK(d == "disk");
    const json& disk = device(p, "disk");
    CHECK(disk["num_modules"] == 0);
    CHECK(disk["num_expert_layers"] == p["expert_map"].size());
    CHECK_THAT(p["verdict"]["text"].get<std::string>(),
               Catch::Contains(fmt::format("with the routed experts of {} layer", p["expert_map"].size())));

    auto resident = test::load_engine_model(path, test::short_run_options(), Device{Device::Kind::Cpu, 0}, {}, 2);
    const std::vector<int32_t> prompt = {1, 15, 27, 3, 9, 41, 7};
    SeqChunk ch{0, 0, prompt, true};
    const auto a = resident.tf->forward({&ch, 1});
    const std::vector<float> want(a.begin(), a.end());
    const std::vector<int32_t> ids = test::greedy(*resident.tf, prompt, 12);

    test::EngineModel m;
    m.ck = open_checkpoint(path);
    m.layout = describe_model(m.ck);
    std::vector<std::string> moe;  // MoE layers in order: the first ones have their experts on disk
    for (const Module& mod : m.layout.modules)
      if (std::any_of(mod.roles.begin(), mod.roles.end(), is_expert_role)) moe.push_back(mod.name);
    for (size_t l = 0; l < p["expert_map"].size() && l < moe.size(); ++l) CHECK(p["expert_map"].contains(moe[l]));
    LoadOptions lo;
    lo.placement = read_plan_file(tmp.file("plan.json"));
    m.load = load_checkpoint(m.ck, m.layout, lo);
    m.engine = make_engine(m.ck, m.layout, m.load.store, {test::short_run_options(), 2, StreamOptions{}, Device{Device::Kind::Cpu, 0}});
    m.tf = m.engine.model.get();
    const WeightProvider& w = m.tf->weights();
    size_t pieced = 0;
    for (size_t i = 0; i < w.modules(); ++i) {
      CHECK_FALSE(w.streamed(i));  // no module is read whole: each stays as loaded
      pieced += w.pieces_streamed(i);
    }
    CHECK(pieced == p["expert_map"].size());
    const auto b = m.tf->forward({&ch, 1});
    CHECK(std::equal(want.begin(), want.end(), b.begin(), b.end()));  // exact: same kernels, same bytes
    CHECK(test::greedy(*m.tf, prompt, 12) == ids);
    const auto* sp = dynamic_cast<const StreamedProvider*>(&w);
    REQUIRE(sp != nullptr);
    CHECK(sp->stats().pieces_read > 0);
    CHECK(sp->stats().modules_read == 0);

    // The load put exactly the plan's weights in memory and on disk (as stored: no --dtype).
    const auto held = m.load.store.bytes_per_device();
    CHECK(held.at(Device{Device::Kind::Cpu, 0}) == device(p, "cpu")["weight_bytes"].get<uint64_t>());
    CHECK(held.at(Device{Device::Kind::Disk, 0}) == disk["weight_bytes"].get<uint64_t>());
    // The pool the engine allocates is the staging the plan charged the CPU.
    CHECK(w.pool_bytes() == device(p, "cpu")["staging_bytes"].get<uint64_t>());
    CHECK(m.tf->state_bytes() + w.pool_bytes() == m.tf->predicted().allocated());
  }
}

TEST_CASE("run --plan: the CLI runs a plan with experts on disk, within the plan's host memory, as the resident run",
          "[run][moe][stream]") {
  const std::string path = test::testdata("engine/moe-gguf/qwen3_moe.gguf");
  test::TempDir tmp;
  const json p = plan_with_experts_on_disk(path, tmp.file("plan.json"));
  const std::string in = R"({"prompt": "Once upon a time"})" "\n";
  auto resident = test::run_cli({"run", path, "--raw", "--max-tokens", "16", "-q"}, in);
  REQUIRE(resident.exit_code == 0);
  auto split = test::run_cli({"run", path, "--plan", tmp.file("plan.json"), "--raw", "--max-tokens", "16", "--stats", tmp.file("stats.json"), "-q"},
                             in);
  REQUIRE(split.exit_code == 0);
  const json want = json::parse(resident.out), got = json::parse(split.out);
  REQUIRE(want["token_ids"].size() == 16);
  CHECK(got["token_ids"] == want["token_ids"]);
  const json st = json::parse(test::read_text(tmp.file("stats.json")));
  CHECK(st["weights"]["pieces_read"].get<uint64_t>() > 0);
  CHECK(st["weights"]["num_stream_slots"] == 0);  // only experts are read from disk
  // What the run holds in host memory (kept weights + piece pool + run state, as run reports
  // it) is within what the plan charged the CPU. The plan also charges the CPU kernels' thread
  // buffers (estimate's thread_buffers), which run's figure leaves out; the rest is the page
  // alignment of the weights it keeps.
  const uint64_t host = st["host_predicted_bytes"].get<uint64_t>(), planned = device(p, "cpu")["total_bytes"].get<uint64_t>();
  auto e = test::run_cli({"estimate", path, "--device", "cpu", "--json"});
  const uint64_t threads = json::parse(e.out)["component_bytes"]["thread_buffers"].get<uint64_t>();
  const uint64_t pages = 4096 * 2 * p["device_map"].size();
  CHECK(host <= planned);
  CHECK(host + threads >= planned);
  CHECK(host + threads <= planned + pages);
}

TEST_CASE("run --plan: an expert_map naming a dense module or an unknown one is exit 2", "[run][moe]") {
  const std::string path = test::testdata("engine/qwen3_moe");
  test::TempDir tmp;
  json p = plan_with_experts_on_disk(path, tmp.file("plan.json"));
  for (const auto& [name, code] : {std::pair{"model.embed_tokens", "holds no routed experts"},
                                   std::pair{"model.layers.99", "that the checkpoint does not have"}}) {
    json q = p;
    q["expert_map"][name] = "disk";
    test::write_file(tmp.file("bad.json"), q.dump());
    auto r = test::run_cli({"load", path, "--plan", tmp.file("bad.json")});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(code) && Catch::Contains(name));
  }
  json q = p;
  q["expert_map"] = json::array();
  test::write_file(tmp.file("bad.json"), q.dump());
  auto r = test::run_cli({"load", path, "--plan", tmp.file("bad.json")});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("\"expert_map\" is not an object"));
}

TEST_CASE("plan without GPUs: when every expert on disk still leaves the CPU short, whole layers go to disk", "[plan][moe]") {
  const std::string path = test::testdata("engine/moe-gguf/qwen3_moe.gguf");
  auto all = test::run_cli({"plan", path, "--json"});
  REQUIRE(all.exit_code == 0);
  const uint64_t in_memory = device(json::parse(all.out), "cpu")["total_bytes"].get<uint64_t>();
  const Experts x = experts_of(path);
  uint64_t experts = 0;
  for (uint64_t b : x.per_layer) experts += b;
  // One byte less than every layer's experts on disk needs: the expert split cannot fit.
  const uint64_t budget = in_memory - experts + x.pool - 1;
  auto r = test::run_cli({"plan", path, "--cpu-ram", std::to_string(budget) + "B", "--disk", "--json"});
  const json p = json::parse(r.out);
  CHECK(p["expert_map"].empty());
  const json& disk = device(p, "disk");
  CHECK(disk["num_modules"].get<int>() > 0);  // the planner's whole-module answer, whatever it is
  CHECK(disk["num_expert_layers"] == 0);
}
