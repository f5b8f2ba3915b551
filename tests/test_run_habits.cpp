// run with llama.cpp's habits (issue 38): a PROMPT argument or -p, -n/-c/--temp/-t/-s as
// aliases of the long options, and --format text streaming the generated text; checked
// against transformers' greedy continuations of the fixtures (testdata/run/*/expected.json,
// scripts/make_run_fixture.py) and against run's own JSONL.
#include <catch2/catch.hpp>

#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/helpers.hpp"
#include "tests/pty.hpp"

using namespace nunchaku::test;
using nlohmann::json;

namespace {
json first_line(const std::string& out) { return json::parse(out.substr(0, out.find('\n'))); }
}  // namespace

TEST_CASE("run -p/PROMPT --format text prints transformers' greedy continuation", "[run][habits]") {
  for (const std::string name : {"llama-spm", "qwen2-bpe"}) {
    const json exp = read_json(testdata("run/" + name + "/expected.json"));
    const std::string n = std::to_string(exp["max_tokens"].get<int>());
    for (const auto& c : exp["cases"]) {
      const bool chat = c["mode"] != "raw";
      if (chat && c["prompt"].size() != 1) continue;  // a PROMPT is one user turn
      const std::string prompt = chat ? c["prompt"][0]["content"].get<std::string>() : c["prompt"].get<std::string>();
      std::vector<std::string> args = {"run", testdata("run/" + name), "-p", prompt, "-n", n, "--temp", "0", "--format", "text", "-q"};
      if (!chat) args.push_back("--raw");
      INFO(name << ": " << prompt);
      auto r = run_cli(args);
      REQUIRE(r.exit_code == 0);
      CHECK(r.out == c["text"].get<std::string>() + "\n");
      // The positional PROMPT is the same request; JSONL (the default into a pipe) has the same text.
      args.erase(args.begin() + 2);  // "-p"
      args.erase(std::find(args.begin(), args.end(), "--format"), std::find(args.begin(), args.end(), "--format") + 2);
      auto j = run_cli(args);
      REQUIRE(j.exit_code == 0);
      CHECK(first_line(j.out)["text"] == c["text"]);
      CHECK(j.out.find('\n') == j.out.size() - 1);  // one request, one line
    }
  }
}

TEST_CASE("run: the GGUF model through -p -n --temp 0 --format text equals its JSONL text", "[run][habits]") {
  const std::string m = testdata("convert/gguf/llama-spm.gguf");
  const std::vector<std::string> base = {"run", m, "-p", "Once upon a time", "-n", "16", "--temp", "0", "--raw", "-q"};
  auto text = base, jsonl = base;
  text.insert(text.end(), {"--format", "text"});
  jsonl.insert(jsonl.end(), {"--format", "jsonl"});
  auto t = run_cli(text), j = run_cli(jsonl);
  REQUIRE(t.exit_code == 0);
  REQUIRE(j.exit_code == 0);
  const json r = first_line(j.out);
  CHECK(r["token_ids"].size() == 16);
  CHECK(t.out == r["text"].get<std::string>() + "\n");
}

TEST_CASE("run: llama.cpp's short options are the long ones", "[run][habits]") {
  const std::string m = testdata("run/llama-spm");
  auto strip = [](json j) {
    j.erase("timings");
    return j;
  };
  auto a = run_cli({"run", m, "-p", "The cat", "-n", "5", "-c", "64", "--temp", "0.9", "-s", "7", "-t", "1", "-q"});
  auto b = run_cli({"run", m, "--prompt", "The cat", "--n-predict", "5", "--ctx-size", "64", "--temperature", "0.9", "--seed",
                    "7", "--threads", "1", "-q"});
  auto c = run_cli({"run", m, "--max-tokens", "5", "--context", "64", "--temperature", "0.9", "--seed", "7", "--threads", "1", "-q"},
                   "The cat\n");
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  REQUIRE(c.exit_code == 0);
  CHECK(strip(first_line(a.out)) == strip(first_line(b.out)));
  CHECK(strip(first_line(a.out)) == strip(first_line(c.out)));
  CHECK(first_line(a.out)["usage"]["completion_tokens"].get<int>() <= 5);
  // -c is the context: a prompt longer than it fails the (one) request, exit 2.
  auto small = run_cli({"run", m, "-p", std::string(400, 'a'), "-c", "16", "-q"});
  CHECK(small.exit_code == 2);
  CHECK_THAT(first_line(small.out)["error"].dump(), Catch::Contains("context"));
  // -s changes the sample.
  auto other = run_cli({"run", m, "-p", "The cat", "-n", "5", "-c", "64", "--temp", "0.9", "-s", "8", "-t", "1", "-q"});
  CHECK(first_line(other.out)["token_ids"] != first_line(a.out)["token_ids"]);
}

