// Sharded checkpoints: an index JSON over safetensors (or PyTorch) shards, and
// a directory of shards without an index. Shards are written into a TempDir by
// a small safetensors writer; the expected offsets are computed by hand from
// the header lengths.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include "core/error.hpp"
#include "format/open.hpp"
#include "format/readers.hpp"
#include "core/source.hpp"
#include "tests/helpers.hpp"

using namespace nunchaku;
using nunchaku::test::TempDir;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct T {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t nbytes;
};

// Writes a safetensors file (header padded to 8 like upstream); returns the
// offset of the data region.
uint64_t write_st(const std::string& path, const std::vector<T>& ts, const json& meta = nullptr) {
  json h = json::object();
  if (!meta.is_null()) h["__metadata__"] = meta;
  uint64_t at = 0;
  for (const auto& t : ts) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + t.nbytes}}};
    at += t.nbytes;
  }
  std::string text = h.dump();
  while (text.size() % 8) text += ' ';
  std::vector<uint8_t> b;
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(uint64_t{text.size()} >> (8 * i)));
  b.insert(b.end(), text.begin(), text.end());
  b.resize(b.size() + at, 0x5a);
  nunchaku::test::write_file(path, b);
  return 8 + text.size();
}

const std::vector<T> kShard1{{"model.embed_tokens.weight", "BF16", {16, 4}, 128}, {"model.layers.0.w", "F32", {4, 4}, 64}};
const std::vector<T> kShard2{{"model.layers.1.w", "F32", {4, 4}, 64}, {"model.layers.1.b", "F16", {4}, 8}};
const std::vector<T> kShard3{{"lm_head.weight", "BF16", {16, 4}, 128}, {"model.norm.weight", "F32", {4}, 16}};
constexpr uint64_t kTotal = 128 + 64 + 64 + 8 + 128 + 16;

const char* kNames[3] = {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                         "model-00003-of-00003.safetensors"};

json weight_map_of(const std::vector<std::vector<T>>& shards) {
  json wm = json::object();
  for (size_t i = 0; i < shards.size(); ++i)
    for (const auto& t : shards[i]) wm[t.name] = kNames[i];
  return wm;
}

// Three shards plus an index; returns the data-region start of each shard.
std::vector<uint64_t> make_sharded(const TempDir& tmp, json index_override = nullptr) {
  std::vector<uint64_t> starts;
  starts.push_back(write_st(tmp.file(kNames[0]), kShard1, {{"format", "pt"}}));
  starts.push_back(write_st(tmp.file(kNames[1]), kShard2, {{"format", "pt"}}));
  starts.push_back(write_st(tmp.file(kNames[2]), kShard3, {{"format", "pt"}}));
  json index = index_override.is_null()
                   ? json{{"metadata", {{"total_size", kTotal}}}, {"weight_map", weight_map_of({kShard1, kShard2, kShard3})}}
                   : index_override;
  nunchaku::test::write_file(tmp.file("model.safetensors.index.json"), index.dump(2));
  return starts;
}

Error error_of_index(const std::string& path) {
  try {
    read_index(path);
  } catch (const Error& e) {
    return e;
  }
  FAIL("no error thrown");
  return Error("none", "");
}

}  // namespace

TEST_CASE("shards: a 3-shard safetensors checkpoint with an index", "[shards]") {
  TempDir tmp;
  const auto starts = make_sharded(tmp);
  const std::string index = tmp.file("model.safetensors.index.json");

  Checkpoint ck = read_index(index);
  CHECK(ck.format == Format::Safetensors);
  REQUIRE(ck.files.size() == 3);
  for (int i = 0; i < 3; ++i) CHECK(fs::path(ck.files[i].path).filename() == kNames[i]);
  REQUIRE(ck.tensors.size() == 6);
  // File order, then offset order within each file; offsets absolute per file.
  const char* order[] = {"model.embed_tokens.weight", "model.layers.0.w", "model.layers.1.w",
                         "model.layers.1.b", "lm_head.weight", "model.norm.weight"};
  const uint32_t file[] = {0, 0, 1, 1, 2, 2};
  const uint64_t offset[] = {starts[0], starts[0] + 128, starts[1], starts[1] + 64, starts[2], starts[2] + 128};
  for (size_t i = 0; i < 6; ++i) {
    INFO(order[i]);
    CHECK(ck.tensors[i].name == order[i]);
    CHECK(ck.tensors[i].file == file[i]);
    CHECK(ck.tensors[i].offset == offset[i]);
  }
  CHECK(ck.find("model.layers.1.b")->dtype == DType::F16);
  CHECK(ck.total_bytes() == kTotal);
  CHECK(ck.warnings.empty());
  CHECK(ck.metadata.at("format") == "pt");
  CHECK(ck.metadata.at("index") == json{{"total_size", kTotal}});

  // The directory and the explicit index path give the same index.
  Checkpoint viadir = open_checkpoint(tmp.path.string());
  CHECK(viadir.tensors.size() == 6);
  CHECK(viadir.files.size() == 3);
  CHECK(viadir.tensors[5].offset == offset[5]);
  CHECK(open_checkpoint(index).tensors.size() == 6);
}

