// safetensors reader: round trips through a small writer, one hostile byte
// string per validation rule (each asserting its own error code), and every
// real file in ../shared/testfiles/safetensors checked against what the Python
// `safetensors` library reported (testdata/expected/shared_safetensors.json,
// from scripts/expect_shared_safetensors.py).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "format/open.hpp"
#include "format/readers.hpp"
#include "core/source.hpp"
#include "tests/helpers.hpp"

using namespace nunchaku;
using nunchaku::test::TempDir;
using json = nlohmann::json;

namespace {

// 8-byte little-endian length, the header text as given (no padding), then
// `data_len` data bytes counting up from 0.
std::vector<uint8_t> st_raw(const std::string& header, size_t data_len = 0, std::optional<uint64_t> n = {}) {
  std::vector<uint8_t> b;
  uint64_t len = n ? *n : header.size();
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(len >> (8 * i)));
  b.insert(b.end(), header.begin(), header.end());
  for (size_t i = 0; i < data_len; ++i) b.push_back(static_cast<uint8_t>(i));
  return b;
}

// A file as upstream writes it: header padded with spaces to a multiple of 8.
std::vector<uint8_t> st_padded(std::string header, size_t data_len) {
  while (header.size() % 8) header += ' ';
  return st_raw(header, data_len);
}

Checkpoint read_mem(const std::vector<uint8_t>& bytes) {
  MemorySource src(bytes, "mem.safetensors");
  return read_safetensors(src);
}

// The Error a hostile input raises (fails the test when none is thrown).
Error error_of(const std::vector<uint8_t>& bytes) {
  try {
    read_mem(bytes);
  } catch (const Error& e) {
    return e;
  }
  FAIL("no error thrown");
  return Error("none", "");
}

std::string entry(const std::string& dtype, const std::string& shape, uint64_t b, uint64_t e) {
  return R"({"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":[)" + std::to_string(b) + "," +
         std::to_string(e) + "]}";
}

uint64_t fnv1a64(const std::vector<uint8_t>& v) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (uint8_t c : v) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return h;
}

}  // namespace

TEST_CASE("safetensors: round trip through a file, tensors in offset order", "[safetensors]") {
  TempDir tmp;
  // Names in the header are deliberately not in offset order.
  const std::string h = R"({"__metadata__":{"format":"pt","note":"x"},"a":)" + entry("F32", "[2,3]", 8, 32) +
                        R"(,"z":)" + entry("BF16", "[4]", 0, 8) + R"(,"m":)" + entry("I64", "[]", 32, 40) + "}";
  const auto bytes = st_padded(h, 40);
  const std::string path = tmp.file("model.safetensors");
  nunchaku::test::write_file(path, bytes);
  const uint64_t data_start = bytes.size() - 40;
  CHECK(data_start % 8 == 0);

  FileSource src(path);
  Checkpoint ck = read_safetensors(src);
  CHECK(ck.format == Format::Safetensors);
  REQUIRE(ck.files.size() == 1);
  CHECK(ck.files[0].path == path);
  CHECK(ck.files[0].bytes == bytes.size());
  REQUIRE(ck.tensors.size() == 3);
  CHECK(ck.tensors[0].name == "z");
  CHECK(ck.tensors[0].dtype == DType::BF16);
  CHECK(ck.tensors[0].shape == std::vector<int64_t>{4});
  CHECK(ck.tensors[0].offset == data_start);
  CHECK(ck.tensors[0].nbytes == 8);
  CHECK(ck.tensors[1].name == "a");
  CHECK(ck.tensors[1].shape == std::vector<int64_t>{2, 3});
  CHECK(ck.tensors[1].offset == data_start + 8);
  CHECK(ck.tensors[1].nbytes == 24);
  CHECK(ck.tensors[2].name == "m");
  CHECK(ck.tensors[2].shape.empty());  // a scalar: one element
  CHECK(ck.tensors[2].numel() == 1);
  CHECK(ck.tensors[2].nbytes == 8);
  for (const auto& t : ck.tensors) {
    CHECK(t.file == 0);
    CHECK(t.strides.empty());
  }
  CHECK(ck.metadata == json{{"format", "pt"}, {"note", "x"}});
  CHECK(ck.total_bytes() == 40);
  CHECK(ck.total_parameters() == 4 + 6 + 1);

  // The directory dispatch reaches the same reader.
  Checkpoint viaopen = open_checkpoint(tmp.path.string());
  CHECK(viaopen.tensors.size() == 3);
  CHECK(viaopen.tensors[1].offset == data_start + 8);
}

