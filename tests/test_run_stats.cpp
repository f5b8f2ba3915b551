// `run --stats FILE` and the placement flags of run (--device, --vram, --plan) as a user
// meets them on a machine without a GPU.
#include <catch2/catch.hpp>

#include <sstream>

#include <nlohmann/json.hpp>

#include "format/open.hpp"
#include "model/model.hpp"
#include "tests/helpers.hpp"

using namespace nunchaku;

TEST_CASE("run --stats: the JSON summary counts what the JSONL output holds", "[run]") {
  test::TempDir dir;
  const std::string stats = dir.file("stats.json");
  auto r = test::run_cli({"run", test::testdata("run/llama-spm"), "--max-tokens", "5", "--batch-size", "2", "--stats", stats},
                         "Hello\nOnce upon a time\nthe end\n");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  int64_t completion = 0, prompt = 0, lines = 0;
  std::istringstream out(r.out);
  for (std::string line; std::getline(out, line); ++lines) {
    auto j = nlohmann::json::parse(line);
    completion += j.at("usage").at("completion_tokens").get<int64_t>();
    prompt += j.at("usage").at("prompt_tokens").get<int64_t>();
  }
  auto s = test::read_json(stats);
  CHECK(s.at("command") == "run");
  CHECK(s.at("num_requests") == lines);
  CHECK(s.at("completion_tokens") == completion);
  CHECK(s.at("prompt_tokens") == prompt);
  CHECK(s.at("max_active_requests") == 2);
  CHECK(s.at("run_state_bytes") == s.at("run_state_predicted_bytes"));
  CHECK(s.at("weights").at("streamed_bytes_per_step") == 0);
  CHECK(s.at("gpu_memory").is_null());  // a CPU run
}

TEST_CASE("run --stats with --cpu-ram: the streamed bytes per step are the weights left on disk", "[run]") {
  test::TempDir dir;
  const std::string stats = dir.file("stats.json");
  // 1140K of host memory holds the run state at batch 8 (874K) and the stream pool, no layer:
  // all stream. (--batch-size auto would keep the layers at a smaller batch instead.)
  auto r = test::run_cli({"run", test::testdata("run/llama-spm"), "--max-tokens", "3", "--cpu-ram", "1140K", "--threads", "1",
                          "--batch-size", "8", "--stats", stats},
                         "Hello\n");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto s = test::read_json(stats);
  const uint64_t streamed = s.at("weights").at("streamed_bytes_per_step").get<uint64_t>();
  const uint64_t resident = s.at("weights").at("resident_bytes").get<uint64_t>();
  CHECK(resident == 0);
  CHECK(streamed + resident == 319104);  // the fixture's weight bytes (model.safetensors less its header)
}

TEST_CASE("run placement flags: GPU requests without a GPU, a GPU that is not there, conflicting flags are exit 2", "[run]") {
  const std::string m = test::testdata("run/llama-spm");
  // A plan with a layer on cuda:1: no host here has two GPUs (gpu-check lends one), so
  // the device that does not answer is named, exit 2, before anything is loaded.
  {
    test::TempDir tmp;
    const ModelLayout layout = describe_model(open_checkpoint(m));
    nlohmann::json plan = {{"modules", nlohmann::json::object()}};
    for (const auto& mod : layout.modules)
      plan["modules"][mod.name] = mod.kind == ModuleKind::Layer && mod.layer == 1 ? "cuda:1" : "cuda:0";
    test::write_file(tmp.file("plan.json"), plan.dump());
    auto several = test::run_cli({"run", m, "--plan", tmp.file("plan.json")}, "Hello\n");
    CHECK(several.exit_code == 2);
    CHECK(several.err.find("which is not available") != std::string::npos);
  }
  auto both = test::run_cli({"run", m, "--vram", "1G", "--plan", "x.json"}, "Hello\n");
  CHECK(both.exit_code == 2);
  auto bad = test::run_cli({"run", m, "--device", "tpu"}, "Hello\n");
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("cuda[:N]") != std::string::npos);
  auto gpu = test::run_cli({"run", m, "--device", "cuda:0", "--cpu-ram", "2M"}, "Hello\n");
  if (gpu.exit_code == 0) {
    WARN("a GPU answered: the no-GPU refusal is not checked here");
  } else {
    CHECK(gpu.exit_code == 2);
    CHECK(gpu.err.find("cuda:0") != std::string::npos);
  }
}

TEST_CASE("run --batch-size auto: the most sequences whose KV cache fits the budget with 5% spare", "[run]") {
  const std::string m = test::testdata("run/llama-spm");
  test::TempDir tmp;
  // The fixture (config.json): 2 layers, 2 KV heads x head_dim 8 = kv_dim 16, f32 cache, so at
  // --context 4096 one sequence's KV is 2 layers x (k, v) x 4096 x 16 x 4 B = 1 MiB. Weights
  // are 0.31 MiB and the rest of the run state (activations, logits, scratch) < 0.4 MiB: of
  // --cpu-ram 6M less 5% (5.7 MiB), 5 sequences fit; 6 do not (6 MiB of KV alone).
  auto r = test::run_cli({"run", m, "--batch-size", "auto", "--cpu-ram", "6M", "--context", "4096", "--max-tokens", "1", "--threads", "1",
                          "--stats", tmp.file("s.json")},
                         "Hello\n");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("batch size auto: 5 (") != std::string::npos);
  auto s = nlohmann::json::parse(test::read_text(tmp.file("s.json")));
  CHECK(s.at("batch_size") == 5);
  CHECK(s.at("run_state_bytes").get<uint64_t>() + 319104 <= uint64_t(0.95 * 6 * 1024 * 1024));
  // Twice the budget: 11 sequences (11.4 MiB of 11.4 MiB is too tight, so 10 or 11; never 12).
  auto r2 = test::run_cli({"run", m, "--batch-size", "auto", "--cpu-ram", "12M", "--context", "4096", "--max-tokens", "1", "--threads", "1"},
                          "Hello\n");
  REQUIRE(r2.exit_code == 0);
  CHECK((r2.err.find("batch size auto: 10 (") != std::string::npos || r2.err.find("batch size auto: 11 (") != std::string::npos));
  // A plan file gives no budget to fill; 0 and words are not batch sizes.
  auto plan = test::run_cli({"run", m, "--batch-size", "auto", "--plan", tmp.file("none.json")}, "Hello\n");
  CHECK(plan.exit_code == 2);
  for (const char* bad : {"0", "-3", "eight", "8x"}) {
    auto b = test::run_cli({"run", m, "--batch-size", bad}, "Hello\n");
    INFO(bad);
    CHECK(b.exit_code == 2);
    CHECK(b.err.find("--batch-size") != std::string::npos);
  }
}