TEST_CASE("shards: a shard named by the index is missing", "[shards]") {
  TempDir tmp;
  make_sharded(tmp);
  fs::remove(tmp.file(kNames[1]));
  Error e = error_of_index(tmp.file("model.safetensors.index.json"));
  CHECK(e.code() == "index.missing_shard");
  const std::string what = e.what();
  CHECK(what.find(kNames[1]) != std::string::npos);
  CHECK(what.find("model.safetensors.index.json") != std::string::npos);
  CHECK(e.exit_code() == 2);
}

TEST_CASE("shards: a shard that is a FIFO, a directory, a device or a looping link is named as what it is",
          "[shards][hostile]") {
  // {how shard 2 is replaced, what the message must say}
  const std::vector<std::pair<std::function<void(const std::string&)>, std::string>> cases = {
      {[](const std::string& p) { REQUIRE(::mkfifo(p.c_str(), 0644) == 0); }, "is not a regular file (a FIFO)"},
      {[](const std::string& p) { fs::create_directory(p); }, "is not a regular file (a directory)"},
      {[](const std::string& p) { fs::create_symlink("/dev/zero", p); }, "is not a regular file (a device or special file)"},
      {[](const std::string& p) { fs::create_symlink(fs::path(p).filename(), p); },
       "is a symbolic link that leads nowhere (Too many levels of symbolic links)"},
      {[](const std::string& p) { fs::create_symlink("gone.safetensors", p); },
       "is a symbolic link that leads nowhere (No such file or directory)"},
      {[](const std::string&) {}, "does not exist"},
  };
  for (const auto& [replace, says] : cases) {
    INFO(says);
    TempDir tmp;
    make_sharded(tmp);
    fs::remove(tmp.file(kNames[1]));
    replace(tmp.file(kNames[1]));
    Error e = error_of_index(tmp.file("model.safetensors.index.json"));
    CHECK(e.code() == "index.missing_shard");
    CHECK(e.exit_code() == 2);
    CHECK(e.message().find(std::string("shard \"") + kNames[1] + "\" named by the index " + says) != std::string::npos);
  }
}

TEST_CASE("shards: an indexed tensor is not in its shard", "[shards]") {
  TempDir tmp;
  json wm = weight_map_of({kShard1, kShard2, kShard3});
  wm["model.layers.7.w"] = kNames[1];  // in no shard
  make_sharded(tmp, {{"weight_map", wm}});
  Error e = error_of_index(tmp.file("model.safetensors.index.json"));
  CHECK(e.code() == "index.tensor_not_in_shard");
  CHECK(e.context().tensor == "model.layers.7.w");

  // Present, but in another shard than the index says.
  TempDir tmp2;
  json wm2 = weight_map_of({kShard1, kShard2, kShard3});
  wm2["lm_head.weight"] = kNames[0];
  make_sharded(tmp2, {{"weight_map", wm2}});
  Error e2 = error_of_index(tmp2.file("model.safetensors.index.json"));
  CHECK(e2.code() == "index.tensor_not_in_shard");
  CHECK(e2.context().tensor == "lm_head.weight");
  CHECK(e2.context().hint.find(kNames[2]) != std::string::npos);
}

TEST_CASE("shards: the same tensor in two shards", "[shards]") {
  TempDir tmp;
  make_sharded(tmp);
  // Rewrite shard 3 with a tensor that shard 1 already holds.
  auto dup = kShard3;
  dup.push_back({"model.layers.0.w", "F32", {4, 4}, 64});
  write_st(tmp.file(kNames[2]), dup);
  Error e = error_of_index(tmp.file("model.safetensors.index.json"));
  CHECK(e.code() == "shards.duplicate_tensor");
  CHECK(e.context().tensor == "model.layers.0.w");
  CHECK(std::string(e.what()).find(kNames[0]) != std::string::npos);
  CHECK(std::string(e.what()).find(kNames[2]) != std::string::npos);
}