TEST_CASE("safetensors: every dtype of the spec, with exact byte sizes", "[safetensors]") {
  // The spec's list: huggingface/safetensors Dtype as of v0.8.0 (22 dtypes).
  // (dtype, elements, bytes): sub-byte floats pack F4 two per byte, F6 four per three bytes.
  struct Case { const char* name; DType t; uint64_t numel, bytes; };
  const Case cases[] = {
      {"BOOL", DType::BOOL, 3, 3},       {"U8", DType::U8, 3, 3},          {"I8", DType::I8, 3, 3},
      {"U16", DType::U16, 3, 6},         {"I16", DType::I16, 3, 6},        {"U32", DType::U32, 3, 12},
      {"I32", DType::I32, 3, 12},        {"U64", DType::U64, 3, 24},       {"I64", DType::I64, 3, 24},
      {"F16", DType::F16, 3, 6},         {"BF16", DType::BF16, 3, 6},      {"F32", DType::F32, 3, 12},
      {"F64", DType::F64, 3, 24},        {"C64", DType::C64, 3, 24},       {"F8_E4M3", DType::F8_E4M3, 3, 3},
      {"F8_E5M2", DType::F8_E5M2, 3, 3}, {"F8_E8M0", DType::F8_E8M0, 3, 3}, {"F4", DType::F4, 6, 3},
      {"F6_E2M3", DType::F6_E2M3, 8, 6}, {"F6_E3M2", DType::F6_E3M2, 4, 3},
      {"F8_E4M3FNUZ", DType::F8_E4M3FNUZ, 3, 3}, {"F8_E5M2FNUZ", DType::F8_E5M2FNUZ, 3, 3},
  };
  std::string h = "{";
  uint64_t at = 0;
  for (const auto& c : cases) {
    if (h.size() > 1) h += ",";
    h += "\"t_" + std::string(c.name) + "\":" + entry(c.name, "[" + std::to_string(c.numel) + "]", at, at + c.bytes);
    at += c.bytes;
  }
  h += "}";
  static_assert(std::size(cases) == 22);
  Checkpoint ck = read_mem(st_padded(h, at));
  REQUIRE(ck.tensors.size() == std::size(cases));
  for (size_t i = 0; i < std::size(cases); ++i) {
    INFO(cases[i].name);
    CHECK(ck.tensors[i].name == "t_" + std::string(cases[i].name));
    CHECK(ck.tensors[i].dtype == cases[i].t);
    CHECK(ck.tensors[i].nbytes == cases[i].bytes);
  }
}

TEST_CASE("safetensors: empty header, zero-size tensors, whitespace around the JSON", "[safetensors]") {
  // Upstream serialises an empty dict as "{}" padded with six spaces.
  Checkpoint empty = read_mem(st_padded("{}", 0));
  CHECK(empty.tensors.empty());
  CHECK(empty.metadata == json::object());

  // Zero-size tensors share an offset with the next tensor; they sort first.
  const std::string h = " \n{\"b\":" + entry("F32", "[0,5]", 4, 4) + ",\"a\":" + entry("F32", "[1]", 0, 4) +
                        ",\"c\":" + entry("U8", "[2]", 4, 6) + ",\"__metadata__\":null}\n  ";
  Checkpoint ck = read_mem(st_raw(h, 6));
  REQUIRE(ck.tensors.size() == 3);
  CHECK(ck.tensors[0].name == "a");
  CHECK(ck.tensors[1].name == "b");
  CHECK(ck.tensors[1].nbytes == 0);
  CHECK(ck.tensors[1].offset == 8 + h.size() + 4);
  CHECK(ck.tensors[2].name == "c");
  CHECK(ck.metadata == json::object());
}

