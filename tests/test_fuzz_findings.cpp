// What the libFuzzer campaigns found (scripts/fuzz.sh, docs/hardening.md "Campaigns"), each
// finding's input bytes as the fuzzer wrote them, run as a normal test through the CLI.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <vector>

#include "tests/helpers.hpp"

using nunchaku::test::TempDir;
namespace fs = std::filesystem;

TEST_CASE("fuzz_config: a number beyond double range in config.json is exit 2 naming the file", "[hardening][fuzz]") {
  // fuzz-corpus/crashes/fuzz_config-crash-38a00472df6dccd164431c7c8d696fd102062fee, less its
  // first byte (the target's knob): nlohmann's out_of_range 406 (number overflow) was not a
  // parse_error, so it escaped as exit 1 "internal error".
  const std::vector<uint8_t> config = {
      0x7b, 0x0a, 0x20, 0x20, 0x22, 0x61, 0x32, 0x35, 0x45, 0x45, 0x45, 0x45, 0x45, 0x7a, 0x65, 0x68, 0x65, 0x61, 0x6a, 0x6a,
      0x73, 0x22, 0x3a, 0x20, 0x32, 0x35, 0x45, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33,
      0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x45,
      0x45, 0x45, 0x45, 0x45, 0x45, 0x7b, 0x45, 0xff, 0x45, 0x00, 0x65, 0x22, 0x3a, 0x20, 0x33, 0x30, 0x30, 0x0a, 0x7d, 0x0a};
  TempDir tmp;
  const std::string dir = tmp.file("model");
  fs::create_directories(dir);
  fs::copy_file(nunchaku::test::testdata("run/llama-spm/model.safetensors"), dir + "/model.safetensors");
  for (const auto& bytes : {config, std::vector<uint8_t>{'{', '"', 'a', '"', ':', '1', 'E', '4', '0', '0', '}'}}) {
    nunchaku::test::write_file(dir + "/config.json", bytes);
    for (const char* cmd : {"inspect", "estimate"}) {
      const auto r = nunchaku::test::run_cli({cmd, dir});
      CHECK(r.exit_code == 2);
      CHECK(r.err.find("config.json") != std::string::npos);
      CHECK(r.err.find("number overflow") != std::string::npos);
      CHECK(r.err.find("internal error") == std::string::npos);
    }
  }
}
