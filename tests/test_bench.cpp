// nunchaku bench (issue 38): llama-bench's table on the run fixtures. The rows and columns are
// the ones asked for, the token counts are the engine's own (hand-computed: batch x tokens),
// each row has -r samples, the JSON follows docs/schema/bench.json, the model columns agree
// with inspect's, and bad flags are exit 2 naming the flag.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/helpers.hpp"
#include "tests/json_schema_check.hpp"
#include "tests/unix_child.hpp"

using namespace nunchaku::test;
using nlohmann::json;

namespace {

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// "| a | b |" -> {"a", "b"}.
std::vector<std::string> md_cells(const std::string& line) {
  std::vector<std::string> out;
  REQUIRE(line.size() >= 2);
  REQUIRE(line.front() == '|');
  REQUIRE(line.back() == '|');
  std::istringstream in(line.substr(1, line.size() - 2));
  for (std::string c; std::getline(in, c, '|');) {
    const size_t a = c.find_first_not_of(' '), b = c.find_last_not_of(' ');
    out.push_back(a == std::string::npos ? "" : c.substr(a, b - a + 1));
  }
  return out;
}

const json& bench_schema() {
  static const json s = read_json(std::string(NUNCHAKU_SOURCE_DIR) + "/docs/schema/bench.json");
  return s;
}

void conforms(const json& doc) {
  const auto errs = schema_errors(bench_schema(), doc);
  std::string all;
  for (const auto& e : errs) all += e + "\n";
  INFO(all);
  CHECK(errs.empty());
}

}  // namespace

