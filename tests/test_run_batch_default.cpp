// run's default --batch-size (issue 38 item 3): auto (the most sequences that fit the budget,
// capped) for batch input, 1 for one PROMPT and with --plan; estimate names what that default
// will take for the same budget, and the run then takes exactly that and keeps it in budget.
#include <catch2/catch.hpp>

#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/helpers.hpp"

using namespace nunchaku::test;
using nlohmann::json;

namespace {
// "batch size auto: N (" on run's stderr, or "nunchaku run's default, --batch-size auto: N
// sequence" in estimate's text; -1 when absent.
int number_after(const std::string& text, const std::string& pattern) {
  std::smatch m;
  return std::regex_search(text, m, std::regex(pattern + "([0-9]+)")) ? std::stoi(m[1].str()) : -1;
}
}  // namespace

TEST_CASE("run: the default batch is auto for batch input, as estimate says for the same --cpu-ram", "[run][batch]") {
  TempDir d;
  const std::string spm = testdata("run/llama-spm");
  const std::string budget = "1140K";
  const auto est = run_cli({"estimate", spm, "--device", "cpu", "--cpu-ram", budget, "--runtime", "nunchaku"});
  REQUIRE(est.exit_code == 0);
  const int predicted = number_after(est.out, "run's default, --batch-size auto: ");
  INFO(est.out);
  REQUIRE(predicted >= 1);
  CHECK(predicted < 16);  // the budget, not the cap, decides here
  const auto ej = run_cli({"estimate", spm, "--device", "cpu", "--cpu-ram", budget, "--runtime", "nunchaku", "--json"});
  REQUIRE(ej.exit_code == 0);
  const json doc = json::parse(ej.out);
  CHECK(doc.at("run_default_batch").at("batch_size").get<int>() == predicted);

  const auto r = run_cli({"run", spm, "--raw", "-n", "2", "--cpu-ram", budget, "--stats", d.file("s.json")}, "Once\nThe cat\n");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(number_after(r.err, "batch size auto: ") == predicted);
  const json s = read_json(d.file("s.json"));
  CHECK(s.at("batch_size").get<int>() == predicted);
  // It keeps every weight resident (auto never trades a resident layer for a larger batch)
  // and what it allocated is within the budget: 1140 KiB = 1167360 B.
  CHECK(s.at("weights").at("streamed_bytes_per_step").get<uint64_t>() == 0);
  const int64_t total = std::stoll(std::regex_replace(r.err, std::regex("[\\s\\S]*memory: [^\\n]*\\(([0-9]+) B\\)[\\s\\S]*"), "$1"));
  CHECK(total <= 1167360);
  // A typed --batch in estimate is the question asked: no line about run's default.
  const auto typed = run_cli({"estimate", spm, "--device", "cpu", "--cpu-ram", budget, "--runtime", "nunchaku", "--batch", "4"});
  CHECK_THAT(typed.out, !Catch::Contains("run's default"));
}

TEST_CASE("run: one PROMPT decodes one sequence by default, batch input up to the cap", "[run][batch]") {
  TempDir d;
  const std::string spm = testdata("run/llama-spm");
  const auto one = run_cli({"run", spm, "Once", "-n", "2", "--raw", "--format", "jsonl", "--stats", d.file("one.json")});
  INFO(one.err);
  REQUIRE(one.exit_code == 0);
  CHECK(read_json(d.file("one.json")).at("batch_size").get<int>() == 1);
  CHECK_THAT(one.err, !Catch::Contains("batch size auto"));
  // Without a budget the host's available memory is the budget: a 319 KiB model's run state
  // at 16 sequences is a few MiB, so the CPU cap (16) decides on any machine that runs tests.
  const auto many = run_cli({"run", spm, "-n", "1", "--raw", "--stats", d.file("many.json")}, "Once\n");
  INFO(many.err);
  REQUIRE(many.exit_code == 0);
  CHECK(number_after(many.err, "batch size auto: ") == 16);
  CHECK(read_json(d.file("many.json")).at("batch_size").get<int>() == 16);
  // --batch-size N is taken as typed.
  const auto typed = run_cli({"run", spm, "-n", "1", "--raw", "--batch-size", "3", "--stats", d.file("typed.json")}, "Once\n");
  REQUIRE(typed.exit_code == 0);
  CHECK(read_json(d.file("typed.json")).at("batch_size").get<int>() == 3);
}
