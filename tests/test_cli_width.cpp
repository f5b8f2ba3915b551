// Terminal widths (cli/help.cpp output_width): on a terminal of 80 columns (a real pty whose
// window says so) no line of any command's --help, of the estimate, plan and inspect tables on
// the fixtures, or of a progress redraw reaches past column 80; into a pipe nothing is wrapped.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/helpers.hpp"
#include "tests/pty.hpp"

using namespace nunchaku::test;

namespace {
const std::vector<std::string> kCommands = {"inspect", "estimate", "plan",  "load",      "run", "bench",
                                            "tokenize", "convert", "trace", "completion"};
}  // namespace

TEST_CASE("width: every --help fits an 80-column terminal (pty window size, no $COLUMNS)", "[cli][width][pty]") {
  const ScopedEnv no_columns("COLUMNS", nullptr);
  std::vector<std::vector<std::string>> helps = {{"--help"}};
  for (const auto& c : kCommands) helps.push_back({c, "--help"});
  for (const auto& args : helps) {
    INFO(args.front());
    const PtyResult r = run_on_pty(args, true, "/dev/null", 80);
    CHECK(r.exit_code == 0);
    CHECK(r.text.size() > 200);
    CHECK(widest_on_terminal(r.text) <= 80);
  }
  // The same help at 120 columns uses them: the layout follows the window, not a constant.
  const PtyResult wide = run_on_pty({"run", "--help"}, true, "/dev/null", 120);
  CHECK(widest_on_terminal(wide.text) > 80);
  CHECK(widest_on_terminal(wide.text) <= 120);
}

TEST_CASE("width: estimate, plan and inspect tables fit 80 columns on the fixtures", "[cli][width][pty]") {
  const ScopedEnv no_columns("COLUMNS", nullptr);
  const std::string llama = testdata("models/llama"), mixtral = testdata("models/mixtral");
  const std::vector<std::vector<std::string>> cases = {
      {"estimate", llama, "--context", "256", "--batch", "4", "--vram", "1G"},
      {"estimate", llama, "--vram", "1G", "--explain"},
      {"estimate", llama, "--runtime", "all", "--vram", "1G"},
      {"estimate", llama, "--runtime", "all", "--mode", "train", "--vram", "1G"},
      {"estimate", mixtral, "--vram", "10K"},
      {"estimate", testdata("models/gemma2"), "--vram", "10K"},
      {"plan", llama, "--vram", "600M,600M"},
      {"plan", llama, "--vram", "100K", "--cpu-ram", "1M"},
      {"plan", llama, "--vram", "100K", "--cpu-ram", "100K", "--disk"},
      {"plan", llama, "--vram", "1G,1G,1G,1G", "--mode", "train"},
      {"plan", mixtral, "--vram", "200K"},
      {"inspect", testdata("models/llama-sharded")},
      {"inspect", mixtral},
      {"inspect", testdata("models/llama-gguf/model.gguf"), "--tensors"},
      {"inspect", testdata("models/llama-gguf/model.gguf"), "--metadata"},
  };
  for (const auto& args : cases) {
    INFO(args[0] << " " << args[1] << " " << args.back());
    const PtyResult r = run_on_pty(args, true, "/dev/null", 80);
    CHECK((r.exit_code == 0 || r.exit_code == 3));
    CHECK(widest_on_terminal(r.text) <= 80);
  }
  // plan's table at 80 leaves columns out and says which; at 200 it has all nine.
  const PtyResult narrow = run_on_pty({"plan", llama, "--vram", "600M,600M"}, true, "/dev/null", 80);
  CHECK_THAT(narrow.text, Catch::Contains("left out to fit 80 columns"));
  const PtyResult wide = run_on_pty({"plan", llama, "--vram", "600M,600M"}, true, "/dev/null", 200);
  CHECK_THAT(wide.text, Catch::Matches("[\\s\\S]*device +layers +weights +KV +activations +reserve +total +budget +free\\r\\n[\\s\\S]*"));
  CHECK_THAT(wide.text, !Catch::Contains("left out"));
}

TEST_CASE("width: inspect puts a long checkpoint path on a line of its own at 80 columns", "[cli][width][pty]") {
  const ScopedEnv no_columns("COLUMNS", nullptr);
  // A copy of the sharded fixture whose path, about 70 columns here, fits 80 alone but not
  // with ": safetensors, 5 files, 419.45 KiB" after it (the first line was 83+ columns in a
  // mktemp checkout).
  TempDir t;
  const std::filesystem::path dir = t.path / std::string(std::max<int>(1, 64 - int(t.path.string().size())), 'd') / "llama-sharded";
  std::filesystem::create_directories(dir);
  for (const auto& e : std::filesystem::directory_iterator(testdata("models/llama-sharded")))
    std::filesystem::copy_file(e.path(), dir / e.path().filename());
  REQUIRE(dir.string().size() + 1 <= 80);
  const PtyResult r = run_on_pty({"inspect", dir.string()}, true, "/dev/null", 80);
  CHECK(r.exit_code == 0);
  CHECK(widest_on_terminal(r.text) <= 80);
  CHECK_THAT(r.text, Catch::StartsWith(dir.string() + ":\r\n  safetensors, 5 files, "));
  // Into a pipe nothing is wrapped: one line, as scripts read it.
  const auto piped = run_cli({"inspect", dir.string()});
  CHECK_THAT(piped.out, Catch::StartsWith(dir.string() + ": safetensors, 5 files, "));
}

TEST_CASE("width: the load and --verify progress redraws stay within 79 of 80 columns", "[cli][width][pty][progress]") {
  const ScopedEnv no_columns("COLUMNS", nullptr);
  for (const auto& args : std::vector<std::vector<std::string>>{{"inspect", testdata("models/llama-sharded"), "--verify"},
                                                                 {"load", testdata("models/llama-sharded"), "--copy"}}) {
    INFO(args[0]);
    const PtyResult r = run_on_pty(args, false, "/dev/null", 80);  // only stderr on the terminal: the progress line
    CHECK(r.exit_code == 0);
    REQUIRE_THAT(r.text, Catch::Contains(" [") && Catch::Contains("100% "));
    // A redraw that reached column 80 would move the cursor to the next line and leave it behind.
    CHECK(widest_on_terminal(r.text) <= 79);
  }
}

TEST_CASE("width: into a pipe without $COLUMNS nothing is wrapped, and $COLUMNS narrows a pipe", "[cli][width]") {
  const ScopedEnv no_columns("COLUMNS", nullptr);
  auto h = run_cli({"run", "--help"});
  REQUIRE(h.exit_code == 0);
  // A footer paragraph is one line (at 80 columns it takes several).
  CHECK_THAT(h.out, Catch::Contains("Input: one request per line, read as it arrives (a request joins the running batch at once), or one PROMPT"));
  ::setenv("COLUMNS", "80", 1);
  auto narrow = run_cli({"run", "--help"});
  ::unsetenv("COLUMNS");
  CHECK(widest(narrow.out) <= 80);
  CHECK(widest(h.out) > 80);
}
