// End-to-end: the nunchaku binary's inspect subcommand on committed fixtures,
// checked against what the reference Python libraries read back
// (testdata/expected/fixtures.json), and its error contract on bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/helpers.hpp"
#include "tests/pty.hpp"

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
    CHECK(j["num_tensors"] == e["tensor_count"]);
    CHECK(j["num_parameters"] == e["parameter_count"]);
    CHECK(j["weight_bytes"] == e["total_bytes"]);
    CHECK(j["files"].size() == e["files"].size());
    CHECK(j["tensors"].size() == e["tensors"].size());
    uint64_t dtype_bytes = 0;
    for (auto& [_, d] : j["dtypes"].items()) dtype_bytes += d["weight_bytes"].get<uint64_t>();
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
  REQUIRE(j["num_tensors"].get<int>() > 0);
  for (auto& t : j["tensors"]) CHECK(t["name"].get<std::string>().rfind("blk.0.", 0) == 0);
  CHECK(j["num_tensors"] == j["tensors"].size());
}

TEST_CASE("inspect --verify reads every byte and finds no NaN in a clean fixture", "[inspect][cli]") {
  json e = expected_fixtures()["models/llama"];
  auto r = run_cli({"inspect", "--json", "--verify", testdata("models/llama")});
  REQUIRE(r.exit_code == 0);
  json v = json::parse(r.out)["verify"];
  CHECK(v["ok"] == true);
  CHECK(v["read_bytes"] == e["total_bytes"]);
  CHECK(v["num_tensors_with_nan"] == 0);
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
  CHECK(v["nonfinite"][0]["num_nan"] == 1);
  CHECK(v["nonfinite"][0]["num_inf"] == 2);
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

TEST_CASE("inspect: every real shared test file indexes, broken.pt fails cleanly", "[inspect][cli][shared]") {
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

namespace {
// The lines of `text` between "metadata (" and the next blank line.
std::vector<std::string> metadata_rows(const std::string& text) {
  std::vector<std::string> rows;
  const size_t at = text.find("\nmetadata (");
  if (at == std::string::npos) return rows;
  std::istringstream in(text.substr(at + 1));
  std::string line;
  std::getline(in, line);  // the heading
  while (std::getline(in, line) && !line.empty()) rows.push_back(line);
  return rows;
}
}  // namespace

TEST_CASE("inspect --metadata: GGUF keys in text, arrays cut with their length, <= 100 columns", "[inspect][cli][metadata]") {
  const std::string rel = "models/llama-gguf/model.gguf";
  const json e = expected_fixtures()[rel]["config"];
  const ScopedEnv columns("COLUMNS", "100");
  auto r = run_cli({"inspect", testdata(rel), "--metadata"});
  REQUIRE(r.exit_code == 0);
  // One row per key GGUFReader counts, plus the reader's own gguf.version/alignment/tensor_data_offset.
  const auto rows = metadata_rows(r.out);
  CHECK(rows.size() == e["kv_count"].get<size_t>() + 3);
  CHECK_THAT(r.out, Catch::Contains("\nmetadata (" + std::to_string(rows.size()) + " keys):\n"));
  // Values written by scripts/make_testdata.py (gguf-py's add_name, add_array, add_token_scores).
  CHECK_THAT(r.out, Catch::Matches("[\\s\\S]*\n  general\\.name +nunchaku tiny llama\n[\\s\\S]*"));
  CHECK_THAT(r.out, Catch::Matches("[\\s\\S]*\n  nunchaku\\.test\\.nested +\\[\\[1, 2, 3\\], \\[4, 5\\]\\]\n[\\s\\S]*"));
  const std::string vocab = std::to_string(e["vocab_size"].get<int>());
  CHECK_THAT(r.out, Catch::Matches("[\\s\\S]*\n  tokenizer\\.ggml\\.scores +\\[0\\.0, -1\\.0, -2\\.0, [^\n]*, \\.\\.\\.\\] \\(" +
                                   vocab + " items\\)\n[\\s\\S]*"));
  CHECK(widest(r.out) <= 100);
  // Without the flag: the count and how to see them.
  auto plain = run_cli({"inspect", testdata(rel)});
  CHECK_THAT(plain.out, Catch::Contains("metadata     " + std::to_string(rows.size()) + " keys (--metadata shows them)"));
  CHECK(metadata_rows(plain.out).empty());
}

TEST_CASE("inspect --metadata: hostile safetensors values are escaped and cut to the width", "[inspect][cli][metadata]") {
  TempDir d;
  // __metadata__ with an ANSI colour, a newline, a right-to-left override and a 5000-byte value.
  std::string header = R"({"__metadata__":{"evil":"a\u001b[31mred\nline\u202e","long":")" + std::string(5000, 'x') +
                       R"("},"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  while (header.size() % 8) header += ' ';
  std::vector<uint8_t> b(8);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(uint64_t(header.size()) >> (8 * i));
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), 4, 0);
  write_file(d.file("m.safetensors"), b);
  for (const char* cols : {"100", "60"}) {
    INFO("COLUMNS=" << cols);
    ::setenv("COLUMNS", cols, 1);
    auto r = run_cli({"inspect", d.file("m.safetensors"), "--metadata"});
    ::unsetenv("COLUMNS");
    REQUIRE(r.exit_code == 0);
    const auto rows = metadata_rows(r.out);
    REQUIRE(rows.size() == 2);
    CHECK(rows[0] == "  evil  a\\x1B[31mred\\nline\\u{202E}");
    CHECK(r.out.find('\x1b') == std::string::npos);
    CHECK_THAT(rows[1], Catch::StartsWith("  long  xxxx") && Catch::EndsWith("x..."));
    CHECK(columns(rows[1]) <= size_t(std::stoi(cols)));
    CHECK(columns(rows[1]) >= size_t(std::stoi(cols)) - 10);  // cut to the width, not far short of it
  }
  // No metadata at all: said so.
  std::string bare = R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  while (bare.size() % 8) bare += ' ';
  std::vector<uint8_t> c(8);
  for (int i = 0; i < 8; ++i) c[i] = static_cast<uint8_t>(uint64_t(bare.size()) >> (8 * i));
  c.insert(c.end(), bare.begin(), bare.end());
  c.insert(c.end(), 4, 0);
  write_file(d.file("bare.safetensors"), c);
  auto none = run_cli({"inspect", d.file("bare.safetensors"), "--metadata"});
  CHECK_THAT(none.out, Catch::Contains("\nmetadata: none\n"));
  CHECK_THAT(run_cli({"inspect", d.file("bare.safetensors")}).out, !Catch::Contains("metadata  "));
}

TEST_CASE("inspect --help: the jq example names a key the --json document has", "[inspect][cli]") {
  auto help = run_cli({"inspect", "--help"});
  REQUIRE(help.exit_code == 0);
  const std::string marker = "jq .";
  const size_t at = help.out.find(marker);
  REQUIRE(at != std::string::npos);
  size_t end = at + marker.size();
  while (end < help.out.size() && (std::isalnum(static_cast<unsigned char>(help.out[end])) || help.out[end] == '_')) ++end;
  const std::string key = help.out.substr(at + marker.size(), end - at - marker.size());
  INFO("help example key: " << key);
  auto r = run_cli({"inspect", "--json", testdata("models/llama-sharded")});
  REQUIRE(r.exit_code == 0);
  json j = json::parse(r.out);
  REQUIRE(j.contains(key));
  CHECK(!j[key].is_null());
}
