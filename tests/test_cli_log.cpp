// Diagnostics: -v / -vv / NUNCHAKU_LOG through the one logger (src/core/log.hpp), on stderr
// only, off by default.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <regex>

#include <nlohmann/json.hpp>

#include "tests/helpers.hpp"

using nlohmann::json;
using namespace nunchaku::test;

namespace {
size_t count_lines(const std::string& text, const std::string& prefix) {
  size_t n = 0;
  for (size_t at = 0; (at = text.find(prefix, at)) != std::string::npos; at += prefix.size())
    n += at == 0 || text[at - 1] == '\n';
  return n;
}
}  // namespace

TEST_CASE("log: off by default, -v says what was opened, stdout does not change", "[cli][log]") {
  const std::string m = testdata("models/llama");
  const json fx = read_json(testdata("expected/fixtures.json"))["fixtures"]["models/llama"];
  auto plain = run_cli({"inspect", m});
  REQUIRE(plain.exit_code == 0);
  CHECK(plain.err.empty());
  for (const auto& args : std::vector<std::vector<std::string>>{{"inspect", m, "-v"}, {"-v", "inspect", m}, {"inspect", m, "--verbose"}}) {
    auto v = run_cli(args);
    REQUIRE(v.exit_code == 0);
    CHECK(v.out == plain.out);
    const std::regex opened("nunchaku: info \\+[0-9.]+s: opened " + m + ": safetensors, 1 file, " +
                            std::to_string(fx["tensor_count"].get<int>()) + " tensors \\([0-9.]+ ms, headers only\\)\n");
    CHECK(std::regex_search(v.err, opened));
    CHECK(count_lines(v.err, "nunchaku: debug") == 0);
  }
}

TEST_CASE("log: -vv and NUNCHAKU_LOG=debug show plan decisions, one line per module", "[cli][log]") {
  const std::string m = testdata("models/llama");
  auto j = run_cli({"plan", m, "--vram", "600M", "--json"});
  REQUIRE(j.exit_code == 0);
  const size_t modules = json::parse(j.out)["device_map"].size();
  REQUIRE(modules > 0);
  auto vv = run_cli({"plan", m, "--vram", "600M", "-vv"});
  REQUIRE(vv.exit_code == 0);
  CHECK(count_lines(vv.err, "nunchaku: info ") >= 2);  // opened, plan
  CHECK(count_lines(vv.err, "nunchaku: debug ") >= modules);
  CHECK_THAT(vv.err, Catch::Contains("plan: model.layers.0 -> cuda:0"));
  ::setenv("NUNCHAKU_LOG", "debug", 1);
  auto env = run_cli({"plan", m, "--vram", "600M"});
  ::setenv("NUNCHAKU_LOG", "error", 1);
  auto quiet = run_cli({"plan", m, "--vram", "600M", "-v"});  // error, lowered one step: warn
  ::unsetenv("NUNCHAKU_LOG");
  CHECK(count_lines(env.err, "nunchaku: debug ") == count_lines(vv.err, "nunchaku: debug "));
  CHECK(quiet.err.empty());
}

TEST_CASE("log: a bad NUNCHAKU_LOG is exit 2, warnings go through the logger and obey it", "[cli][log]") {
  const std::string m = testdata("models/llama");
  ::setenv("NUNCHAKU_LOG", "verbose", 1);
  auto bad = run_cli({"inspect", m});
  ::unsetenv("NUNCHAKU_LOG");
  CHECK(bad.exit_code == 2);
  CHECK(bad.err == "nunchaku: error: NUNCHAKU_LOG=verbose is not a log level (hint: one of debug, info, warn, error, off)\n");
  // The engine's NUNCHAKU_ISA warning: shown by default, silenced by NUNCHAKU_LOG=error.
  ::setenv("NUNCHAKU_ISA", "sse9", 1);
  auto warned = run_cli({"inspect", m});
  ::setenv("NUNCHAKU_LOG", "error", 1);
  auto silenced = run_cli({"inspect", m});
  ::unsetenv("NUNCHAKU_LOG");
  ::unsetenv("NUNCHAKU_ISA");
  CHECK(warned.err == "nunchaku: warning: NUNCHAKU_ISA=sse9 is not one of scalar, avx2, avx512; ignored\n");
  CHECK(silenced.err.empty());
}

TEST_CASE("log: -v on run reports the load phases and the engine on stderr, the results alone on stdout", "[cli][log]") {
  auto r = run_cli({"run", testdata("run/llama-spm"), "--max-tokens", "2", "-q", "-v"}, "Once upon a time\n");
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("nunchaku: info ") && Catch::Contains(": load: ") && Catch::Contains(": engine: llama, 2 layers"));
  CHECK(json::parse(r.out)["finish_reason"] == "length");
}
