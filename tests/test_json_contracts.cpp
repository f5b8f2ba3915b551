// The JSON contracts: the real output of every command on the committed fixtures, each
// branch that changes a document's shape (formats, a module tree without config, --verify,
// OOM, --runtime all, --disk, ...), validated against docs/schema/<name>.json with the
// checker in tests/json_schema_check.hpp. The schemas are strict (required fields, types,
// additionalProperties false), so a renamed, missing, extra or retyped field fails here.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tests/helpers.hpp"
#include "tests/json_schema_check.hpp"

using nlohmann::json;
using namespace nunchaku::test;

namespace {

const json& schema(const std::string& name) {
  static std::map<std::string, json> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, read_json(std::string(NUNCHAKU_SOURCE_DIR) + "/docs/schema/" + name + ".json")).first;
  return it->second;
}

void conforms(const std::string& schema_name, const json& doc) {
  const auto errs = schema_errors(schema(schema_name), doc);
  INFO("schema " << schema_name << ": " << fmt::format("{}", fmt::join(errs, "\n  ")));
  CHECK(errs.empty());
}

// Runs nunchaku; the document is stdout, or `file` when given. `exit_code` as expected.
json document(const std::vector<std::string>& args, int exit_code = 0, const std::string& file = "", const std::string& in = "") {
  auto r = run_cli(args, in);
  INFO(fmt::format("nunchaku {}\nstderr: {}", fmt::join(args, " "), r.err));
  REQUIRE(r.exit_code == exit_code);
  return json::parse(file.empty() ? r.out : read_text(file));
}

std::vector<std::string> fixture_paths() {
  const json fixtures = read_json(testdata("expected/fixtures.json"))["fixtures"];
  std::vector<std::string> out;
  for (const auto& [rel, _] : fixtures.items()) out.push_back(testdata(rel));
  return out;
}

}  // namespace

TEST_CASE("json contract: inspect --json on every fixture follows docs/schema/inspect.json", "[json][contract]") {
  auto paths = fixture_paths();
  REQUIRE(paths.size() >= 10);
  for (const char* rel : {"models/module-tree", "models/llama-gguf-split/model-00001-of-00003.gguf", "gguf/quant_small.gguf",
                          "pytorch/zip_views.pt", "pytorch/legacy_storage_views.pt"})
    paths.push_back(testdata(rel));
  for (const auto& p : paths) {
    INFO(p);
    const json j = document({"inspect", p, "--json"});
    conforms("inspect", j);
    CHECK(j["verify"].is_null());
  }
  // The branches: --verify (GGUF adds padding checks), --filter.
  for (const char* rel : {"models/llama", "gguf/quant_small.gguf"}) {
    const json v = document({"inspect", testdata(rel), "--json", "--verify"});
    conforms("inspect", v);
    CHECK(v["verify"]["ok"] == true);
  }
  const json f = document({"inspect", testdata("models/llama"), "--json", "--filter", "*.layers.0.*"});
  conforms("inspect", f);
  CHECK(f["filter"] == "*.layers.0.*");
  // A module tree has no model description: null, not an object of zeros.
  CHECK(document({"inspect", testdata("models/module-tree"), "--json"})["model"].is_null());
}