TEST_CASE("shards: total_size off is a warning, not an error", "[shards]") {
  TempDir tmp;
  make_sharded(tmp, {{"metadata", {{"total_size", kTotal + 1}}}, {"weight_map", weight_map_of({kShard1, kShard2, kShard3})}});
  Checkpoint ck = read_index(tmp.file("model.safetensors.index.json"));
  CHECK(ck.tensors.size() == 6);
  REQUIRE(ck.warnings.size() == 1);
  CHECK(ck.warnings[0].find("total_size") != std::string::npos);
  CHECK(ck.warnings[0].find(std::to_string(kTotal)) != std::string::npos);

  // Not a number at all: still only a warning.
  TempDir tmp2;
  make_sharded(tmp2, {{"metadata", {{"total_size", "big"}}}, {"weight_map", weight_map_of({kShard1, kShard2, kShard3})}});
  CHECK(read_index(tmp2.file("model.safetensors.index.json")).warnings.size() == 1);
}

TEST_CASE("shards: a tensor in a shard but not in the index is a warning", "[shards]") {
  TempDir tmp;
  json wm = weight_map_of({kShard1, kShard2, kShard3});
  wm.erase("model.layers.1.b");
  make_sharded(tmp, {{"weight_map", wm}});
  Checkpoint ck = read_index(tmp.file("model.safetensors.index.json"));
  CHECK(ck.tensors.size() == 6);  // still indexed: the shard holds it
  REQUIRE(ck.warnings.size() == 1);
  CHECK(ck.warnings[0].find("model.layers.1.b") != std::string::npos);
  CHECK(ck.warnings[0].find(kNames[1]) != std::string::npos);
}

TEST_CASE("shards: a broken shard's error names the shard", "[shards]") {
  TempDir tmp;
  make_sharded(tmp);
  nunchaku::test::write_file(tmp.file(kNames[2]), std::string("\x10\0\0\0\0\0\0\0{\"a\":", 13));
  Error e = error_of_index(tmp.file("model.safetensors.index.json"));
  CHECK(e.code() == "safetensors.header_out_of_file");
  CHECK(e.context().file == tmp.file(kNames[2]));
}

TEST_CASE("shards rule: index file problems", "[shards]") {
  TempDir tmp;
  const std::string p = tmp.file("model.safetensors.index.json");
  write_st(tmp.file(kNames[0]), kShard1);

  nunchaku::test::write_file(p, std::string("{\"weight_map\": {"));
  CHECK(error_of_index(p).code() == "index.not_json");
  nunchaku::test::write_file(p, std::string("{}\0{", 4));  // text after a NUL must not be ignored
  CHECK(error_of_index(p).code() == "index.not_json");
  nunchaku::test::write_file(p, std::string(R"({"metadata": {"total_size": 1e400}})"));
  CHECK(error_of_index(p).code() == "index.not_json");
  nunchaku::test::write_file(p, std::string("[]"));
  CHECK(error_of_index(p).code() == "index.not_object");
  nunchaku::test::write_file(p, std::string(R"({"metadata": {}})"));
  CHECK(error_of_index(p).code() == "index.no_weight_map");
  nunchaku::test::write_file(p, std::string(R"({"weight_map": {}})"));
  CHECK(error_of_index(p).code() == "index.empty");
  nunchaku::test::write_file(p, std::string(R"({"weight_map": {"a": 3}})"));
  CHECK(error_of_index(p).code() == "index.bad_entry");
  nunchaku::test::write_file(p, std::string(R"({"weight_map": {"a": "../model.safetensors"}})"));
  CHECK(error_of_index(p).code() == "index.bad_shard_path");
  nunchaku::test::write_file(p, std::string(R"({"weight_map": {"a": "/etc/passwd"}})"));
  CHECK(error_of_index(p).code() == "index.bad_shard_path");
  nunchaku::test::write_file(p, "{\"metadata\":" + std::string(100, '[') + std::string(100, ']') + "}");
  CHECK(error_of_index(p).code() == "index.too_deep");
  // A shard that is neither safetensors nor PyTorch.
  nunchaku::test::write_file(tmp.file("junk.safetensors"), std::string("hello, not a tensor file"));
  nunchaku::test::write_file(p, std::string(R"({"weight_map": {"a": "junk.safetensors"}})"));
  CHECK(error_of_index(p).code() == "shards.unknown_format");
}