TEST_CASE("bench -p 16 -n 8 -r 3 -b 1,2: llama-bench's markdown table, one row per test and batch", "[bench]") {
  auto r = run_cli({"bench", testdata("run/llama-spm"), "-p", "16", "-n", "8", "-r", "3", "-b", "1,2", "-t", "1", "-q"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto lines = lines_of(r.out);
  REQUIRE(lines.size() == 2 + 4);  // header, separator, pp16 and tg8 at batch 1 and 2
  CHECK(md_cells(lines[0]) == std::vector<std::string>{"model", "size", "params", "backend", "threads", "batch", "test", "t/s"});
  // Text columns left-aligned, numbers right-aligned (llama-bench's "---:").
  const auto sep = md_cells(lines[1]);
  REQUIRE(sep.size() == 8);
  CHECK(sep[0].back() == '-');
  CHECK(sep[3].back() == '-');
  for (size_t c : {1, 2, 4, 5, 6, 7}) CHECK(sep[c].back() == ':');
  const std::vector<std::pair<std::string, std::string>> want = {{"1", "pp16"}, {"1", "tg8"}, {"2", "pp16"}, {"2", "tg8"}};
  for (size_t i = 0; i < want.size(); ++i) {
    const auto cells = md_cells(lines[2 + i]);
    REQUIRE(cells.size() == 8);
    CHECK(cells[0] == "llama 79.8K F32");  // 2·956·32 + 2·(2·1024 + 2·512 + 3·2048 + 2·32) + 32 = 79,776 f32 parameters
    CHECK(cells[3] == "cpu");
    CHECK(cells[4] == "1");
    CHECK(cells[5] == want[i].first);
    CHECK(cells[6] == want[i].second);
    // "mean ± sd", both numbers, the mean a rate above 0.
    const size_t pm = cells[7].find(" ± ");
    REQUIRE(pm != std::string::npos);
    CHECK(std::stod(cells[7].substr(0, pm)) > 0);
    CHECK(std::stod(cells[7].substr(pm + 4)) >= 0);
    CHECK(lines[2 + i].size() == lines[0].size() + 1);  // padded to the columns (one "±" is 2 bytes)
  }
}

TEST_CASE("bench --json: every row has -r samples and the engine's exact token counts", "[bench][json]") {
  const std::string m = testdata("run/llama-spm");
  auto r = run_cli({"bench", m, "-p", "16", "-n", "8", "-r", "3", "-b", "1,2", "-t", "1", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.empty());  // --json, not a terminal: no progress, no notes
  const json j = json::parse(r.out);
  conforms(j);
  CHECK(j["command"] == "bench");
  CHECK(j["format_version"] == 1);
  CHECK(j["path"] == m);
  REQUIRE(j["results"].size() == 4);
  // The model columns as inspect counts the same checkpoint.
  const json ins = json::parse(run_cli({"inspect", m, "--json"}).out);
  for (const auto& row : j["results"]) {
    INFO(row.dump());
    const int b = row["batch_size"];
    const bool pp = row["test"].get<std::string>().starts_with("pp");
    CHECK(row["command"] == "bench");
    CHECK(row["path"] == m);
    CHECK(row["weight_bytes"] == ins["weight_bytes"]);
    CHECK(row["num_repetitions"] == 3);
    CHECK(row["samples_s"].size() == 3);
    CHECK(row["samples_tokens_per_s"].size() == 3);
    CHECK(row["threads"] == 1);
    CHECK(row["n_prompt"] == (pp ? 16 : 0));
    CHECK(row["n_gen"] == (pp ? 0 : 8));
    // Counted by the scheduler: a prefill test prefills 16 per sequence and samples the one
    // token that ends it; a generation test feeds one start token and generates 8.
    CHECK(row["prompt_tokens"] == (pp ? 16 * b : b));
    CHECK(row["completion_tokens"] == (pp ? b : 8 * b));
    const double tokens = pp ? 16.0 * b : 8.0 * b;
    double sum = 0;
    for (size_t k = 0; k < 3; ++k) {
      const double s = row["samples_s"][k], tps = row["samples_tokens_per_s"][k];
      CHECK(s > 0);
      CHECK(tps == Approx(tokens / s).epsilon(1e-9));
      sum += tps;
    }
    CHECK(row["mean_tokens_per_s"].get<double>() == Approx(sum / 3).epsilon(1e-9));
    CHECK(row["sd_tokens_per_s"].get<double>() >= 0);
  }
}

TEST_CASE("bench -o jsonl / csv: one line per row, the same fields, on the GGUF too", "[bench][json]") {
  const std::string m = testdata("convert/gguf/llama-spm.gguf");
  auto l = run_cli({"bench", m, "-p", "8", "-n", "4", "-r", "2", "-b", "1,3", "-o", "jsonl", "-q"});
  INFO(l.err);
  REQUIRE(l.exit_code == 0);
  const auto lines = lines_of(l.out);
  REQUIRE(lines.size() == 4);
  std::vector<std::string> tests;
  for (const auto& line : lines) {
    const json row = json::parse(line);
    conforms(row);
    CHECK(row["format_version"] == 1);
    CHECK(row["path"] == m);
    CHECK(row["samples_s"].size() == 2);
    tests.push_back(row["test"].get<std::string>() + "@" + std::to_string(row["batch_size"].get<int>()));
    if (row["test"] == "tg4") CHECK(row["completion_tokens"] == 4 * row["batch_size"].get<int>());
  }
  CHECK(tests == std::vector<std::string>{"pp8@1", "tg4@1", "pp8@3", "tg4@3"});

  auto c = run_cli({"bench", m, "-p", "8", "-n", "0", "-r", "2", "-o", "csv", "-q"});
  REQUIRE(c.exit_code == 0);
  const auto csv = lines_of(c.out);
  REQUIRE(csv.size() == 2);  // header and the one pp8 row (-n 0: no generation test)
  CHECK(csv[0].starts_with("command,format_version,path,model_type,"));
  CHECK(std::count(csv[0].begin(), csv[0].end(), ',') == std::count(csv[1].begin(), csv[1].end(), ','));
  CHECK(csv[1].find("\"pp8\"") != std::string::npos);
}

TEST_CASE("bench: bad flags are exit 2 naming the flag", "[bench][cli]") {
  const std::string m = testdata("run/llama-spm");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"-p", "abc"}, "-p/--n-prompt takes whole numbers"},
      {{"-n", "8,,16"}, "-n/--n-gen takes whole numbers"},
      {{"-b", "0,2"}, "-b/--batch-size takes whole numbers from 1"},
      {{"-b", "-1"}, "--batch-size: -1 is out of range 1.."},  // the range table's check, as run --batch-size
      {{"-r", "0"}, "-r/--repetitions must be at least 1"},
      {{"-p", "0", "-n", "0"}, "no test to run"},
      {{"--pg", "8"}, "--pg takes PROMPT,GENERATED"},
      {{"-t", "1,,2"}, "-t/--threads takes whole numbers from 1"},
      {{"--pg", "8,0"}, "--pg takes whole numbers from 1"},
      {{"-o", "results.json"}, "(hint: bench writes to stdout"},
      {{"-o", "table"}, "-o/--output takes a format, md, csv, json or jsonl"},
      {{"--json", "-o", "csv"}, "--json and -o csv disagree"},
      {{"--kv-dtype", "q8"}, "--kv-dtype must be auto, f32 or f16"},
      {{"--n-prmpt", "5"}, "did you mean --n-prompt"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = {"bench", m};
    args.insert(args.end(), flags.begin(), flags.end());
    if (flags.front() != "-r") args.insert(args.end(), {"-r", "1"});
    INFO(flags.front() << " " << flags.back());
    auto r = run_cli(args);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(message));
    CHECK(r.out.empty());
  }
  auto missing = run_cli({"bench", testdata("run/no-such-model")});
  CHECK(missing.exit_code == 2);
  // A context no memory holds: exit 3, the hint naming bench's flags (not run's --context).
  auto huge = run_cli({"bench", m, "-p", "1000000000", "-n", "0", "-r", "1"});
  CHECK(huge.exit_code == 3);
  CHECK_THAT(huge.err, Catch::Contains("needs a context of 1000000001 tokens and 1 KV slot: lower -p/-n or -b"));
  CHECK_THAT(huge.err, !Catch::Contains("--context"));
}

