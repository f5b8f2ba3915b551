// The one progress renderer (cli/progress.hpp) as a user sees it: on a terminal (a pty here)
// a bar, percent, rate and ETA, erased at the end and before results reach the same
// terminal; nothing when stderr is not a terminal.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "tests/helpers.hpp"
#include "tests/pty.hpp"

using namespace nunchaku::test;

TEST_CASE("progress: on a terminal, verify and load draw a bar with percent and rate, then erase it", "[cli][progress]") {
  for (const size_t width : {100, 60}) {
    ::setenv("COLUMNS", std::to_string(width).c_str(), 1);
    for (const auto& [args, what] : std::vector<std::pair<std::vector<std::string>, std::string>>{
             {{"inspect", testdata("models/llama-sharded"), "--verify"}, "verifying"},
             {{"load", testdata("models/llama-sharded"), "--copy"}, "loading"}}) {
      INFO(what << " at " << width << " columns");
      const PtyResult p = run_on_pty(args, false);
      CHECK(p.exit_code == 0);
      const std::string& t = p.text;
      REQUIRE_THAT(t, Catch::Contains("\r" + what));
      if (width == 100) CHECK_THAT(t, Catch::Contains("\r" + what + " [") && Catch::Contains("100% ") && Catch::Contains(" GB/s  ETA "));
      // Every drawn state fits the width; the last thing written erases the line.
      for (size_t at = 0; (at = t.find('\r', at)) != std::string::npos; ++at) {
        const size_t end = std::min(t.find('\r', at + 1), t.size());
        CHECK(columns(t.substr(at + 1, end - at - 1)) < width);
      }
      REQUIRE(t.size() >= 2);
      CHECK(t.back() == '\r');
      CHECK(t.find_first_not_of(' ', t.rfind('\r', t.size() - 2) + 1) == t.size() - 1);
    }
  }
  ::unsetenv("COLUMNS");
}

TEST_CASE("progress: run's counter is erased before each result reaches a shared terminal", "[cli][progress]") {
  TempDir d;
  write_file(d.file("in"), std::string("Once\nThe cat\nA dog\n"));
  const PtyResult p = run_on_pty({"run", testdata("run/llama-spm"), "--raw", "--max-tokens", "4"}, true, d.file("in"));
  CHECK(p.exit_code == 0);
  const std::string& t = p.text;
  size_t results = 0;
  for (size_t at = 0; (at = t.find("{\"command\":\"run\"", at)) != std::string::npos; ++at, ++results)
    CHECK((at == 0 || t[at - 1] == '\r' || t[at - 1] == '\n'));
  CHECK(results == 3);
  CHECK_THAT(t, Catch::Contains("\rrun: 1 request done, ") && Catch::Contains(" generated tok/s"));
}

TEST_CASE("progress: nothing when stderr is not a terminal", "[cli][progress]") {
  TempDir d;
  const std::string m = testdata("models/llama-sharded");
  for (const auto& args : std::vector<std::vector<std::string>>{{"inspect", m, "--verify"},
                                                                 {"load", m, "--copy"},
                                                                 {"convert", m, d.file("out")}}) {
    INFO(args[0]);
    auto r = run_cli(args);
    REQUIRE(r.exit_code == 0);
    CHECK(r.err.find('\r') == std::string::npos);
  }
  auto r = run_cli({"run", testdata("run/llama-spm"), "--max-tokens", "2"}, "Once\n");
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find('\r') == std::string::npos);
}
