// GGUF reader: a byte-level writer builds valid and hostile files in memory;
// real files (../shared/testfiles) and a gguf-py-written fixture are checked
// against what gguf-py's GGUFReader reported (scripts/expect_shared_gguf.py).
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "format/gguf.hpp"
#include "format/readers.hpp"
#include "core/source.hpp"
#include "tests/gguf_bytes.hpp"
#include "tests/helpers.hpp"

using namespace nunchaku;
using nlohmann::json;

namespace {

using W = test::GgufBytes;

W header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
  W w;
  w.raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
  return w;
}

constexpr uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ8_0 = 8;

// A valid file: one KV, two F32 tensors stored with the second header entry first in the data.
W valid_file() {
  W w = header(2, 1).kv_str("general.architecture", "llama");
  w.tensor("b", {4, 2}, kF32, 0);    // 32 bytes at data+0
  w.tensor("a", {8}, kF16, 32);      // 16 bytes at data+32
  w.pad_to(32).zeros(64);
  return w;
}

Error read_error(const std::vector<uint8_t>& bytes) {
  MemorySource src(bytes, "hostile.gguf");
  try {
    (void)read_gguf(src);
  } catch (const Error& e) {
    return e;
  }
  FAIL("expected an Error");
  throw;  // unreachable
}

void require_code(const std::vector<uint8_t>& bytes, const std::string& code) {
  Error e = read_error(bytes);
  INFO(e.what());
  CHECK(e.code() == code);
  CHECK(e.context().file == "hostile.gguf");
  CHECK(e.context().offset.has_value());
  CHECK(e.exit_code() == 2);
}

}  // namespace