TEST_CASE("json contract: estimate --json follows docs/schema/estimate.json", "[json][contract]") {
  const std::string m = testdata("models/llama");
  struct Case {
    std::vector<std::string> args;
    int exit_code;
  };
  const std::vector<Case> cases = {
      {{"estimate", m, "--json"}, 0},
      {{"estimate", m, "--json", "--vram", "1G"}, 0},
      {{"estimate", m, "--json", "--vram", "100K"}, 3},  // OOM, nothing makes it fit
      {{"estimate", m, "--json", "--vram", "560M", "--batch", "512"}, 3},  // OOM with fixes
      {{"estimate", m, "--json", "--vram", "1G", "--runtime", "all"}, 0},
      {{"estimate", m, "--json", "--mode", "lora"}, 0},
      {{"estimate", m, "--json", "--mode", "qlora", "--quant", "nf4", "--vram", "1G"}, 0},
      {{"estimate", m, "--json", "--mode", "train", "--zero", "3", "--offload", "optimizer", "--gpus", "2", "--vram", "1G"}, 0},
      {{"estimate", m, "--json", "--device", "cpu", "--batch", "8"}, 0},
      {{"estimate", testdata("models/llama-gguf/model.gguf"), "--json"}, 0},
      {{"estimate", testdata("models/gemma2"), "--json"}, 0},   // sliding windows
      {{"estimate", testdata("models/mixtral"), "--json"}, 0},  // experts
      {{"estimate", testdata("models/module-tree"), "--json", "--vram", "1G"}, 0},
      {{"estimate", testdata("models/module-tree"), "--json", "--vram", "1G", "--runtime", "all"}, 0},
  };
  for (const auto& c : cases) {
    const json j = document(c.args, c.exit_code);
    conforms("estimate", j);
  }
  // The branches the schema allows, seen for real: null model and context, a verdict short by
  // the fixes' margin, one sub-document per runtime.
  const json tree = document({"estimate", testdata("models/module-tree"), "--json"});
  CHECK(tree["model"].is_null());
  CHECK(tree["workload"]["context"].is_null());
  CHECK(tree["verdict"].is_null());
  const json oom = document({"estimate", m, "--json", "--vram", "100K"}, 3);
  CHECK(oom["verdict"]["fits"] == false);
  CHECK(oom["verdict"]["headroom_bytes"].get<int64_t>() ==
        oom["verdict"]["budget_bytes"].get<int64_t>() - oom["total_bytes"].get<int64_t>());
  const json fixes = document({"estimate", m, "--json", "--vram", "580M", "--batch", "512"}, 3);
  REQUIRE(!fixes["fixes"].empty());
  for (const json& f : fixes["fixes"]) {  // estimate's own (headroom kept) or plan's offload answer
    if (f["subcommand"] == "estimate") CHECK(f["headroom_bytes"].get<int64_t>() > 0);
    else CHECK(f["verdict"]["status"] == "fits_with_offload");
  }
  const json all = document({"estimate", m, "--json", "--vram", "1G", "--runtime", "all"});
  CHECK(all["runtimes"].size() == 4);
}

TEST_CASE("json contract: plan --json follows docs/schema/plan.json", "[json][contract]") {
  const std::string m = testdata("models/llama");
  TempDir d;
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::string file;
  };
  const std::vector<Case> cases = {
      {{"plan", m, "--json", "--vram", "600M", "--cpu-ram", "1G"}, 0, ""},
      {{"plan", m, "--json", "--cpu-ram", "1G"}, 0, ""},                                      // CPU alone
      {{"plan", m, "--json", "--vram", "501M", "--cpu-ram", "1G"}, 0, ""},                    // offload
      {{"plan", m, "--json", "--vram", "600K", "--cpu-ram", "100K"}, 3, ""},                  // does not fit, fixes
      {{"plan", m, "--json", "--vram", "600K", "--cpu-ram", "1.1M", "--disk", "--threads", "1"}, 0, ""},        // disk: unlimited budget
      {{"plan", m, "--json", "--min-vram", "--gpus", "2", "--cpu-ram", "1G"}, 0, ""},
      {{"plan", m, "--json", "--compat", "accelerate", "--vram", "200K", "--cpu-ram", "1G"}, 0, ""},
      {{"plan", m, "--json", "--vram", "1G,1G", "--mode", "train", "--cpu-ram", "1G"}, 0, ""},
      {{"plan", testdata("models/module-tree"), "--json", "--vram", "1G", "--cpu-ram", "1G"}, 0, ""},
      {{"plan", m, "--format", "json", "-o", d.file("plan.json"), "--vram", "0", "--cpu-ram", "1G"}, 0, d.file("plan.json")},
  };
  for (const auto& c : cases) conforms("plan", document(c.args, c.exit_code, c.file));
  const json short_ = document({"plan", m, "--json", "--vram", "600K", "--cpu-ram", "100K"}, 3);
  CHECK(short_["verdict"]["fits"] == false);
  CHECK(!short_["verdict"]["shortfall"].is_null());
  CHECK(!short_["fixes"].empty());
  const json disk = document({"plan", m, "--json", "--vram", "600K", "--cpu-ram", "1.1M", "--disk", "--threads", "1"});
  bool unlimited = false;
  for (const auto& dev : disk["devices"]) unlimited = unlimited || (dev["device"] == "disk" && dev["budget_bytes"].is_null());
  CHECK(unlimited);
  CHECK(document({"plan", m, "--json", "--min-vram", "--cpu-ram", "1G"})["min_vram_bytes"].get<uint64_t>() > 0);
}