TEST_CASE("safetensors: extra fields in an entry are ignored, as upstream does", "[safetensors]") {
  const std::string h = R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"extra":{"x":[1]}}})";
  Checkpoint ck = read_mem(st_raw(h, 2));
  REQUIRE(ck.tensors.size() == 1);
  CHECK(ck.tensors[0].nbytes == 2);
}

// ---- one hostile byte string per rule --------------------------------------

TEST_CASE("safetensors rule: file shorter than the length field", "[safetensors]") {
  const std::vector<uint8_t> b{1, 0, 0};
  Error e = error_of(b);
  CHECK(e.code() == "safetensors.too_small");
  CHECK(e.context().file == "mem.safetensors");
  CHECK(e.exit_code() == 2);
}

TEST_CASE("safetensors rule: header length over the 100 MB cap", "[safetensors]") {
  // 100'000'001 claimed; only a few bytes present. Must fail before allocating.
  CHECK(error_of(st_raw("{}", 0, 100'000'001)).code() == "safetensors.header_too_large");
  CHECK(error_of(st_raw("{}", 0, ~0ull)).code() == "safetensors.header_too_large");
}

TEST_CASE("safetensors rule: header runs past the end of the file", "[safetensors]") {
  Error e = error_of(st_raw("{}", 0, 3));  // 8 + 3 > 8 + 2
  CHECK(e.code() == "safetensors.header_out_of_file");
  CHECK(e.context().offset == 0u);
}

TEST_CASE("safetensors rule: header is not UTF-8", "[safetensors]") {
  Error e = error_of(st_raw("{\"a\xff\":1}"));
  CHECK(e.code() == "safetensors.header_not_utf8");
  CHECK(e.context().offset == 8u + 3);
  // An overlong encoding of '/' and a lone surrogate are invalid too.
  CHECK(error_of(st_raw("{\"\xc0\xaf\":1}")).code() == "safetensors.header_not_utf8");
  CHECK(error_of(st_raw("{\"\xed\xa0\x80\":1}")).code() == "safetensors.header_not_utf8");
}

TEST_CASE("safetensors rule: header is not JSON", "[safetensors]") {
  Error e = error_of(st_raw("{\"a\": "));
  CHECK(e.code() == "safetensors.header_not_json");
  CHECK(e.context().offset.has_value());
  // NUL padding is not whitespace (upstream pads with spaces).
  CHECK(error_of(st_raw(std::string("{}\0\0", 4))).code() == "safetensors.header_not_json");
  // A number past double range (a fuzzer finding: nlohmann throws out_of_range, not parse_error).
  CHECK(error_of(st_raw(R"({"__metadata__":1e400})")).code() == "safetensors.header_not_json");
}

TEST_CASE("safetensors rule: header nests too deep", "[safetensors]") {
  const std::string h = "{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}";
  CHECK(error_of(st_raw(h)).code() == "safetensors.header_too_deep");
}

TEST_CASE("safetensors rule: header is not an object", "[safetensors]") {
  CHECK(error_of(st_raw("[1,2]")).code() == "safetensors.header_not_object");
  CHECK(error_of(st_raw("\"x\"")).code() == "safetensors.header_not_object");
}

TEST_CASE("safetensors rule: a tensor name appears twice", "[safetensors]") {
  const std::string h = "{\"w\":" + entry("U8", "[2]", 0, 2) + ",\"w\":" + entry("U8", "[2]", 2, 4) + "}";
  Error e = error_of(st_raw(h, 4));
  CHECK(e.code() == "safetensors.duplicate_name");
  CHECK(e.context().tensor == "w");
  CHECK(e.context().offset == 8u + h.rfind("\"w\""));  // the second "w"
}

TEST_CASE("safetensors rule: __metadata__ must map strings to strings", "[safetensors]") {
  CHECK(error_of(st_raw(R"({"__metadata__":{"epoch":3}})")).code() == "safetensors.bad_metadata");
  CHECK(error_of(st_raw(R"({"__metadata__":["a"]})")).code() == "safetensors.bad_metadata");
}

