// Split GGUF (model-0000K-of-0000N.gguf): testdata/models/llama-gguf-split holds
// testdata/models/llama-gguf/model.gguf split in 3 by gguf-py's GGUFWriter
// (scripts/make_split_gguf.py), with what gguf.GGUFReader reads from each part in
// expected.json. The merged index must match gguf-py part by part, hold the same
// tensors with the same bytes as the unsplit file, and behave like it in every
// subcommand; inconsistent sets are refused naming the part.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "core/file.hpp"
#include "format/open.hpp"
#include "format/readers.hpp"
#include "tests/helpers.hpp"

using namespace nunchaku;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kDir = "models/llama-gguf-split";

std::string part(int k) { return test::testdata(kDir + "/model-0000" + std::to_string(k) + "-of-00003.gguf"); }

std::string bytes_of(const Checkpoint& ck, const TensorInfo& t) {
  std::string b(t.nbytes, '\0');
  File::open_read_only(ck.files[t.file].path).read_at(t.offset, b.data(), b.size());
  return b;
}

std::string error_code(const std::string& path) {
  try {
    (void)open_checkpoint(path);
  } catch (const Error& e) {
    return e.code() + ": " + e.message() + " | " + e.context().file + " | " + e.context().hint;
  }
  return "opened";
}

// Copies the three parts into `dir` under the given names (empty: left out).
void copy_parts(const fs::path& dir, const std::vector<std::string>& names) {
  for (size_t i = 0; i < names.size(); ++i)
    if (!names[i].empty()) fs::copy_file(part(int(i) + 1), dir / names[i]);
}

}  // namespace

TEST_CASE("split gguf: parts, offsets and sizes as gguf-py reads them", "[gguf][split]") {
  const json e = test::read_json(test::testdata(kDir + "/expected.json"));
  const Checkpoint ck = open_checkpoint(part(1));
  CHECK(ck.format == Format::GGUF);
  REQUIRE(ck.files.size() == e["parts"].size());
  size_t i = 0;
  for (size_t f = 0; f < ck.files.size(); ++f) {
    const json& p = e["parts"][f];
    CHECK(fs::path(ck.files[f].path).filename() == p["file"].get<std::string>());
    CHECK(ck.files[f].bytes == fs::file_size(ck.files[f].path));
    for (const json& t : p["tensors"]) {
      REQUIRE(i < ck.tensors.size());
      INFO(t["name"]);
      CHECK(ck.tensors[i].name == t["name"]);
      CHECK(ck.tensors[i].file == f);
      CHECK(ck.tensors[i].offset == t["offset"]);
      CHECK(ck.tensors[i].nbytes == t["nbytes"]);
      ++i;
    }
  }
  CHECK(i == ck.tensors.size());
  CHECK(ck.tensors.size() == e["parts"][0]["split.tensors.count"]);
  // All key-values come from the first part (the tokenizer among them).
  CHECK(ck.metadata["split.count"] == 3);
  CHECK(ck.metadata["split.no"] == 0);
  CHECK(ck.metadata.contains("tokenizer.ggml.tokens"));
  CHECK(ck.metadata["general.architecture"] == "llama");
}

TEST_CASE("split gguf: same tensors and bytes as the unsplit file, from any part or the folder", "[gguf][split]") {
  const Checkpoint whole = open_checkpoint(test::testdata("models/llama-gguf/model.gguf"));
  for (const std::string& path : {part(1), part(2), part(3), test::testdata(kDir)}) {
    INFO(path);
    const Checkpoint ck = open_checkpoint(path);
    CHECK(ck.path == path);
    REQUIRE(ck.tensors.size() == whole.tensors.size());
    CHECK(ck.total_bytes() == whole.total_bytes());
    CHECK(ck.total_parameters() == whole.total_parameters());
    for (const TensorInfo& w : whole.tensors) {
      const TensorInfo* t = ck.find(w.name);
      REQUIRE(t);
      INFO(w.name);
      CHECK(t->dtype == w.dtype);
      CHECK(t->shape == w.shape);
      CHECK(bytes_of(ck, *t) == bytes_of(whole, w));
    }
    for (const auto& [k, v] : whole.metadata.items())
      if (k.rfind("gguf.", 0) != 0) CHECK(ck.metadata[k] == v);
  }
}