TEST_CASE("json contract: a plan file from format_version 1 (\"modules\") still loads and runs", "[json][contract]") {
  // Written by nunchaku at plan format_version 1 (testdata/README.md): every module on disk,
  // where nothing would put them unless the file said so.
  const std::string old = testdata("plan/llama-format1.json");
  REQUIRE(read_json(old).contains("modules"));
  REQUIRE(!read_json(old).contains("device_map"));
  auto l = run_cli({"load", testdata("models/llama"), "--plan", old});
  INFO(l.err);
  REQUIRE(l.exit_code == 0);
  CHECK_THAT(l.out, Catch::Contains("disk") && Catch::Contains("5 modules (mmap views, read on use)"));
  // A plan the current version writes is read the same way (device_map).
  TempDir d;
  REQUIRE(run_cli({"plan", testdata("run/llama-spm"), "--cpu-ram", "1G", "--format", "json", "-o", d.file("p.json")}).exit_code == 0);
  CHECK(read_json(d.file("p.json")).contains("device_map"));
  auto r = run_cli({"run", testdata("run/llama-spm"), "--plan", d.file("p.json"), "--raw", "--max-tokens", "2", "-q"}, "hi\n");
  INFO(r.err);
  CHECK(r.exit_code == 0);
}

TEST_CASE("json contract: load --json follows docs/schema/load.json", "[json][contract]") {
  const std::string m = testdata("models/llama");
  TempDir d;
  REQUIRE(run_cli({"plan", m, "--json", "--vram", "600K", "--cpu-ram", "1.1M", "--disk", "--threads", "1", "-o", d.file("disk.json")}).exit_code == 0);
  const std::vector<std::vector<std::string>> cases = {
      {"load", m, "--json"},
      {"load", m, "--json", "--verify"},
      {"load", m, "--json", "--device", "cpu", "--copy", "--verify"},  // allocated, not mapped
      {"load", m, "--json", "--dtype", "bf16", "--verify"},            // converted
      {"load", m, "--json", "--plan", d.file("disk.json")},           // modules on disk
      {"load", m, "--json", "--plan", testdata("plan/llama-format1.json")},
      {"load", testdata("models/llama-sharded"), "--json", "--threads", "2", "--copy"},
      {"load", testdata("models/llama-gguf/model.gguf"), "--json", "--cpu-ram", "2M"},
      {"load", testdata("models/llama-bin"), "--json"},
      {"load", testdata("models/module-tree"), "--json"},
  };
  for (const auto& c : cases) conforms("load", document(c));
  const json disk = document({"load", m, "--json", "--plan", d.file("disk.json")});
  CHECK(disk["device_bytes"]["disk"].get<uint64_t>() > 0);
  CHECK(disk["h2d_peak_gb_per_s"].is_null());  // no --measure-h2d
}

TEST_CASE("json contract: convert --json follows docs/schema/convert.json", "[json][contract]") {
  TempDir d;
  const std::vector<std::vector<std::string>> cases = {
      {"convert", testdata("models/llama"), d.file("st"), "--json"},
      {"convert", testdata("models/llama"), d.file("sharded"), "--shard-size", "100KB", "--json", "--verify"},
      {"convert", testdata("models/llama-pt/model_zip.pt"), d.file("pt"), "--json"},  // a tied head dropped
      {"convert", testdata("models/llama"), d.file("q8.gguf"), "--dtype", "q8_0", "--json", "--verify"},
      {"convert", testdata("run/qwen2-bpe"), d.file("qwen2.gguf"), "--names", "gguf", "--json"},
  };
  for (const auto& c : cases) {
    const json j = document(c);
    conforms("convert", j);
    for (const auto& f : j["files"]) CHECK(std::filesystem::file_size(f["path"].get<std::string>()) == f["size_bytes"]);
  }
}