TEST_CASE("safetensors rule: an entry lacks a field or has the wrong type", "[safetensors]") {
  const char* bad[] = {
      R"({"w":[1]})",
      R"({"w":{"shape":[2],"data_offsets":[0,2]}})",
      R"({"w":{"dtype":5,"shape":[2],"data_offsets":[0,2]}})",
      R"({"w":{"dtype":"U8","data_offsets":[0,2]}})",
      R"({"w":{"dtype":"U8","shape":["2"],"data_offsets":[0,2]}})",
      R"({"w":{"dtype":"U8","shape":[-2],"data_offsets":[0,2]}})",
      R"({"w":{"dtype":"U8","shape":[2.0],"data_offsets":[0,2]}})",
      R"({"w":{"dtype":"U8","shape":[2]}})",
      R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2,4]}})",
      R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,-2]}})",
      R"({"w":{"dtype":"U8","shape":[2],"data_offsets":{"0":2}}})",
      R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,1e100]}})",
  };
  for (const char* h : bad) {
    INFO(h);
    Error e = error_of(st_raw(h, 2));
    CHECK(e.code() == "safetensors.bad_entry");
    CHECK(e.context().tensor == "w");
    CHECK(e.context().offset == 8u + 1);  // where "w" is in the header
  }
}

TEST_CASE("safetensors rule: unknown dtype", "[safetensors]") {
  Error e = error_of(st_raw("{\"w\":" + entry("F7", "[2]", 0, 2) + "}", 2));
  CHECK(e.code() == "safetensors.unknown_dtype");
  CHECK(e.context().tensor == "w");
  // ggml block types share our dtype table but are not safetensors dtypes; names are case-sensitive.
  CHECK(error_of(st_raw("{\"w\":" + entry("Q4_K", "[256]", 0, 144) + "}", 144)).code() == "safetensors.unknown_dtype");
  CHECK(error_of(st_raw("{\"w\":" + entry("f32", "[1]", 0, 4) + "}", 4)).code() == "safetensors.unknown_dtype");
  // C128 is in our table (PyTorch complex128) but not a safetensors dtype.
  CHECK(error_of(st_raw("{\"w\":" + entry("C128", "[1]", 0, 16) + "}", 16)).code() == "safetensors.unknown_dtype");
}

TEST_CASE("safetensors rule: element count or byte size overflows", "[safetensors]") {
  // 2^32 * 2^32 elements overflow 64 bits.
  CHECK(error_of(st_raw("{\"w\":" + entry("U8", "[4294967296,4294967296]", 0, 0) + "}")).code() ==
        "safetensors.overflow");
  // 2^62 F64 elements fit, their 2^65 bytes do not.
  CHECK(error_of(st_raw("{\"w\":" + entry("F64", "[4611686018427387904]", 0, 0) + "}")).code() ==
        "safetensors.overflow");
  // A dimension past int64 cannot be a PyTorch shape even when another is 0.
  CHECK(error_of(st_raw("{\"w\":" + entry("U8", "[0,18446744073709551615]", 0, 0) + "}")).code() ==
        "safetensors.overflow");
}

TEST_CASE("safetensors rule: sub-byte tensor does not fill whole bytes", "[safetensors]") {
  // 3 F4 values are 12 bits (upstream: MisalignedSlice).
  CHECK(error_of(st_raw("{\"w\":" + entry("F4", "[3]", 0, 2) + "}", 2)).code() == "safetensors.misaligned");
  CHECK(error_of(st_raw("{\"w\":" + entry("F6_E3M2", "[2]", 0, 2) + "}", 2)).code() == "safetensors.misaligned");
}

TEST_CASE("safetensors rule: data_offsets end before they begin", "[safetensors]") {
  const std::string h = "{\"w\":" + entry("U8", "[0]", 4, 2) + "}";
  Error e = error_of(st_raw(h, 4));
  CHECK(e.code() == "safetensors.offsets_reversed");
  CHECK(e.context().tensor == "w");
  CHECK(e.context().offset == 8 + h.size() + 4);  // where the tensor's data would begin
  // begin = 2^64-1: no such byte, so the offset is the entry's key (after the length and '{').
  Error m = error_of(st_raw("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[18446744073709551615,7]}}", 7));
  CHECK(m.code() == "safetensors.offsets_reversed");
  CHECK(m.context().offset == uint64_t{8 + 1});
}