TEST_CASE("run: typos of the new options still get a hint, and two inputs are refused", "[run][habits][cli]") {
  const std::string m = testdata("run/llama-spm");
  for (const auto& [typo, meant] : std::vector<std::pair<std::string, std::string>>{
           {"--tmep", "--temp"}, {"--n-predic", "--n-predict"}, {"--ctx-sise", "--ctx-size"}, {"--max-token", "--max-tokens"},
           {"--promt", "--prompt"}, {"--formt", "--format"}}) {
    INFO(typo);
    auto r = run_cli({"run", m, typo, "1"});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("did you mean " + meant + "?"));
  }
  auto both = run_cli({"run", m, "hi", "-p", "there"});
  CHECK(both.exit_code == 2);
  TempDir d;
  write_file(d.file("in"), std::string("hi\n"));
  auto two = run_cli({"run", m, "hi", "-i", d.file("in")});
  CHECK(two.exit_code == 2);
  CHECK_THAT(two.err, Catch::Contains("two inputs"));
  CHECK(two.out.empty());
  auto fmt = run_cli({"run", m, "hi", "--format", "yaml"});
  CHECK(fmt.exit_code == 2);
  CHECK_THAT(fmt.err, Catch::Contains("--format must be jsonl or text"));
}

TEST_CASE("run --format text: requests' texts in input order, a stop string cut as in JSONL, errors on stderr", "[run][habits]") {
  const std::string m = testdata("run/llama-spm");
  const std::string in = "Once upon a time\nThe quick brown fox\nhello world\n";
  const std::vector<std::string> base = {"run", m, "--raw", "-n", "12", "--batch-size", "2", "-q"};
  auto j = run_cli(base, in);
  auto args = base;
  args.insert(args.end(), {"--format", "text"});
  auto t = run_cli(args, in);
  REQUIRE(j.exit_code == 0);
  REQUIRE(t.exit_code == 0);
  std::string expected;
  std::istringstream lines(j.out);
  std::vector<std::string> texts;
  for (std::string l; std::getline(lines, l);) texts.push_back(json::parse(l)["text"]), expected += texts.back() + "\n";
  REQUIRE(texts.size() == 3);
  CHECK(t.out == expected);
  // A stop string from the middle of the third text: what streaming showed never passes it.
  const std::string stop = "bers";
  REQUIRE(texts[2].find(stop) != std::string::npos);
  REQUIRE(texts[2].find(stop) > 4);
  auto sj = run_cli({"run", m, "--raw", "-n", "12", "--stop", stop, "-q"}, in);
  auto st = run_cli({"run", m, "--raw", "-n", "12", "--stop", stop, "-q", "--format", "text"}, in);
  std::string cut;
  std::istringstream sl(sj.out);
  for (std::string l; std::getline(sl, l);) cut += json::parse(l)["text"].get<std::string>() + "\n";
  CHECK(st.out == cut);
  CHECK(cut.size() < expected.size());
  CHECK(st.out.find(stop) == std::string::npos);
  // A request that cannot run: its error on stderr, the others printed (exit 0 for batch input).
  auto e = run_cli({"run", m, "--raw", "-n", "4", "-q", "--format", "text"}, "hi\n{\"prompt\": 5}\nhello\n");
  CHECK(e.exit_code == 0);
  CHECK_THAT(e.err, Catch::Contains("request 1: error:"));
  CHECK(std::count(e.out.begin(), e.out.end(), '\n') >= 2);
}

TEST_CASE("run PROMPT: text on a terminal by default, JSONL into a pipe", "[run][habits][pty]") {
  const std::string m = testdata("run/llama-spm");
  const PtyResult tty = run_on_pty({"run", m, "Once upon a time", "--raw", "-n", "12", "-q"}, true, "/dev/null", 80);
  CHECK(tty.exit_code == 0);
  const json exp = read_json(testdata("run/llama-spm/expected.json"));
  std::string want = exp["cases"][0]["text"].get<std::string>() + "\r\n";  // the terminal's line end
  CHECK(tty.text == want);
  auto piped = run_cli({"run", m, "Once upon a time", "--raw", "-n", "12", "-q"});
  CHECK(first_line(piped.out)["text"] == exp["cases"][0]["text"]);
}

TEST_CASE("run --json is --format jsonl, as every command's --json", "[run][habits]") {
  const std::string m = testdata("run/llama-spm");
  auto j = run_cli({"run", m, "-p", "The cat", "-n", "3", "--temp", "0", "--raw", "-q", "--json"});
  auto f = run_cli({"run", m, "-p", "The cat", "-n", "3", "--temp", "0", "--raw", "-q", "--format", "jsonl"});
  REQUIRE(j.exit_code == 0);
  REQUIRE(f.exit_code == 0);
  json a = first_line(j.out), b = first_line(f.out);
  a.erase("timings"), b.erase("timings");
  CHECK(a == b);
  CHECK(a["command"] == "run");
  auto bad = run_cli({"run", m, "-p", "The cat", "--json", "--format", "text"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("--json and --format text disagree"));
}