TEST_CASE("shards: a directory of safetensors files without an index", "[shards]") {
  TempDir tmp;
  const uint64_t s1 = write_st(tmp.file("a.safetensors"), kShard1, {{"format", "pt"}, {"origin", "a"}});
  const uint64_t s2 = write_st(tmp.file("b.safetensors"), kShard2, {{"origin", "b"}});
  Checkpoint ck = open_checkpoint(tmp.path.string());
  REQUIRE(ck.files.size() == 2);
  REQUIRE(ck.tensors.size() == 4);
  CHECK(ck.tensors[1].file == 0);
  CHECK(ck.tensors[1].offset == s1 + 128);
  CHECK(ck.tensors[2].file == 1);
  CHECK(ck.tensors[2].offset == s2);
  CHECK(ck.metadata == json{{"format", "pt"}, {"origin", "a"}});  // first shard's value wins
  CHECK(ck.path == tmp.path.string());

  // The same tensor in two files of the directory.
  write_st(tmp.file("c.safetensors"), kShard1);
  try {
    open_checkpoint(tmp.path.string());
    FAIL("no error thrown");
  } catch (const Error& e) {
    CHECK(e.code() == "shards.duplicate_tensor");
    CHECK(e.context().tensor == "model.embed_tokens.weight");
  }
  CHECK_THROWS_AS(merge_shards("x", {}), Error);
}

TEST_CASE("shards: pytorch_model.bin.index.json over real torch.save files", "[shards][shared]") {
  NUNCHAKU_REQUIRE_SHARED();
  // Three real files with disjoint tensor names, copied into a temp dir as shards.
  const char* src[] = {"pytorch/test.pt", "pytorch/tensor_2d.pt", "pytorch/state_dict.pt"};
  const char* dst[] = {"pytorch_model-00001-of-00003.bin", "pytorch_model-00002-of-00003.bin",
                       "pytorch_model-00003-of-00003.bin"};
  TempDir tmp;
  std::vector<Checkpoint> alone;
  json wm = json::object();
  for (int i = 0; i < 3; ++i) {
    fs::copy_file(nunchaku::test::shared_testfile(src[i]), tmp.file(dst[i]));
    FileSource s(tmp.file(dst[i]));
    alone.push_back(read_pytorch(s));
    for (const auto& t : alone.back().tensors) wm[t.name] = dst[i];
  }
  CHECK(wm.contains("test"));
  CHECK(wm.contains("tensor"));
  CHECK(wm.contains("weight"));
  nunchaku::test::write_file(tmp.file("pytorch_model.bin.index.json"), json{{"weight_map", wm}}.dump());

  Checkpoint ck = open_checkpoint(tmp.path.string());
  CHECK(ck.format == Format::PyTorch);
  REQUIRE(ck.files.size() == 3);
  size_t k = 0;
  for (uint32_t i = 0; i < 3; ++i)
    for (const auto& t : alone[i].tensors) {
      REQUIRE(k < ck.tensors.size());
      const auto& m = ck.tensors[k++];
      CHECK(m.name == t.name);
      CHECK(m.file == i);
      CHECK(m.offset == t.offset);
      CHECK(m.nbytes == t.nbytes);
      CHECK(m.shape == t.shape);
      // Storage keys are per file; merged ones must not alias across files.
      if (!t.storage.empty()) CHECK(m.storage == std::to_string(i) + "/" + t.storage);
    }
  CHECK(k == ck.tensors.size());
}

TEST_CASE("shards: 24 shards read on several threads merge in shard order, errors as one thread meets them", "[shards]") {
  // From 8 shards on, headers are parsed on up to 8 threads; the result must not depend on it.
  TempDir tmp;
  json wm = json::object();
  auto name_of = [](int i) { return fmt::format("model-{:05d}-of-00024.safetensors", i + 1); };
  for (int i = 0; i < 24; ++i) {
    std::vector<T> ts = {{fmt::format("model.layers.{}.w", i), "F32", {2, 2}, 16}, {fmt::format("model.layers.{}.b", i), "F32", {2}, 8}};
    write_st(tmp.file(name_of(i)), ts);
    for (const auto& t : ts) wm[t.name] = name_of(i);
  }
  const std::string index = tmp.file("model.safetensors.index.json");
  nunchaku::test::write_file(index, json{{"weight_map", wm}}.dump());
  Checkpoint ck = read_index(index);
  REQUIRE(ck.tensors.size() == 48);
  REQUIRE(ck.files.size() == 24);
  for (size_t k = 0; k < ck.tensors.size(); ++k) {
    INFO(ck.tensors[k].name);
    CHECK(ck.tensors[k].file == k / 2);  // shard order, each tensor in its own file
    CHECK(ck.files[ck.tensors[k].file].path == tmp.file(name_of(int(k / 2))));
  }
  // Shard 20 corrupt and shard 6 holding shard 3's tensor: the duplicate comes first in order.
  nunchaku::test::write_file(tmp.file(name_of(19)), std::string("not a tensor file at all"));
  write_st(tmp.file(name_of(5)), {{"model.layers.5.w", "F32", {2, 2}, 16}, {"model.layers.5.b", "F32", {2}, 8},
                                  {"model.layers.2.w", "F32", {2, 2}, 16}});
  Error e = error_of_index(index);
  CHECK(e.code() == "shards.duplicate_tensor");
  CHECK(e.context().file == tmp.file(name_of(5)));
  CHECK(e.context().tensor == "model.layers.2.w");
  // With shard 6 mended, the corrupt shard 20 is the error, named.
  write_st(tmp.file(name_of(5)), {{"model.layers.5.w", "F32", {2, 2}, 16}, {"model.layers.5.b", "F32", {2}, 8}});
  Error e2 = error_of_index(index);
  CHECK(e2.code() == "shards.unknown_format");
  CHECK(e2.context().file == tmp.file(name_of(19)));
}