TEST_CASE("safetensors rule: data_offsets span differs from shape x dtype", "[safetensors]") {
  const std::string h = "{\"a\":" + entry("U8", "[8]", 0, 8) + ",\"b\":" + entry("F32", "[2]", 8, 12) + "}";
  Error e = error_of(st_raw(h, 12));
  CHECK(e.code() == "safetensors.size_mismatch");
  CHECK(e.context().tensor == "b");
  CHECK(e.context().offset == 8u + h.size() + 8);  // absolute offset of b's data
  CHECK(std::string(e.what()).find("mem.safetensors") != std::string::npos);
}

TEST_CASE("safetensors rule: gap between tensors", "[safetensors]") {
  // First tensor not at 0.
  Error e = error_of(st_raw("{\"a\":" + entry("U8", "[4]", 4, 8) + "}", 8));
  CHECK(e.code() == "safetensors.offsets_gap");
  CHECK(e.context().tensor == "a");
  // A hole between two tensors.
  const std::string h = "{\"a\":" + entry("U8", "[4]", 0, 4) + ",\"b\":" + entry("U8", "[4]", 6, 10) + "}";
  Error e2 = error_of(st_raw(h, 10));
  CHECK(e2.code() == "safetensors.offsets_gap");
  CHECK(e2.context().tensor == "b");
  CHECK(e2.context().offset == 8u + h.size() + 4);  // where the hole starts
}

TEST_CASE("safetensors rule: tensors overlap", "[safetensors]") {
  const std::string h = "{\"a\":" + entry("U8", "[8]", 0, 8) + ",\"b\":" + entry("U8", "[8]", 4, 12) + "}";
  Error e = error_of(st_raw(h, 12));
  CHECK(e.code() == "safetensors.offsets_overlap");
  CHECK(e.context().tensor == "b");
  // Two tensors on the same bytes (aliasing) overlap too.
  const std::string h2 = "{\"a\":" + entry("U8", "[8]", 0, 8) + ",\"b\":" + entry("I8", "[8]", 0, 8) + "}";
  CHECK(error_of(st_raw(h2, 8)).code() == "safetensors.offsets_overlap");
}

TEST_CASE("safetensors rule: tensor data past the end of the file", "[safetensors]") {
  // A truncated download: the header promises 16 bytes, 10 are there.
  Error e = error_of(st_raw("{\"a\":" + entry("F32", "[4]", 0, 16) + "}", 10));
  CHECK(e.code() == "safetensors.data_out_of_file");
  CHECK(e.context().tensor == "a");
  CHECK_FALSE(e.context().hint.empty());
  // Offsets near 2^64 must not wrap around when made absolute.
  const std::string h = "{\"a\":" + entry("U8", "[0]", 18446744073709551615ull, 18446744073709551615ull) + "}";
  CHECK(error_of(st_raw(h)).code() == "safetensors.offsets_gap");
}

TEST_CASE("safetensors rule: data region not covered exactly", "[safetensors]") {
  const std::string h = "{\"a\":" + entry("U8", "[4]", 0, 4) + "}";
  Error e = error_of(st_raw(h, 5));  // one stray trailing byte
  CHECK(e.code() == "safetensors.data_not_covered");
  CHECK(e.context().offset == 8u + h.size() + 4);
  // Data bytes with an empty header are not covered either.
  CHECK(error_of(st_raw("{}", 1)).code() == "safetensors.data_not_covered");
}

// ---- real files -----------------------------------------------------------