TEST_CASE("gguf: writer round trip with every value type, nested arrays and offset order", "[gguf]") {
  W w = header(3, 16);
  w.str("k.u8").u32(0).num<uint8_t>(200);
  w.str("k.i8").u32(1).num<int8_t>(-5);
  w.str("k.u16").u32(2).num<uint16_t>(60000);
  w.str("k.i16").u32(3).num<int16_t>(-300);
  w.kv_u32("k.u32", 4000000000u);
  w.str("k.i32").u32(5).num<int32_t>(-7);
  w.str("k.f32").u32(6).num<float>(1e-5f);
  w.str("k.bool").u32(7).num<uint8_t>(1);
  w.kv_str("k.str", "h\xC3\xA9llo");
  w.str("k.u64").u32(10).u64(1ULL << 63);
  w.str("k.i64").u32(11).num<int64_t>(-(1LL << 40));
  w.str("k.f64").u32(12).num<double>(0.1);
  w.str("k.tokens").u32(9).u32(8).u64(2).str("<s>").str("\xFF\xFE");  // invalid UTF-8 kept raw
  w.str("k.nested").u32(9).u32(9).u64(2);
  w.u32(5).u64(2).num<int32_t>(1).num<int32_t>(2);
  w.u32(8).u64(1).str("x");
  w.str("k.big").u32(9).u32(0).u64(1025).zeros(1025);
  w.kv_u32("general.alignment", 64);
  w.tensor("q", {64, 2}, kQ8_0, 128);   // 4 blocks x 34 bytes = 136 at data+128
  w.tensor("norm", {3}, kF32, 64);       // 12 bytes at data+64
  w.tensor("emb", {2, 3, 4}, kF16, 0);   // 48 bytes at data+0
  w.pad_to(64);
  size_t data = w.b.size();
  w.zeros(128 + 136);
  MemorySource src(w.b, "rt.gguf");

  GgufFile g = read_gguf_file(src);
  CHECK(g.version == 3);
  CHECK(g.alignment == 64);
  CHECK(g.data_offset == data);
  REQUIRE(g.kvs.size() == 16);
  CHECK(g.find("k.u8")->type() == GgufType::U8);
  CHECK(g.find("k.u8")->as_uint() == 200u);
  CHECK(g.find("k.i8")->as_int() == -5);
  CHECK_FALSE(g.find("k.i8")->as_uint().has_value());
  CHECK(g.find("k.u16")->as_uint() == 60000u);
  CHECK(g.find("k.i16")->as_int() == -300);
  CHECK(g.find("k.u32")->as_uint() == 4000000000u);
  CHECK(g.find("k.i32")->as_int() == -7);
  CHECK(std::get<float>(g.find("k.f32")->data) == 1e-5f);
  CHECK(g.find("k.bool")->as_bool() == true);
  CHECK(*g.find("k.str")->as_string() == "h\xC3\xA9llo");
  CHECK(g.find("k.u64")->as_uint() == (1ULL << 63));
  CHECK_FALSE(g.find("k.u64")->as_int().has_value());
  CHECK(g.find("k.i64")->as_int() == -(1LL << 40));
  CHECK(g.find("k.f64")->as_double() == 0.1);
  const auto* toks = g.find("k.tokens")->strings();
  REQUIRE(toks);
  CHECK(toks->to_vector() == std::vector<std::string>{"<s>", "\xFF\xFE"});
  const GgufValue* nested = g.find("k.nested");
  CHECK(nested->elem_type() == GgufType::ARRAY);
  REQUIRE(nested->array_size() == 2);
  const auto& inner = *nested->array<GgufValue>();
  CHECK(*inner[0].array<int32_t>() == std::vector<int32_t>{1, 2});
  CHECK(inner[1].strings()->to_vector() == std::vector<std::string>{"x"});
  CHECK(g.find("k.big")->array<uint8_t>()->size() == 1025);
  CHECK(g.find("missing") == nullptr);
  REQUIRE(g.tensors.size() == 3);
  CHECK(g.tensors[0].name == "q");  // header order
  CHECK(g.tensors[0].ne == std::vector<uint64_t>{64, 2});
  CHECK(g.tensors[0].nbytes == 136);
  CHECK(g.tensors[0].offset == data + 128);

  Checkpoint ck = read_gguf(src);
  CHECK(ck.format == Format::GGUF);
  REQUIRE(ck.files.size() == 1);
  CHECK(ck.files[0].bytes == w.b.size());
  REQUIRE(ck.tensors.size() == 3);
  CHECK(ck.tensors[0].name == "emb");  // offset order
  CHECK(ck.tensors[0].shape == std::vector<int64_t>{4, 3, 2});  // PyTorch order
  CHECK(ck.tensors[0].dtype == DType::F16);
  CHECK(ck.tensors[0].nbytes == 48);
  CHECK(ck.tensors[1].name == "norm");
  CHECK(ck.tensors[1].offset == data + 64);
  CHECK(ck.tensors[2].name == "q");
  CHECK(ck.tensors[2].dtype == DType::Q8_0);
  CHECK(ck.tensors[2].shape == std::vector<int64_t>{2, 64});
  const json& md = ck.metadata;
  CHECK(md["k.u8"] == 200);
  CHECK(md["k.i64"] == -(1LL << 40));
  CHECK(md["k.f32"].get<double>() == 1e-05);  // shortest float32 spelling, not 9.99999974737875e-06
  CHECK(md["k.bool"] == true);
  CHECK(md["k.str"] == "h\xC3\xA9llo");
  CHECK(md["k.tokens"] == json::array({"<s>", "\xEF\xBF\xBD\xEF\xBF\xBD"}));  // U+FFFD for invalid bytes
  CHECK(md["k.nested"] == json::parse(R"([[1,2],["x"]])"));
  CHECK(md["k.big"] == json::parse(R"({"array":"uint8","length":1025})"));
  CHECK(md["gguf.version"] == 3);
  CHECK(md["gguf.alignment"] == 64);
  CHECK(md["gguf.tensor_data_offset"] == data);
  CHECK_NOTHROW(md.dump());
}