TEST_CASE("json contract: run --stats and every result line follow docs/schema/run-stats.json and run-result.json", "[json][contract]") {
  TempDir d;
  const std::string spm = testdata("run/llama-spm"), bpe = testdata("run/qwen2-bpe");
  // Plain lines, JSONL with ids, a failing request, OpenAI chat and completion lines.
  const std::string mixed =
      "Once upon a time\n"
      "{\"id\": \"a\", \"prompt\": \"The cat\", \"max_tokens\": 3}\n"
      "{\"custom_id\": 7, \"prompt\": \"x\", \"temperature\": -1}\n"
      "{\"id\": [1], \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 2}\n"
      "{\"id\": \"lp\", \"prompt\": \"The cat\", \"max_tokens\": 2, \"logprobs\": 3}\n";
  const std::string openai =
      "{\"custom_id\": \"r1\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\", \"body\": {\"model\": \"m\", "
      "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 3}}\n"
      "{\"custom_id\": \"r2\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": {\"model\": \"m\", \"prompt\": \"a\", "
      "\"max_tokens\": 2}}\n"
      "{\"custom_id\": \"r3\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": {\"model\": \"m\", \"prompt\": \"a\", "
      "\"max_tokens\": -2}}\n";
  struct Case {
    std::vector<std::string> args;
    std::string in;
    size_t lines;
  };
  const std::vector<Case> cases = {
      {{"run", spm, "--max-tokens", "4", "-q", "--stats", d.file("s1.json")}, mixed, 5},
      {{"run", bpe, "--max-tokens", "4", "-q", "--stats", d.file("s2.json"), "--batch-size", "2"}, openai, 3},
      {{"run", spm, "--max-tokens", "3", "-q", "--stats", d.file("s3.json"), "--cpu-ram", "1140K", "--threads", "1", "--batch-size", "8"}, "Hello\n", 1},  // streamed
  };
  std::set<std::string> shapes;
  for (const auto& c : cases) {
    auto r = run_cli(c.args, c.in);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    std::istringstream out(r.out);
    size_t n = 0;
    for (std::string line; std::getline(out, line); ++n) {
      const json j = json::parse(line);
      INFO(line);
      conforms("run-result", j);
      if (j.value("id", json()) == "lp") CHECK(j["logprobs"]["content"].size() == j["token_ids"].size());
      shapes.insert(j.contains("response") ? "openai " + std::to_string(j["response"]["status_code"].get<int>())
                                           : j["finish_reason"].get<std::string>());
    }
    CHECK(n == c.lines);
    conforms("run-stats", read_json(c.args[std::find(c.args.begin(), c.args.end(), "--stats") - c.args.begin() + 1]));
  }
  // Each branch of run-result.json was seen: results, an error, OpenAI successes and a failure.
  CHECK(shapes.count("error") == 1);
  CHECK(shapes.count("openai 200") == 1);
  CHECK(shapes.count("openai 400") == 1);
  CHECK((shapes.count("length") + shapes.count("stop")) >= 1);
  CHECK(read_json(d.file("s3.json"))["weights"]["streamed_bytes_per_step"].get<uint64_t>() > 0);
}

TEST_CASE("json contract: --version --json follows docs/schema/version.json", "[json][contract]") {
  conforms("version", document({"--version", "--json"}));
}

TEST_CASE("json contract: inspect and estimate on the hostile corpus and the shared real files", "[json][contract]") {
  // Hostile files that open (odd names, control characters, context 0, ...) still give a
  // document of the documented shape; those refused print nothing on stdout.
  size_t opened = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(NUNCHAKU_SOURCE_DIR) + "/tests/hostile")) {
    const std::string p = e.path().string();
    INFO(p);
    auto r = run_cli({"inspect", p, "--json"});
    CHECK((r.exit_code == 0 || r.exit_code == 2));
    if (r.exit_code != 0) {
      CHECK(r.out.empty());
      continue;
    }
    ++opened;
    conforms("inspect", json::parse(r.out));
    auto est = run_cli({"estimate", p, "--json"});
    if (est.exit_code == 0) conforms("estimate", json::parse(est.out));
  }
  CHECK(opened > 0);
  if (!have_shared_testfiles()) {
    WARN("shared real files skipped: ../shared/testfiles is absent");
    return;
  }
  for (const char* rel : {"gguf/stories260K.gguf", "safetensors/mnist.safetensors", "pytorch/mnist.pt", "safetensors/minicpm3"}) {
    INFO(rel);
    conforms("inspect", document({"inspect", shared_testfile(rel), "--json"}));
    conforms("estimate", document({"estimate", shared_testfile(rel), "--json"}));
    conforms("plan", document({"plan", shared_testfile(rel), "--json", "--cpu-ram", "1G"}));
  }
}