TEST_CASE("split gguf: names parsed and formatted as llama.cpp writes them", "[gguf][split]") {
  auto s = parse_gguf_split_name("/m/Llama-3-8B-Q4_K_M-00002-of-00005.gguf");
  REQUIRE(s);
  CHECK(s->prefix == "/m/Llama-3-8B-Q4_K_M");
  CHECK(s->no == 2);
  CHECK(s->count == 5);
  CHECK(gguf_split_path(s->prefix, 5, 5) == "/m/Llama-3-8B-Q4_K_M-00005-of-00005.gguf");
  CHECK_FALSE(parse_gguf_split_name("model-00000-of-00003.gguf"));  // parts count from 1
  CHECK_FALSE(parse_gguf_split_name("model-00004-of-00003.gguf"));
  CHECK_FALSE(parse_gguf_split_name("model-0001-of-0003.gguf"));    // five digits
  CHECK_FALSE(parse_gguf_split_name("model-00001-of-00003.safetensors"));
  CHECK_FALSE(parse_gguf_split_name("model.gguf"));
}

TEST_CASE("split gguf: inconsistent sets are refused naming the part", "[gguf][split]") {
  test::TempDir d;
  SECTION("a missing part names the expected file") {
    copy_parts(d.path, {"m-00001-of-00003.gguf", "", "m-00003-of-00003.gguf"});
    const std::string err = error_code(d.file("m-00001-of-00003.gguf"));
    CHECK(err.rfind("gguf.split_missing_part: part 2 of 3", 0) == 0);
    CHECK(err.find(d.file("m-00002-of-00003.gguf")) != std::string::npos);
    // The folder holds two parts of one set: the same answer.
    CHECK(error_code(d.path.string()).rfind("gguf.split_missing_part", 0) == 0);
  }
  SECTION("parts swapped: split.no disagrees with the name") {
    copy_parts(d.path, {"m-00001-of-00003.gguf", "m-00003-of-00003.gguf", "m-00002-of-00003.gguf"});
    const std::string err = error_code(d.file("m-00001-of-00003.gguf"));
    CHECK(err.rfind("gguf.split_mismatch: split.no is 2 but the file name says part 2", 0) == 0);
    CHECK(err.find("m-00002-of-00003.gguf |") != std::string::npos);
  }
  SECTION("renamed to a different count: split.count disagrees") {
    copy_parts(d.path, {"m-00001-of-00004.gguf", "m-00002-of-00004.gguf", "m-00003-of-00004.gguf"});
    CHECK(error_code(d.file("m-00001-of-00004.gguf")).rfind("gguf.split_mismatch: split.count is 3", 0) == 0);
  }
  SECTION("split.tensors.count disagrees with the tensors found") {
    copy_parts(d.path, {"m-00001-of-00003.gguf", "m-00002-of-00003.gguf", "m-00003-of-00003.gguf"});
    // Patch the int32 value of split.tensors.count in part 1 (key, u32 type, value).
    std::string b = test::read_text(d.file("m-00001-of-00003.gguf"));
    const std::string key = "split.tensors.count";
    const size_t at = b.find(key);
    REQUIRE(at != std::string::npos);
    const int32_t wrong = 20;
    std::memcpy(b.data() + at + key.size() + 4, &wrong, 4);
    test::write_file(d.file("m-00001-of-00003.gguf"), b);
    CHECK(error_code(d.file("m-00002-of-00003.gguf")) ==
          "gguf.split_tensor_count: split.tensors.count is 20 but the 3 parts hold 21 tensors | " +
              d.file("m-00001-of-00003.gguf") + " | a part is from another split or was rewritten; re-download the set");
  }
  SECTION("a part under a plain name") {
    fs::copy_file(part(1), d.path / "model.gguf");
    CHECK(error_code(d.file("model.gguf")).rfind("gguf.split_name: the file is part of a 3-part split GGUF", 0) == 0);
  }
  SECTION("a folder with a split set and another GGUF is ambiguous") {
    copy_parts(d.path, {"m-00001-of-00003.gguf", "m-00002-of-00003.gguf", "m-00003-of-00003.gguf"});
    fs::copy_file(test::testdata("models/llama-gguf/model.gguf"), d.path / "other.gguf");
    CHECK(error_code(d.path.string()).rfind("open.ambiguous", 0) == 0);
  }
}