TEST_CASE("gguf: v2 files and the default alignment of 32", "[gguf]") {
  W w = header(1, 0, 2);
  w.tensor("t", {8}, kF32, 0).pad_to(32).zeros(32);
  MemorySource src(w.b, "v2.gguf");
  GgufFile g = read_gguf_file(src);
  CHECK(g.version == 2);
  CHECK(g.alignment == 32);
  CHECK(g.data_offset == 64);  // header is 24 + 8+1 + 4 + 8 + 4 + 8 = 57 bytes, padded to 64
  CHECK(g.tensors[0].offset == 64);
}

TEST_CASE("gguf: hostile headers fail with their own error code", "[gguf]") {
  SECTION("bad magic") {
    Error e = read_error({'G', 'G', 'U', 'X', 3, 0, 0, 0});
    CHECK(e.code() == "gguf.bad_magic");
    CHECK(e.context().offset == 0u);
    require_code({'G', 'G'}, "gguf.bad_magic");
    Error legacy = read_error({'t', 'j', 'g', 'g', 3, 0, 0, 0});
    CHECK(legacy.context().hint.find("legacy") != std::string::npos);
  }
  SECTION("v1 with a hint, and unknown versions") {
    Error e = read_error(header(0, 0, 1).b);
    CHECK(e.code() == "gguf.unsupported_version");
    CHECK(e.context().offset == 4u);
    CHECK(e.context().hint.find("convert") != std::string::npos);
    require_code(header(0, 0, 4).b, "gguf.unsupported_version");
  }
  SECTION("big-endian") {
    W w;
    w.raw("GGUF").u32(0x03000000u).u64(0).u64(0);
    require_code(w.b, "gguf.big_endian");
  }
  SECTION("truncated: the file ends inside the counts or inside a value") {
    W w = valid_file();
    Error e = read_error(std::vector<uint8_t>(w.b.begin(), w.b.begin() + 20));
    CHECK(e.code() == "gguf.truncated");
    CHECK(e.context().offset == 16u);
    require_code(header(0, 1).str("k").u32(4).raw("ab").b, "gguf.truncated");
  }
  SECTION("2^60 KVs fail fast, before any allocation") {
    Error e = read_error(header(0, 1ULL << 60).kv_u32("a", 1).b);
    CHECK(e.code() == "gguf.too_many_kvs");
    CHECK(e.context().offset == 16u);
  }
  SECTION("2^60 tensors") { require_code(header(1ULL << 60, 0).b, "gguf.too_many_tensors"); }
  SECTION("a key length past the end") {
    W w = header(0, 1).u64(1ULL << 62).raw("abcdefghijklmnop");
    Error e = read_error(w.b);
    CHECK(e.code() == "gguf.string_too_long");
    CHECK(e.context().offset == 24u);
  }
  SECTION("a string value length past the end") {
    require_code(header(0, 1).str("k").u32(8).u64(~0ULL).b, "gguf.string_too_long");
  }
  SECTION("an array count past the end") {
    require_code(header(0, 1).str("k").u32(9).u32(4).u64(1ULL << 60).u32(1).b, "gguf.array_too_long");
  }
  SECTION("an unknown value type") {
    Error e = read_error(header(0, 1).str("k").u32(13).u32(0).b);
    CHECK(e.code() == "gguf.bad_value_type");
    CHECK(e.context().offset == 24u + 8 + 1);
  }
  SECTION("an unknown array element type") {
    require_code(header(0, 1).str("k").u32(9).u32(99).u64(0).b, "gguf.bad_value_type");
  }
  SECTION("arrays nested beyond the limit") {
    W w = header(0, 1).str("k").u32(9);
    for (int i = 0; i < 40; ++i) w.u32(9).u64(1);
    w.u32(0).u64(0);
    require_code(w.b, "gguf.nesting_too_deep");
  }
  SECTION("alignment zero, not a power of two, or not a uint32") {
    require_code(header(0, 1).kv_u32("general.alignment", 0).b, "gguf.bad_alignment");
    Error e = read_error(header(0, 1).kv_u32("general.alignment", 48).b);
    CHECK(e.code() == "gguf.bad_alignment");
    CHECK(e.context().offset == 24u + 8 + 17 + 4);
    require_code(header(0, 1).str("general.alignment").u32(10).u64(32).b, "gguf.bad_alignment");
  }
  SECTION("duplicate key") {
    Error e = read_error(header(0, 2).kv_u32("a", 1).kv_u32("a", 2).b);
    CHECK(e.code() == "gguf.duplicate_key");
    CHECK(e.context().offset == 24u + 8 + 1 + 4 + 4);
  }
}