TEST_CASE("safetensors: real files match the Python safetensors library", "[safetensors][shared]") {
  NUNCHAKU_REQUIRE_SHARED();
  std::ifstream f(nunchaku::test::testdata("expected/shared_safetensors.json"));
  REQUIRE(f.good());
  const json expected = json::parse(f);
  const auto& files = expected.at("files");
  REQUIRE(files.size() >= 13);

  // Every file present in the folder has an expectation (none silently skipped).
  size_t on_disk = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(nunchaku::test::shared_testfile("safetensors")))
    if (e.path().extension() == ".safetensors") ++on_disk;
  CHECK(on_disk == files.size());

  for (const auto& [rel, want] : files.items()) {
    INFO(rel);
    const std::string path = nunchaku::test::shared_testfile(rel);
    FileSource src(path);
    Checkpoint ck = read_safetensors(src);
    CHECK(ck.files.at(0).bytes == want.at("bytes").get<uint64_t>());
    CHECK(ck.metadata == want.at("metadata"));
    const auto& wt = want.at("tensors");
    REQUIRE(ck.tensors.size() == wt.size());
    for (size_t i = 0; i < wt.size(); ++i) {
      const auto& t = ck.tensors[i];
      INFO(t.name);
      CHECK(t.name == wt[i].at("name").get<std::string>());
      CHECK(dtype_name(t.dtype) == wt[i].at("dtype").get<std::string>());
      CHECK(t.shape == wt[i].at("shape").get<std::vector<int64_t>>());
      CHECK(t.offset == wt[i].at("offset").get<uint64_t>());
      CHECK(t.nbytes == wt[i].at("nbytes").get<uint64_t>());
      // The bytes at our offset are the bytes safe_open returned for this tensor.
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a64(src.read_vec(t.offset, t.nbytes))));
      CHECK(std::string(hex) == wt[i].at("fnv1a64").get<std::string>());
    }
  }
}

TEST_CASE("safetensors: real unpadded sample headers", "[safetensors][shared]") {
  NUNCHAKU_REQUIRE_SHARED();
  // overall.safetensors: 9 tensors of 6 elements, header length 526 (not a multiple of 8).
  Checkpoint ck = open_checkpoint(nunchaku::test::shared_testfile("safetensors/samples/overall.safetensors"));
  REQUIRE(ck.tensors.size() == 9);
  CHECK(ck.tensors[0].offset == 8 + 526);
  CHECK(ck.total_bytes() == 168);
  CHECK(ck.total_parameters() == 54);
  CHECK(ck.metadata == json{{"test", "a"}});
}

// ---- the header's members are split in one linear pass (format/json_members) -----------

TEST_CASE("safetensors: keys with JSON escapes, any whitespace, and broken structure", "[safetensors]") {
  // The escaped spellings decode to the names nlohmann (and serde_json) give them.
  const std::string h = " \n{ \"a\\\"b\" :\t" + entry("U8", "[1]", 0, 1) + " ,\r\n\"caf\\u00e9\\n\":" +
                        entry("U8", "[1]", 1, 2) + " , \"__metadata__\" : { \"k\" : \"v\" } } \n";
  Checkpoint ck = read_mem(st_raw(h, 2));
  REQUIRE(ck.tensors.size() == 2);
  CHECK(ck.tensors[0].name == "a\"b");
  CHECK(ck.tensors[1].name == "caf\xC3\xA9\n");
  CHECK(ck.metadata == json{{"k", "v"}});
  CHECK(read_mem(st_raw("{ }")).tensors.empty());
  // Broken structure between members, each with the offset of the byte at fault.
  const std::string e1 = entry("U8", "[1]", 0, 1);
  const std::pair<std::string, size_t> broken[] = {
      {"{\"a\":" + e1 + " \"b\":1}", 5 + e1.size() + 1},   // no comma
      {"{\"a\" " + e1 + "}", 5},                           // no colon
      {"{\"a\":" + e1 + ",}", 5 + e1.size() + 1},          // trailing comma
      {"{\"a\":" + e1 + "} x", 5 + e1.size() + 2},         // text after the object
      {"{\"a\":" + e1, 5 + e1.size()},                     // never closed
      {"{a:1}", 1},                                        // unquoted key
      {"{\"a\":{\"dtype\":\"U8\"]}", SIZE_MAX},            // brackets that do not match (nlohmann's offset)
  };
  for (const auto& [text, at] : broken) {
    INFO(text);
    Error e = error_of(st_raw(text, 1));
    CHECK(e.code() == "safetensors.header_not_json");
    if (at != SIZE_MAX) CHECK(e.context().offset == 8u + at);
  }
}