TEST_CASE("split gguf: inspect, estimate, plan, load and run behave as on the unsplit file", "[gguf][split][cli]") {
  const std::string whole = test::testdata("models/llama-gguf/model.gguf");
  auto a = test::run_cli({"inspect", "--json", part(1)});
  auto b = test::run_cli({"inspect", "--json", whole});
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  const json ja = json::parse(a.out), jb = json::parse(b.out);
  CHECK(ja["files"].size() == 3);
  for (const char* k : {"format", "num_tensors", "num_parameters", "weight_bytes", "dtypes"}) CHECK(ja[k] == jb[k]);
  CHECK(test::run_cli({"inspect", "--verify", part(1)}).exit_code == 0);

  // PATH is argument 1; plan's --cpu-ram keeps the host's free memory out of the comparison.
  for (std::vector<std::string> how : {std::vector<std::string>{"estimate", "PATH", "--vram", "1G", "--json"},
                                       {"plan", "PATH", "--vram", "1G", "--cpu-ram", "8G", "--format", "json"}}) {
    INFO(how[0]);
    how[1] = test::testdata(kDir);
    auto sa = test::run_cli(how);
    how[1] = whole;
    auto sb = test::run_cli(how);
    REQUIRE(sa.exit_code == sb.exit_code);
    json xa = json::parse(sa.out), xb = json::parse(sb.out);
    xa.erase("path"), xb.erase("path");
    xa.erase("model"), xb.erase("model");
    CHECK(xa.dump() == xb.dump());
  }
  CHECK(test::run_cli({"load", part(2), "--device", "cpu"}).exit_code == 0);

  const std::string prompts = "hello\n{\"prompt\": \"abc\", \"max_tokens\": 6}\n";
  auto ra = test::run_cli({"run", part(1), "--max-tokens", "8", "-q"}, prompts);
  auto rb = test::run_cli({"run", whole, "--max-tokens", "8", "-q"}, prompts);
  REQUIRE(ra.exit_code == 0);
  REQUIRE(rb.exit_code == 0);
  auto ids = [](const std::string& out) {
    std::vector<json> v;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) v.push_back(json::parse(line)["token_ids"]);
    return v;
  };
  CHECK(ids(ra.out).size() == 2);
  CHECK(ids(ra.out) == ids(rb.out));
}

TEST_CASE("split gguf: convert joins the parts into one GGUF without split keys", "[gguf][split][convert]") {
  test::TempDir d;
  auto r = test::run_cli({"convert", part(1), d.file("one.gguf"), "-q", "--verify"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const Checkpoint one = open_checkpoint(d.file("one.gguf"));
  const Checkpoint whole = open_checkpoint(test::testdata("models/llama-gguf/model.gguf"));
  CHECK(one.files.size() == 1);
  CHECK_FALSE(one.metadata.contains("split.count"));
  CHECK_FALSE(one.metadata.contains("split.no"));
  REQUIRE(one.tensors.size() == whole.tensors.size());
  for (const TensorInfo& w : whole.tensors) {
    const TensorInfo* t = one.find(w.name);
    REQUIRE(t);
    CHECK(bytes_of(one, *t) == bytes_of(whole, w));
  }
}