TEST_CASE("gguf: metadata memory is bounded by the header bytes it came from", "[gguf]") {
  // 5M empty strings: 40 MB of file, and 40 MB of memory too (GgufStrings: one 8-byte end
  // offset per string, where a vector<string> took 160 MB).
  const uint64_t n = 5'000'000;
  W w = header(0, 1).str("tokenizer.ggml.tokens").u32(9).u32(8).u64(n);
  w.b.resize(w.b.size() + n * 8, 0);
  {
    MemorySource src(w.b, "empty-strings.gguf");
    const GgufFile g = read_gguf_file(src);
    REQUIRE(g.find("tokenizer.ggml.tokens")->strings());
    CHECK(g.find("tokenizer.ggml.tokens")->strings()->size() == n);
    CHECK((*g.find("tokenizer.ggml.tokens")->strings())[n - 1].empty());
  }
  // 5M empty nested arrays: 60 MB of file, ~5x that as values. Refused part way, naming the file.
  W a = header(0, 1).str("k.nested").u32(9).u32(9).u64(n);
  for (uint64_t i = 0; i < n; ++i) a.u32(0).u64(0);
  Error e = read_error(a.b);
  CHECK(e.code() == "gguf.metadata_too_large");
  CHECK(e.exit_code() == 2);
  CHECK(e.context().file == "hostile.gguf");
  // A real vocabulary (150k tokens) is far inside the bound.
  W v = header(0, 1).str("tokenizer.ggml.tokens").u32(9).u32(8).u64(150'000);
  for (int i = 0; i < 150'000; ++i) v.str("tok" + std::to_string(i));
  MemorySource src(v.b, "vocab.gguf");
  CHECK(read_gguf(src).tensors.empty());
}

TEST_CASE("gguf: hostile tensor infos fail with their own error code, naming the tensor", "[gguf]") {
  auto file_with = [](auto add_tensors, uint64_t n = 1, size_t data = 64) {
    W w = header(n, 0);
    add_tensors(w);
    return w.pad_to(32).zeros(data).b;
  };
  SECTION("five dimensions") {
    Error e = read_error(file_with([](W& w) { w.tensor("t5", {1, 1, 1, 1, 1}, kF32, 0); }));
    CHECK(e.code() == "gguf.too_many_dims");
    CHECK(e.context().tensor == "t5");
    CHECK(e.context().offset == 24u + 8 + 2);
  }
  SECTION("unknown ggml type (4 was Q4_2, removed)") {
    Error e = read_error(file_with([](W& w) { w.tensor("old", {32}, 4, 0); }));
    CHECK(e.code() == "gguf.unknown_type");
    CHECK(e.context().tensor == "old");
    require_code(file_with([](W& w) { w.tensor("x", {32}, 1000, 0); }), "gguf.unknown_type");
  }
  SECTION("ne[0] not a multiple of the block size") {
    Error e = read_error(file_with([](W& w) { w.tensor("q", {33, 1}, kQ4_0, 0); }));
    CHECK(e.code() == "gguf.bad_shape");
    CHECK(e.context().tensor == "q");
    // 32 x 33 elements is a whole number of blocks, but rows must be whole blocks.
    require_code(file_with([](W& w) { w.tensor("q", {33, 32}, kQ4_0, 0); }), "gguf.bad_shape");
  }
  SECTION("a dimension above INT64_MAX, and an element count that overflows") {
    require_code(file_with([](W& w) { w.tensor("t", {1ULL << 63}, kF32, 0); }), "gguf.bad_shape");
    require_code(file_with([](W& w) { w.tensor("t", {1ULL << 40, 1ULL << 40}, kF32, 0); }), "gguf.bad_shape");
  }
  SECTION("offset not a multiple of the alignment") {
    Error e = read_error(file_with([](W& w) { w.tensor("m", {4}, kF32, 16); }));
    CHECK(e.code() == "gguf.misaligned_offset");
    CHECK(e.context().tensor == "m");
  }
  SECTION("data past the end of the file, and an offset that overflows") {
    Error e = read_error(file_with([](W& w) { w.tensor("big", {32}, kF32, 0); }, 1, 64));
    CHECK(e.code() == "gguf.tensor_out_of_file");
    CHECK(e.context().tensor == "big");
    require_code(file_with([](W& w) { w.tensor("t", {4}, kF32, ~0ULL - 31); }), "gguf.tensor_out_of_file");
  }
  SECTION("two tensors sharing bytes") {
    Error e = read_error(file_with([](W& w) { w.tensor("a", {16}, kF32, 0).tensor("b", {4}, kF32, 32); }, 2));
    CHECK(e.code() == "gguf.tensor_overlap");
    CHECK(e.context().tensor == "b");
  }
  SECTION("duplicate tensor name") {
    Error e = read_error(file_with([](W& w) { w.tensor("d", {4}, kF32, 0).tensor("d", {4}, kF32, 32); }, 2));
    CHECK(e.code() == "gguf.duplicate_tensor");
    CHECK(e.context().tensor == "d");
  }
  SECTION("a tensor name length past the end") {
    require_code(header(1, 0).u64(1ULL << 50).raw(std::string(40, 'x')).b, "gguf.string_too_long");
  }
}

namespace {

// Counts positional reads to show the header is read in chunks, not per field.
struct CountingSource final : Source {
  explicit CountingSource(const Source& s) : inner(s) {}
  const std::string& path() const override { return inner.path(); }
  uint64_t size() const override { return inner.size(); }
  void read_at(uint64_t off, void* buf, size_t n) const override {
    ++calls;
    bytes += n;
    inner.read_at(off, buf, n);
  }
  const Source& inner;
  mutable int calls = 0;
  mutable uint64_t bytes = 0;
};

// Compares one GGUF value with gguf-py's description {type, value | elem, length, head, last, values}.
void check_kv(const GgufFile& g, const std::string& key, const json& want) {
  INFO(g.path << ": " << key);
  const GgufValue* v = g.find(key);
  REQUIRE(v);
  CHECK(gguf_type_name(v->type()) == want["type"].get<std::string>());
  auto element = [](const GgufValue& val, size_t i) -> json {
    const auto& a = std::get<GgufArray>(val.data);
    return std::visit(
        [&](const auto& vec) -> json {
          using E = typename std::decay_t<decltype(vec)>::value_type;
          if constexpr (std::is_same_v<E, GgufValue>) return json();  // nested: checked via "values" below
          else if constexpr (std::is_same_v<E, bool>) return static_cast<bool>(vec[i]);
          else return vec[i];
        },
        a);
  };
  auto same = [&](const json& expected, const json& got, GgufType t) {
    if (t == GgufType::F32) return static_cast<float>(expected.get<double>()) == static_cast<float>(got.get<double>());
    return expected == got;
  };
  if (!v->is_array()) {
    json got = std::visit(
        [](const auto& x) -> json {
          if constexpr (std::is_same_v<std::decay_t<decltype(x)>, GgufArray>) return json();
          else return x;
        },
        v->data);
    CHECK(same(want["value"], got, v->type()));
    return;
  }
  CHECK(gguf_type_name(*v->elem_type()) == want["elem"].get<std::string>());
  REQUIRE(v->array_size() == want["length"].get<uint64_t>());
  if (*v->elem_type() == GgufType::ARRAY) return;
  auto et = *v->elem_type();
  if (want.contains("values"))
    for (size_t i = 0; i < want["values"].size(); ++i) CHECK(same(want["values"][i], element(*v, i), et));
  if (want.contains("head"))
    for (size_t i = 0; i < want["head"].size(); ++i) CHECK(same(want["head"][i], element(*v, i), et));
  if (want.contains("last")) CHECK(same(want["last"], element(*v, v->array_size() - 1), et));
}

// Everything gguf-py reported about one file, against read_gguf_file and read_gguf.
void check_against_gguf_py(const std::string& path, const json& want) {
  INFO(path);
  FileSource src(path);
  GgufFile g = read_gguf_file(src);
  CHECK(g.file_size == want["file_size"].get<uint64_t>());
  CHECK(g.version == want["version"].get<uint32_t>());
  CHECK(g.alignment == want["alignment"].get<uint64_t>());
  CHECK(g.data_offset == want["data_offset"].get<uint64_t>());
  CHECK(g.kvs.size() == want["kvs"].size());
  for (const auto& [key, kv] : want["kvs"].items()) check_kv(g, key, kv);

  Checkpoint ck = read_gguf(src);
  REQUIRE(ck.tensors.size() == want["tensors"].size());
  std::vector<json> expected(want["tensors"].begin(), want["tensors"].end());
  std::stable_sort(expected.begin(), expected.end(),
                   [](const json& a, const json& b) { return a["offset"].get<uint64_t>() < b["offset"].get<uint64_t>(); });
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& t = ck.tensors[i];
    const auto& e = expected[i];
    INFO(e.dump());
    CHECK(t.name == e["name"].get<std::string>());
    CHECK(dtype_name(t.dtype) == e["type"].get<std::string>());
    CHECK(t.shape == e["shape"].get<std::vector<int64_t>>());
    CHECK(t.offset == e["offset"].get<uint64_t>());
    CHECK(t.nbytes == e["n_bytes"].get<uint64_t>());
    CHECK(t.file == 0u);
  }
  CHECK(ck.metadata["gguf.tensor_data_offset"] == g.data_offset);
  CHECK_NOTHROW(ck.metadata.dump());
}

json load_json(const std::string& path) {
  std::ifstream f(path);
  REQUIRE(f.good());
  return json::parse(f);
}

}  // namespace

TEST_CASE("gguf: quantized fixture written by gguf-py matches GGUFReader", "[gguf]") {
  std::string path = test::testdata("gguf/quant_small.gguf");
  check_against_gguf_py(path, load_json(test::testdata("gguf/quant_small.json")));

  FileSource src(path);
  GgufFile g = read_gguf_file(src);
  CHECK(g.alignment == 64);
  // Byte sizes by hand from the ggml block structs (ggml-common.h).
  auto nbytes = [&](const char* name) { return g.find_tensor(name)->nbytes; };
  CHECK(nbytes("quant.q8_0") == 4 * 64 / 32 * 34);   // block_q8_0: f16 + 32 int8
  CHECK(nbytes("quant.q4_0") == 2 * 18);              // f16 + 16 nibble bytes
  CHECK(nbytes("quant.mxfp4") == 3 * 17);             // e8m0 + 16 bytes
  CHECK(nbytes("raw.q4_k") == 2 * 144);               // 2 f16 + 12 scales + 128
  CHECK(nbytes("raw.q6_k") == 2 * 210);
  CHECK(nbytes("raw.nvfp4") == 2 * 36);               // 64 elements: 4 scales + 32
  CHECK(nbytes("raw.q1_0") == 18);                    // 128 elements: f16 + 16 bytes
  CHECK(*g.find("test.string")->as_string() == "h\xC3\xA9llo");
  const auto* nested = g.find("test.nested_strings")->array<GgufValue>();
  REQUIRE(nested);
  CHECK((*nested)[0].strings()->to_vector() == std::vector<std::string>{"a", "bc"});

  Checkpoint ck = read_gguf(src);
  CHECK(ck.metadata["test.big_u32"] == json::parse(R"({"array":"uint32","length":2000})"));
  CHECK(ck.metadata["test.nested_ints"] == json::parse("[[1,2,3],[4,5]]"));
  CHECK(ck.metadata["test.u64"].get<uint64_t>() == 9223372036854775813ULL);
}

TEST_CASE("gguf: stories260K and every vocab GGUF match gguf-py's GGUFReader", "[gguf]") {
  NUNCHAKU_REQUIRE_SHARED();
  json want = load_json(test::testdata("expected/shared_gguf.json"));
  REQUIRE(want["files"].size() >= 13);
  for (const auto& [rel, file] : want["files"].items()) check_against_gguf_py(test::shared_testfile(rel), file);
}

TEST_CASE("gguf: real files read their header in chunks and expose full arrays", "[gguf]") {
  NUNCHAKU_REQUIRE_SHARED();
  FileSource file(test::shared_testfile("gguf/stories260K.gguf"));
  CountingSource src(file);
  GgufFile g = read_gguf_file(src);
  CHECK(src.calls <= 2);                       // ~14 KB of header in one 64 KiB chunk
  CHECK(src.bytes < g.data_offset + 64 * 1024);  // never the 1.2 MB of weights
  CHECK(g.tensors.size() == 48);
  CHECK(g.find("llama.embedding_length")->as_uint() == 64u);
  CHECK(g.find("llama.block_count")->as_uint() == 5u);
  CHECK(g.find("llama.attention.head_count")->as_uint() == 8u);
  CHECK(g.find("llama.attention.head_count_kv")->as_uint() == 4u);
  CHECK(g.find("tokenizer.ggml.tokens")->strings()->size() == 512);
  CHECK(g.find("tokenizer.ggml.scores")->array<float>()->size() == 512);
  Checkpoint ck = read_gguf(file);
  const TensorInfo* emb = ck.find("token_embd.weight");
  REQUIRE(emb);
  CHECK(emb->shape == std::vector<int64_t>{512, 64});  // ne = [64, 512]
}

TEST_CASE("gguf: ggml-vocab-llama-spm reports Llama-2-7B's hyper-parameters", "[gguf]") {
  NUNCHAKU_REQUIRE_SHARED();
  FileSource src(test::shared_testfile("vocab/ggml-vocab-llama-spm.gguf"));
  GgufFile g = read_gguf_file(src);
  CHECK(*g.find("general.architecture")->as_string() == "llama");
  CHECK(g.find("llama.embedding_length")->as_uint() == 4096u);
  CHECK(g.find("llama.block_count")->as_uint() == 32u);
  CHECK(g.find("llama.attention.head_count")->as_uint() == 32u);
  CHECK(g.find("llama.attention.head_count_kv")->as_uint() == 32u);
  CHECK(g.find("llama.context_length")->as_uint() == 4096u);
  CHECK(g.find("llama.feed_forward_length")->as_uint() == 11008u);
  CHECK(g.find("llama.rope.dimension_count")->as_uint() == 128u);
  CHECK(static_cast<float>(*g.find("llama.attention.layer_norm_rms_epsilon")->as_double()) == 1e-5f);
  const auto* tokens = g.find("tokenizer.ggml.tokens")->strings();
  REQUIRE(tokens);
  CHECK(tokens->size() == 32000);
  CHECK((*tokens)[1] == "<s>");
  CHECK(g.tensors.empty());

  Checkpoint ck = read_gguf(src);
  CHECK(ck.metadata["llama.embedding_length"] == 4096);
  CHECK(ck.metadata["llama.attention.layer_norm_rms_epsilon"].get<double>() == 1e-05);
  CHECK(ck.metadata["tokenizer.ggml.tokens"] == json::parse(R"({"array":"string","length":32000})"));
  CHECK(ck.metadata["tokenizer.ggml.scores"] == json::parse(R"({"array":"float32","length":32000})"));
  CHECK(ck.metadata.dump().size() < 4096);  // inspect output stays small
}