TEST_CASE("bench: SIGINT keeps the rows that finished, in the format asked for, exit 130", "[bench][unix]") {
  // pp4 takes milliseconds; tg100000 attends over a growing context of up to 100k positions,
  // minutes of work, so the signal always arrives during it.
  const std::vector<std::string> base = {"bench", testdata("run/llama-spm"), "-p", "4", "-n", "100000", "-r", "1", "-t", "1"};
  TempDir d;
  {
    auto args = base;
    args.insert(args.end(), {"-o", "jsonl"});
    Child c = spawn(args, "/dev/null", "", d.file("err"));
    const std::string first = read_line(c.from_child);  // the pp4 row, written as it finished
    REQUIRE(!first.empty());
    CHECK(json::parse(first)["test"] == "pp4");
    ::kill(c.pid, SIGINT);
    CHECK(wait_exit(c.pid) == 130);
    CHECK(read_line(c.from_child, 5).empty());  // nothing after it
    ::close(c.from_child);
    CHECK_THAT(read_text(d.file("err")), Catch::Contains("interrupted by SIGINT: tg100000 at batch 1 was running; 1 of 2 rows finished"));
  }
  {
    // The Markdown table is written at the end: a stop writes it with the rows done.
    Child c = spawn(base, "/dev/null", d.file("md"), d.file("err2"));
    REQUIRE(wait_catches(c.pid, SIGINT));
    std::this_thread::sleep_for(std::chrono::seconds(2));  // the model loads and pp4 runs in milliseconds
    ::kill(c.pid, SIGINT);
    CHECK(wait_exit(c.pid) == 130);
    const auto lines = lines_of(read_text(d.file("md")));
    REQUIRE(lines.size() == 3);  // header, separator, pp4
    CHECK(md_cells(lines[2])[6] == "pp4");
  }
}

TEST_CASE("bench --pg P,N: llama-bench's prompt-then-generation test counts both", "[bench][json]") {
  auto r = run_cli({"bench", testdata("run/llama-spm"), "-p", "0", "-n", "4", "--pg", "8,4", "--pg", "2,3", "-r", "2", "-b", "2",
                    "-t", "1", "-o", "jsonl"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto lines = lines_of(r.out);
  REQUIRE(lines.size() == 3);
  const std::vector<std::string> names = {"tg4", "pp8+tg4", "pp2+tg3"};
  const std::vector<std::pair<int, int>> per_seq = {{0, 4}, {8, 4}, {2, 3}};  // prompt, generated per sequence
  for (size_t i = 0; i < 3; ++i) {
    const json row = json::parse(lines[i]);
    conforms(row);
    INFO(row.dump());
    CHECK(row["test"] == names[i]);
    const auto [p, n] = per_seq[i];
    CHECK(row["n_prompt"] == p);
    CHECK(row["n_gen"] == n);
    CHECK(row["completion_tokens"] == 2 * n);
    if (p > 0) CHECK(row["prompt_tokens"] == 2 * p);
    const double tokens = 2.0 * (p + n);  // both counted, over both sequences
    for (size_t k = 0; k < 2; ++k)
      CHECK(row["samples_tokens_per_s"][k].get<double>() == Approx(tokens / row["samples_s"][k].get<double>()).epsilon(1e-9));
  }
}

TEST_CASE("bench -t 1,2: each thread count gets every batch size and test, as llama-bench's -t list", "[bench][json]") {
  auto r = run_cli({"bench", testdata("run/llama-spm"), "-p", "8", "-n", "4", "-r", "1", "-b", "1,2", "-t", "1,2", "-o", "jsonl"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto lines = lines_of(r.out);
  REQUIRE(lines.size() == 8);  // 2 thread counts x 2 batch sizes x 2 tests
  std::vector<std::string> order;
  for (const auto& line : lines) {
    const json row = json::parse(line);
    order.push_back(fmt::format("t{} b{} {}", row["threads"].get<int>(), row["batch_size"].get<int>(), row["test"].get<std::string>()));
  }
  CHECK(order == std::vector<std::string>{"t1 b1 pp8", "t1 b1 tg4", "t1 b2 pp8", "t1 b2 tg4",
                                          "t2 b1 pp8", "t2 b1 tg4", "t2 b2 pp8", "t2 b2 tg4"});
}