TEST_CASE("safetensors: 20,000 tensors index with every name, shape and offset", "[safetensors]") {
  // Correctness at scale; the speed (100,000 tensors) is measured by scripts/bench_inspect.sh.
  std::string h = "{";
  const int n = 20'000;
  for (int i = 0; i < n; ++i)
    h += (i ? "," : "") + std::string("\"e.") + std::to_string(n - 1 - i) + "\":" + entry("F32", "[1]", 4 * i, 4 * i + 4);
  h += "}";
  Checkpoint ck = read_mem(st_raw(h, 4 * n));
  REQUIRE(ck.tensors.size() == size_t(n));
  for (int i = 0; i < n; i += 997) {
    INFO(i);
    CHECK(ck.tensors[size_t(i)].name == "e." + std::to_string(n - 1 - i));
    CHECK(ck.tensors[size_t(i)].offset == 8 + h.size() + 4u * i);
  }
}

// The usual header is read in one pass; any other goes the checked way (UTF-8, depth, NUL,
// members, the JSON parser). Both must give the same checkpoint or the same error (code,
// message, tensor, offset) on the plain header and on every mutation of it.
TEST_CASE("safetensors: the one-pass header scan and the checked path agree on every input", "[safetensors]") {
  const std::string header =
      R"({"__metadata__":{"format":"pt","k":"v"},"a.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"( "b" : { "shape" : [ 4 ] , "data_offsets" : [ 24 , 32 ] , "dtype" : "BF16" },)"
      R"("c.bias":{"data_offsets":[32,32],"dtype":"I64","shape":[0]},"d":{"dtype":"U8","shape":[],"data_offsets":[32,33]}})";
  const std::vector<uint8_t> clean = st_padded(header, 33);
  const size_t end = clean.size() - 33;  // one past the header
  struct Outcome {
    std::string what;  // the tensors and metadata, or the error
    bool error = false;
  };
  auto outcome = [](const std::vector<uint8_t>& bytes, bool one_pass) {
    MemorySource src(bytes, "mem.safetensors");
    try {
      const Checkpoint ck = one_pass ? read_safetensors(src) : read_safetensors_checked(src);
      std::string s = ck.metadata.dump();
      for (const auto& t : ck.tensors)
        s += fmt::format("|{} {} {} {} {}", t.name, dtype_name(t.dtype), json(t.shape).dump(), t.offset, t.nbytes);
      return Outcome{s};
    } catch (const Error& e) {
      return Outcome{e.code() + " " + e.message() + " @" + e.context().tensor + " " +
                         (e.context().offset ? std::to_string(*e.context().offset) : "-"),
                     true};
    }
  };
  const Outcome base = outcome(clean, true);
  REQUIRE_FALSE(base.error);
  CHECK(base.what == outcome(clean, false).what);
  CHECK(base.what.find("|a.weight F32 [2,3] ") != std::string::npos);

  const std::string alphabet = std::string("\"\\{}[],: 09ae\t\n-.E_") + std::string("\0\x01\x7f\xc3\xa9\xff", 6);
  uint64_t seed = 12345;
  auto next = [&] { return seed = seed * 6364136223846793005ULL + 1442695040888963407ULL, seed >> 33; };
  int errors = 0;
  for (int k = 0; k < 3000; ++k) {
    std::vector<uint8_t> b = clean;
    for (int edits = 1 + next() % 2; edits > 0; --edits) {
      const size_t at = 8 + next() % header.size();
      switch (next() % 3) {
        case 0: b[at] = static_cast<uint8_t>(alphabet[next() % alphabet.size()]); break;
        case 1:  // the header keeps its length: a space at its end
          b.erase(b.begin() + static_cast<long>(at));
          b.insert(b.begin() + static_cast<long>(end - 1), ' ');
          break;
        default:
          b.insert(b.begin() + static_cast<long>(at), b[at]);
          b.erase(b.begin() + static_cast<long>(end));
          break;
      }
    }
    const Outcome one = outcome(b, true), checked = outcome(b, false);
    INFO("mutation " << k << ": " << std::string(b.begin() + 8, b.begin() + 8 + static_cast<long>(header.size())));
    CHECK(one.error == checked.error);
    CHECK(one.what == checked.what);
    errors += one.error;
  }
  CHECK(errors > 1000);  // the mutations reach the error paths, not only harmless spaces
}