// The usual index is read without a JSON DOM; these are JSON's own rules it must keep (the
// parser's answers), each in an index the quick reader hands to the parser.
TEST_CASE("shards: index JSON as the parser reads it: escapes, repeated names, the last one kept", "[shards]") {
  TempDir tmp;
  make_sharded(tmp);
  const std::string p = tmp.file("model.safetensors.index.json");
  const std::string all = weight_map_of({kShard1, kShard2, kShard3}).dump();
  const std::string body = all.substr(1, all.size() - 2);  // "name":"shard",... without the braces
  auto open_with = [&](const std::string& text) {
    nunchaku::test::write_file(p, text);
    return read_index(p);
  };
  // A name spelled with an escape is the same name.
  std::string escaped = body;
  escaped.replace(escaped.find("lm_head"), 1, "\\u006c");
  CHECK(open_with("{\"weight_map\":{" + escaped + "}}").warnings.empty());
  // A repeated weight_map entry: the last value counts, so a first one naming a shard that
  // does not exist is never opened.
  Checkpoint ck = open_with("{\"weight_map\":{\"lm_head.weight\":\"missing.safetensors\"," + body + "}}");
  CHECK(ck.tensors.size() == 6);
  CHECK(ck.files.size() == 3);
  CHECK(ck.warnings.empty());
  // A repeated weight_map member: the last one counts.
  ck = open_with(R"({"weight_map":{"x":"missing.safetensors"},"weight_map":{)" + body + "}}");
  CHECK(ck.tensors.size() == 6);
  // A repeated metadata member: the last one counts (its total_size is right, no warning).
  ck = open_with(R"({"metadata":{"total_size":1},"weight_map":{)" + body + R"(},"metadata":{"total_size":)" +
                 std::to_string(kTotal) + "}}");
  CHECK(ck.warnings.empty());
  CHECK(ck.metadata["index"]["total_size"] == kTotal);
  // Other members are JSON too: a broken one is an error, a deep one too deep.
  nunchaku::test::write_file(p, "{\"weight_map\":{" + body + "},\"extra\":[1,]}");
  CHECK(error_of_index(p).code() == "index.not_json");
  nunchaku::test::write_file(p, "{\"weight_map\":{" + body + "},\"extra\":" + std::string(40, '[') + std::string(40, ']') + "}");
  Error deep = error_of_index(p);
  CHECK(deep.code() == "index.too_deep");
  // `{"weight_map":{` body `},"extra":` then the brackets; the 32nd is the 33rd level.
  CHECK(deep.context().offset.value_or(0) == 15 + body.size() + 10 + 31);
  // A name that is not UTF-8 is not JSON, wherever it is.
  nunchaku::test::write_file(p, "{\"weight_map\":{" + body + ",\"a\xff\":\"" + kNames[0] + "\"}}");
  CHECK(error_of_index(p).code() == "index.not_json");
  // A stale entry is named in name order, as the parser's map lists them.
  std::string stale = body;
  for (const char* name : {"model.norm.weight", "lm_head.weight"}) {
    const size_t at = stale.find(std::string("\"") + name + "\":\"") + std::strlen(name) + 4;
    stale.replace(at, std::strlen(kNames[2]), kNames[0]);
  }
  nunchaku::test::write_file(p, "{\"weight_map\":{" + stale + "}}");
  Error e = error_of_index(p);
  CHECK(e.code() == "index.tensor_not_in_shard");
  CHECK(e.context().tensor == "lm_head.weight");
}
