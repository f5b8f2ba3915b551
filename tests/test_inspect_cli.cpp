// End-to-end: the nunchaku binary's inspect subcommand on committed fixtures,
// checked against what the reference Python libraries read back
// (testdata/expected/fixtures.json), and its error contract on bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/helpers.hpp"

using nlohmann::json;
using namespace nunchaku::test;

namespace {
json expected_fixtures() {
  std::ifstream f(testdata("expected/fixtures.json"));
  return json::parse(f)["fixtures"];
}
}  // namespace

TEST_CASE("inspect --json: counts match the reference libraries for every fixture", "[inspect][cli]") {
  json fx = expected_fixtures();
  REQUIRE(fx.size() >= 10);
  for (auto& [rel, e] : fx.items()) {
    INFO("fixture " << rel);
    auto r = run_cli({"inspect", "--json", testdata(rel)});
    REQUIRE(r.exit_code == 0);
    json j = json::parse(r.out);
    CHECK(j["format"] == e["format"]);
    CHECK(j["tensor_count"] == e["tensor_count"]);
    CHECK(j["parameter_count"] == e["parameter_count"]);
    CHECK(j["total_bytes"] == e["total_bytes"]);
    CHECK(j["files"].size() == e["files"].size());
    CHECK(j["tensors"].size() == e["tensors"].size());
    uint64_t dtype_bytes = 0;
    for (auto& [_, d] : j["dtypes"].items()) dtype_bytes += d["bytes"].get<uint64_t>();
    CHECK(dtype_bytes == e["total_bytes"].get<uint64_t>());
  }
}

TEST_CASE("inspect: text summary of the sharded llama names layers and parameters", "[inspect][cli]") {
  json e = expected_fixtures()["models/llama-sharded"];
  auto r = run_cli({"inspect", testdata("models/llama-sharded")});
  REQUIRE(r.exit_code == 0);
  std::string params = std::to_string(e["parameter_count"].get<uint64_t>());
  // printed with thousands separators
  std::string with_commas;
  for (size_t i = 0; i < params.size(); ++i) {
    if (i && (params.size() - i) % 3 == 0) with_commas += ',';
    with_commas += params[i];
  }
  CHECK(r.out.find(with_commas) != std::string::npos);
  CHECK(r.out.find("safetensors, 5 files") != std::string::npos);
  CHECK(r.out.find("model.layers.0-1") != std::string::npos);
  CHECK(r.out.find("lm_head") != std::string::npos);
}

TEST_CASE("inspect --filter narrows tensors and totals", "[inspect][cli]") {
  auto r = run_cli({"inspect", "--json", "--filter", "blk.0.*", testdata("models/llama-gguf/model.gguf")});
  REQUIRE(r.exit_code == 0);
  json j = json::parse(r.out);
  REQUIRE(j["tensor_count"].get<int>() > 0);
  for (auto& t : j["tensors"]) CHECK(t["name"].get<std::string>().rfind("blk.0.", 0) == 0);
  CHECK(j["tensor_count"] == j["tensors"].size());
}

TEST_CASE("inspect --verify reads every byte and finds no NaN in a clean fixture", "[inspect][cli]") {
  json e = expected_fixtures()["models/llama"];
  auto r = run_cli({"inspect", "--json", "--verify", testdata("models/llama")});
  REQUIRE(r.exit_code == 0);
  json v = json::parse(r.out)["verify"];
  CHECK(v["ok"] == true);
  CHECK(v["bytes_read"] == e["total_bytes"]);
  CHECK(v["tensors_with_nan"] == 0);
}

TEST_CASE("inspect --verify counts NaN and Inf", "[inspect][cli]") {
  TempDir d;
  // F32 [4]: 1.0, NaN, +Inf, -Inf
  std::string header = R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  while (header.size() % 8) header += ' ';
  std::vector<uint8_t> b(8);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(n >> (8 * i));
  b.insert(b.end(), header.begin(), header.end());
  const uint8_t data[16] = {0, 0, 0x80, 0x3f, 0, 0, 0xc0, 0x7f, 0, 0, 0x80, 0x7f, 0, 0, 0x80, 0xff};
  b.insert(b.end(), data, data + 16);
  write_file(d.file("nan.safetensors"), b);
  auto r = run_cli({"inspect", "--json", "--verify", d.file("nan.safetensors")});
  REQUIRE(r.exit_code == 0);
  json v = json::parse(r.out)["verify"];
  CHECK(v["ok"] == false);
  REQUIRE(v["nonfinite"].size() == 1);
  CHECK(v["nonfinite"][0]["nan"] == 1);
  CHECK(v["nonfinite"][0]["inf"] == 2);
}

TEST_CASE("inspect: bad input is one line on stderr naming the file, exit 2", "[inspect][cli]") {
  TempDir d;
  write_file(d.file("junk.bin"), std::string("this is not a checkpoint at all"));
  auto r = run_cli({"inspect", d.file("junk.bin")});
  CHECK(r.exit_code == 2);
  CHECK(r.out.empty());
  CHECK(r.err.find(d.file("junk.bin")) != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);

  auto missing = run_cli({"inspect", d.file("nope")});
  CHECK(missing.exit_code == 2);

  auto usage = run_cli({"inspect"});
  CHECK(usage.exit_code == 2);
}

TEST_CASE("inspect: every real shared test file indexes; broken.pt fails cleanly", "[inspect][cli][shared]") {
  NUNCHAKU_REQUIRE_SHARED();
  for (const char* rel : {"gguf/stories260K.gguf", "safetensors/mnist.safetensors", "pytorch/mnist.pt",
                          "safetensors/minicpm3", "vocab/ggml-vocab-llama-spm.gguf"}) {
    INFO(rel);
    auto r = run_cli({"inspect", "--json", shared_testfile(rel)});
    CHECK(r.exit_code == 0);
    if (r.exit_code != 0) WARN(r.err);
  }
  auto b = run_cli({"inspect", shared_testfile("pytorch/broken.pt")});
  CHECK(b.exit_code == 2);
  CHECK(b.err.find("broken.pt") != std::string::npos);
}

TEST_CASE("version: --version says whether CUDA is compiled in and lists devices or none", "[cli]") {
  auto r = run_cli({"--version"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("nunchaku 0.") == 0);
  CHECK(r.out.find("CUDA: ") != std::string::npos);
  CHECK(r.out.find("CUDA device") != std::string::npos);
}