TEST_CASE("json contract: every document names command, format_version and the input path as given", "[json][contract]") {
  const std::string m = testdata("models/llama"), run_model = testdata("run/llama-spm");
  TempDir d;
  struct Case {
    std::vector<std::string> args;
    std::string command, in;
  };
  const std::vector<Case> cases = {
      {{"inspect", m, "--json"}, "inspect", ""},
      {{"estimate", m, "--json"}, "estimate", ""},
      {{"estimate", m, "--json", "--vram", "1G", "--runtime", "all"}, "estimate", ""},
      {{"plan", m, "--json", "--cpu-ram", "1G"}, "plan", ""},
      {{"load", m, "--json"}, "load", ""},
      {{"convert", m, d.file("out.gguf"), "--json"}, "convert", ""},
      {{"run", run_model, "-n", "2", "-q"}, "run", "Once upon a time\n{\"id\": \"q\", \"prompt\": \"x\", \"temperature\": -1}\n"},
      {{"tokenize", run_model, "--json"}, "tokenize", "Once upon a time\nThe cat\n"},
      {{"bench", run_model, "-p", "4", "-n", "2", "-r", "1", "--json"}, "bench", ""},
      {{"bench", run_model, "-p", "4", "-n", "2", "-r", "1", "-o", "jsonl"}, "bench", ""},
  };
  for (const auto& c : cases) {
    INFO(fmt::format("nunchaku {}", fmt::join(c.args, " ")));
    auto r = run_cli(c.args, c.in);
    REQUIRE(r.exit_code == 0);
    std::istringstream lines(r.out);
    size_t n = 0;
    // A document per line (run, tokenize, bench -o jsonl), or one indented document.
    const bool per_line = c.command == "run" || c.command == "tokenize" || c.args.back() == "jsonl";
    auto check = [&](const json& j) {
      ++n;
      CHECK(j["command"] == c.command);
      CHECK(j["format_version"].is_number_integer());
      CHECK(j["path"] == c.args[1]);
    };
    if (per_line)
      for (std::string line; std::getline(lines, line);) check(json::parse(line));
    else check(json::parse(r.out));
    CHECK(n >= (per_line ? 2u : 1u));
  }
  // run --stats too.
  const std::string stats = d.file("stats.json");
  REQUIRE(run_cli({"run", run_model, "-n", "1", "-q", "--stats", stats}, "hi\n").exit_code == 0);
  const json st = read_json(stats);
  CHECK(st["command"] == "run");
  CHECK(st["path"] == run_model);
}

TEST_CASE("json contract: ids keep their input type in run and tokenize lines", "[json][contract]") {
  const std::string m = testdata("run/llama-spm");
  const std::string in = "{\"id\": \"q1\", \"prompt\": \"hi\"}\n{\"id\": 4, \"prompt\": \"hi\"}\nplain line\n";
  for (const std::vector<std::string>& args : {std::vector<std::string>{"run", m, "-n", "1", "-q"}, {"tokenize", m, "--json"}}) {
    INFO(args[0]);
    auto r = run_cli(args, in);
    REQUIRE(r.exit_code == 0);
    std::istringstream lines(r.out);
    std::vector<json> ids;
    for (std::string line; std::getline(lines, line);) ids.push_back(json::parse(line)["id"]);
    REQUIRE(ids.size() == 3);
    CHECK(ids[0] == "q1");  // a string stays a string
    CHECK(ids[1].is_number_integer());
    CHECK(ids[1] == 4);  // a number stays a number
    CHECK(ids[2] == 2);  // no id: the 0-based index
  }
}
