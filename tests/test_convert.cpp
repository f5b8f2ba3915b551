// nunchaku convert: outputs compared with what transformers / python safetensors wrote for
// the same weights (testdata/models/llama-sharded is save_pretrained(max_shard_size="100KB")
// of testdata/models/llama), round trips through nunchaku's own readers, a converted model
// generating transformers' tokens in `nunchaku run`, and refusals that leave nothing behind.
#include <catch2/catch.hpp>

#include <csignal>
#include <cstring>
#include <set>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "convert/convert.hpp"
#include "core/error.hpp"
#include "core/interrupt.hpp"
#include "format/open.hpp"
#include "core/file.hpp"
#include "tests/helpers.hpp"

using namespace nunchaku;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string tensor_bytes(const Checkpoint& ck, const TensorInfo& t) {
  std::string b(t.nbytes, '\0');
  File::open_read_only(ck.files[t.file].path).read_at(t.offset, b.data(), b.size());
  return b;
}

// Every tensor of `b` is in `a` with the same dtype, shape and bytes (and the counts match).
void require_same_tensors(const Checkpoint& a, const Checkpoint& b) {
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (const auto& tb : b.tensors) {
    INFO(tb.name);
    const TensorInfo* ta = a.find(tb.name);
    REQUIRE(ta);
    CHECK(ta->dtype == tb.dtype);
    CHECK(ta->shape == tb.shape);
    CHECK(tensor_bytes(a, *ta) == tensor_bytes(b, tb));
  }
}

json safetensors_header(const std::string& path) {
  File f = File::open_read_only(path);
  uint64_t n = 0;
  f.read_at(0, &n, 8);
  std::string h(n, '\0');
  f.read_at(8, h.data(), n);
  CHECK((8 + n) % 8 == 0);
  return json::parse(h);
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

convert::ConvertReport convert_to(const std::string& in, const std::string& out, convert::ConvertOptions o = {}) {
  o.in = in;
  o.out = out;
  return convert::convert_checkpoint(o);
}

}  // namespace

TEST_CASE("convert: --shard-size splits exactly as transformers' save_pretrained(max_shard_size)", "[convert]") {
  test::TempDir tmp;
  const std::string out = tmp.file("out");
  auto r = test::run_cli({"convert", test::testdata("models/llama"), out, "--shard-size", "100KB", "-q"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const std::string golden = test::testdata("models/llama-sharded");
  CHECK(test::read_json(out + "/model.safetensors.index.json") ==
        test::read_json(golden + "/model.safetensors.index.json"));
  // The index text as transformers formats it (json.dumps(indent=2, sort_keys=True) + "\n").
  CHECK(test::read_text(out + "/model.safetensors.index.json") ==
        test::read_text(golden + "/model.safetensors.index.json"));
  CHECK(names_in(out) == names_in(golden));
  CHECK(test::read_text(out + "/config.json") == test::read_text(test::testdata("models/llama/config.json")));
  for (const auto& f : names_in(out))
    if (f.ends_with(".safetensors")) {
      INFO(f);
      const json h = safetensors_header(out + "/" + f);
      CHECK(h["__metadata__"] == json{{"format", "pt"}});
      json a = safetensors_header(golden + "/" + f), b = h;
      a.erase("__metadata__"), b.erase("__metadata__");
      std::set<std::string> ka, kb;
      for (auto& [k, v] : a.items()) ka.insert(k);
      for (auto& [k, v] : b.items()) kb.insert(k);
      CHECK(ka == kb);  // each file holds the same tensors
    }
  require_same_tensors(open_checkpoint(out), open_checkpoint(golden));
}

TEST_CASE("convert: a sharded checkpoint that fits one shard becomes one model.safetensors", "[convert]") {
  test::TempDir tmp;
  const std::string out = tmp.file("one");
  auto rep = convert_to(test::testdata("models/llama-sharded"), out);
  REQUIRE(rep.files.size() == 1);
  CHECK(names_in(out) == std::vector<std::string>{"config.json", "model.safetensors"});
  require_same_tensors(open_checkpoint(out + "/model.safetensors"), open_checkpoint(test::testdata("models/llama")));
  CHECK(safetensors_header(out + "/model.safetensors")["__metadata__"] == json{{"format", "pt"}});
  // Nothing else left in the parent (the temporary was renamed).
  CHECK(names_in(tmp.path) == std::vector<std::string>{"one"});
}

TEST_CASE("convert: PyTorch files with a shared storage: written once, kept name reported", "[convert]") {
  for (const std::string f : {"model_zip.pt", "model_legacy.pt"}) {
    INFO(f);
    test::TempDir tmp;
    const std::string in = test::testdata("models/llama-pt/" + f);
    const std::string out = tmp.file("st");
    auto r = test::run_cli({"convert", in, out, "--json"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const json j = json::parse(r.out);
    REQUIRE(j["dropped_duplicates"].size() == 1);
    CHECK(j["dropped_duplicates"][0] == "lm_head.weight=model.embed_tokens.weight");
    const Checkpoint ck_in = open_checkpoint(in), ck_out = open_checkpoint(out);
    CHECK(ck_out.find("lm_head.weight") == nullptr);
    CHECK(ck_out.tensors.size() + 1 == ck_in.tensors.size());
    for (const auto& t : ck_out.tensors) {
      INFO(t.name);
      const TensorInfo* s = ck_in.find(t.name);
      REQUIRE(s);
      CHECK(tensor_bytes(ck_out, t) == tensor_bytes(ck_in, *s));
    }
  }
}

TEST_CASE("convert: a converted model generates transformers' tokens in nunchaku run", "[convert]") {
  const std::string dir = test::testdata("run/llama-spm");
  const json exp = test::read_json(dir + "/expected.json");
  std::string in;
  std::vector<json> cases;
  for (const auto& c : exp["cases"])
    if (c["mode"] == "raw") in += json({{"prompt", c["prompt"]}}).dump() + "\n", cases.push_back(c);
  REQUIRE(!cases.empty());
  test::TempDir tmp;
  const std::string out = tmp.file("by-layer");
  auto c = test::run_cli({"convert", dir, out, "--shard-by", "layer", "--verify", "-q"});
  INFO(c.err);
  REQUIRE(c.exit_code == 0);
  // embedding, 2 layers, norm, head: 5 files, each one module
  const json idx = test::read_json(out + "/model.safetensors.index.json");
  CHECK(idx["weight_map"]["model.layers.1.mlp.down_proj.weight"] == "model-00003-of-00005.safetensors");
  CHECK(idx["weight_map"]["model.layers.1.input_layernorm.weight"] == "model-00003-of-00005.safetensors");
  CHECK(idx["weight_map"]["lm_head.weight"] == "model-00005-of-00005.safetensors");
  for (const std::string f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "config.json"})
    CHECK(test::read_text(out + "/" + f) == test::read_text(dir + "/" + f));
  auto r = test::run_cli({"run", out, "--raw", "--max-tokens", std::to_string(exp["max_tokens"].get<int>()), "-q"}, in);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::istringstream lines(r.out);
  std::string line;
  size_t i = 0;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    REQUIRE(i < cases.size());
    const json o = json::parse(line);  // the ids are "token_ids" (older: "completion_tokens")
    CHECK(o.value("token_ids", o.value("completion_tokens", json())) == cases[i]["completion_ids"]);
    ++i;
  }
  CHECK(i == cases.size());
}

TEST_CASE("convert: tensors larger than the buffer are converted in chunks", "[convert]") {
  test::TempDir tmp;
  const std::string in = test::testdata("models/llama");
  convert::ConvertOptions o;
  o.buffer_bytes = 4096;  // the 64 KiB embedding takes 16+ chunks
  o.verify = true;
  convert_to(in, tmp.file("copy"), o);
  require_same_tensors(open_checkpoint(tmp.file("copy")), open_checkpoint(in));
  o.dtype = DType::BF16;
  auto small = convert_to(in, tmp.file("bf16-small"), o);
  o.buffer_bytes = 256 << 20;
  auto big = convert_to(in, tmp.file("bf16-big"), o);
  CHECK(small.verified == std::optional<bool>(true));
  require_same_tensors(open_checkpoint(tmp.file("bf16-small")), open_checkpoint(tmp.file("bf16-big")));
}

TEST_CASE("convert: refusals write nothing and leave OUT and IN alone", "[convert]") {
  test::TempDir tmp;
  SECTION("OUT exists") {
    fs::create_directory(tmp.file("out"));
    test::write_file(tmp.file("out/keep"), std::string("x"));
    auto r = test::run_cli({"convert", test::testdata("models/llama"), tmp.file("out")});
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("already exists") != std::string::npos);
    CHECK(names_in(tmp.file("out")) == std::vector<std::string>{"keep"});
  }
  SECTION("truncated input") {
    std::string bytes = test::read_text(test::testdata("models/llama/model.safetensors"));
    test::write_file(tmp.file("bad.safetensors"), bytes.substr(0, bytes.size() - 100));
    auto r = test::run_cli({"convert", tmp.file("bad.safetensors"), tmp.file("out")});
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("bad.safetensors") != std::string::npos);
    CHECK(names_in(tmp.path) == std::vector<std::string>{"bad.safetensors"});
  }
  SECTION("hostile header") {
    std::string h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,1000000]}}";
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = char(uint64_t(h.size()) >> (8 * i));
    test::write_file(tmp.file("evil.safetensors"), bytes + h);
    auto r = test::run_cli({"convert", tmp.file("evil.safetensors"), tmp.file("out")});
    CHECK(r.exit_code == 2);
    CHECK(names_in(tmp.path) == std::vector<std::string>{"evil.safetensors"});
  }
  SECTION("a dtype convert cannot dequantize") {
    auto r = test::run_cli({"convert", test::testdata("gguf/quant_small.gguf"), tmp.file("out")});
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("cannot convert") != std::string::npos);
    CHECK(names_in(tmp.path).empty());
  }
  SECTION("OUT inside IN") {
    fs::copy(test::testdata("models/llama"), tmp.file("in"));
    auto r = test::run_cli({"convert", tmp.file("in"), tmp.file("in/out")});
    CHECK(r.exit_code == 2);
    CHECK(names_in(tmp.file("in")) == std::vector<std::string>{"config.json", "model.safetensors"});
  }
  SECTION("usage") {
    CHECK(test::run_cli({"convert", test::testdata("models/llama"), tmp.file("o"), "--dtype", "int3"}).exit_code == 2);
    CHECK(test::run_cli({"convert", test::testdata("models/llama"), tmp.file("o"), "--shard-by", "x"}).exit_code == 2);
    CHECK(test::run_cli({"convert", test::testdata("models/llama"), tmp.file("o"), "--dtype", "q8_0"}).exit_code == 2);
    CHECK(names_in(tmp.path).empty());
  }
}

TEST_CASE("convert: SIGINT during the copy removes the partial output", "[convert]") {
  test::TempDir tmp;
  convert::ConvertOptions o;
  o.buffer_bytes = 4096;
  int calls = 0;
  o.progress = [&](uint64_t, uint64_t) {
    if (++calls == 3) std::raise(SIGINT);
  };
  try {
    convert_to(test::testdata("models/llama"), tmp.file("out"), o);
    FAIL("no interruption");
  } catch (const Error& e) {
    CHECK(e.exit_code() == 130);
  }
  reset_interrupt();
  CHECK(names_in(tmp.path).empty());
}

namespace {

// Values equal to torch's / gguf-py's: bit for bit, except that any NaN matches any NaN
// (the payload is not part of the conversion contract).
void require_same_values(const Checkpoint& got, const Checkpoint& want) {
  for (const auto& tw : want.tensors) {
    INFO(tw.name);
    const TensorInfo* tg = got.find(tw.name);
    REQUIRE(tg);
    REQUIRE(tg->dtype == tw.dtype);
    CHECK(tg->shape == tw.shape);
    const std::string a = tensor_bytes(got, *tg), b = tensor_bytes(want, tw);
    REQUIRE(a.size() == b.size());
    if (a == b) continue;
    const size_t es = dtype_info(tw.dtype).block_bytes;
    REQUIRE((es == 2 || es == 4));
    for (size_t i = 0; i < a.size(); i += es) {
      uint32_t x = 0, y = 0;
      std::memcpy(&x, a.data() + i, es);
      std::memcpy(&y, b.data() + i, es);
      const uint32_t exp_mask = es == 4 ? 0x7f800000u : (tw.dtype == DType::F16 ? 0x7c00u : 0x7f80u);
      const uint32_t man_mask = es == 4 ? 0x7fffffu : (tw.dtype == DType::F16 ? 0x3ffu : 0x7fu);
      auto is_nan = [&](uint32_t v) { return (v & exp_mask) == exp_mask && (v & man_mask) != 0; };
      INFO("element " << i / es);
      CHECK((x == y || (is_nan(x) && is_nan(y))));
    }
  }
}

}  // namespace

TEST_CASE("convert: --dtype rounds as torch's Tensor.to (nearest, ties to even)", "[convert]") {
  const std::string in = test::testdata("convert/values.safetensors");
  for (const std::string d : {"bf16", "f16", "f32"}) {
    INFO(d);
    test::TempDir tmp;
    auto r = test::run_cli({"convert", in, tmp.file("o"), "--dtype", d == "f16" ? "fp16" : d == "f32" ? "fp32" : d, "-q"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const Checkpoint got = open_checkpoint(tmp.file("o"));
    const Checkpoint want = open_checkpoint(test::testdata("convert/values_" + d + ".safetensors"));
    REQUIRE(got.tensors.size() == want.tensors.size());
    require_same_values(got, want);  // integers stay integers (v.i64)
  }
}

TEST_CASE("convert: quantized GGUF tensors dequantize to gguf-py's values", "[convert]") {
  const std::string in = test::testdata("convert/dequant.gguf");
  test::TempDir tmp;
  convert_to(in, tmp.file("f32"));  // no --dtype: quantized -> F32, F16 stays F16
  const Checkpoint got = open_checkpoint(tmp.file("f32"));
  const Checkpoint want = open_checkpoint(test::testdata("convert/dequant_f32.safetensors"));
  for (const auto& t : want.tensors) {
    INFO(t.name);
    const TensorInfo* g = got.find(t.name);
    REQUIRE(g);
    if (t.name == "t.f16" || t.name == "t.bf16") CHECK(dtype_info(g->dtype).kind == DTypeKind::Float);  // kept
    else CHECK(tensor_bytes(got, *g) == tensor_bytes(want, t));
  }
  convert::ConvertOptions o;
  o.dtype = DType::BF16;
  convert_to(in, tmp.file("bf16"), o);
  require_same_values(open_checkpoint(tmp.file("bf16")), open_checkpoint(test::testdata("convert/dequant_bf16.safetensors")));
}

TEST_CASE("convert: GGUF output: Q8_0 equals gguf-py's quantize, round trips through our readers", "[convert]") {
  test::TempDir tmp;
  auto r = test::run_cli({"convert", test::testdata("convert/q8_input.safetensors"), tmp.file("q.gguf"), "--dtype", "q8_0", "-q"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const Checkpoint q = open_checkpoint(tmp.file("q.gguf"));
  REQUIRE(q.format == Format::GGUF);
  const TensorInfo* w = q.find("w");
  REQUIRE(w);
  CHECK(w->dtype == DType::Q8_0);
  CHECK(w->shape == std::vector<int64_t>{4, 64});
  const Checkpoint want = open_checkpoint(test::testdata("convert/q8_expected.safetensors"));
  CHECK(tensor_bytes(q, *w) == tensor_bytes(want, want.tensors[0]));

  // safetensors -> GGUF (F32, F16) -> safetensors gives the input back (bytes, or f16 values).
  for (const std::string d : {"", "fp16"}) {
    INFO("dtype " << d);
    test::TempDir t2;
    std::vector<std::string> a = {"convert", test::testdata("models/llama"), t2.file("m.gguf"), "-q", "--verify"};
    if (!d.empty()) a.insert(a.end(), {"--dtype", d});
    auto c = test::run_cli(a);
    INFO(c.err);
    REQUIRE(c.exit_code == 0);
    auto back = test::run_cli({"convert", t2.file("m.gguf"), t2.file("back"), "--dtype", "fp32", "-q"});
    REQUIRE(back.exit_code == 0);
    const Checkpoint in = open_checkpoint(test::testdata("models/llama")), out = open_checkpoint(t2.file("back"));
    if (d.empty()) require_same_tensors(out, in);
    const Checkpoint g = open_checkpoint(t2.file("m.gguf"));
    CHECK(g.metadata["general.architecture"] == "llama");
    CHECK(g.metadata["llama.block_count"] == 2);
  }
  // GGUF -> GGUF keeps quantized blocks byte for byte and every key-value.
  test::TempDir t3;
  convert_to(test::testdata("convert/dequant.gguf"), t3.file("copy.gguf"));
  require_same_tensors(open_checkpoint(t3.file("copy.gguf")), open_checkpoint(test::testdata("convert/dequant.gguf")));
}

TEST_CASE("convert: real files from other tools convert with --verify and read back equal", "[convert][shared]") {
  NUNCHAKU_REQUIRE_SHARED();
  const std::string root = test::shared_testfile("");
  int converted = 0;
  for (const auto& dir : {"pytorch", "safetensors", "gguf"})
    for (const auto& e : fs::directory_iterator(root + "/" + dir)) {
      if (!e.is_regular_file()) continue;
      const std::string in = e.path().string();
      bool opens = true;
      try {
        (void)open_checkpoint(in);
      } catch (const Error&) {
        opens = false;  // broken.pt and friends: refused by inspect too
      }
      test::TempDir tmp;
      auto r = test::run_cli({"convert", in, tmp.file("out"), "--verify", "-q"});
      INFO(in << ": " << r.err);
      if (!opens) {
        CHECK(r.exit_code == 2);
        CHECK(names_in(tmp.path).empty());
        continue;
      }
      REQUIRE(r.exit_code == 0);
      ++converted;
      const Checkpoint a = open_checkpoint(in), b = open_checkpoint(tmp.file("out"));
      for (const auto& t : b.tensors) {
        INFO(t.name);
        const TensorInfo* s = a.find(t.name);
        REQUIRE(s);
        if (s->strides.empty() && s->dtype == t.dtype) CHECK(tensor_bytes(a, *s) == tensor_bytes(b, t));
      }
    }
  CHECK(converted > 20);
}

TEST_CASE("convert: --shard-order name fills shards as transformers 5.x's save_pretrained", "[convert]") {
  // transformers 5.24 hands the state dict to split_torch_state_dict_into_shards in name
  // order (scripts/make_gguf_convert_fixtures.py wrote its index for the same model and size).
  test::TempDir tmp;
  const std::string out = tmp.file("out");
  auto r = test::run_cli({"convert", test::testdata("models/llama"), out, "--shard-size", "100KB", "--shard-order", "name", "-q"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json ref = test::read_json(test::testdata("convert/llama-sharded-tf5.index.json"));
  const json ours = test::read_json(out + "/model.safetensors.index.json");
  CHECK(ours["weight_map"] == ref["weight_map"]);
  CHECK(ours["metadata"] == ref["metadata"]);
  // The default (model order) differs from it: this fixture does tell them apart.
  CHECK(test::read_json(test::testdata("models/llama-sharded/model.safetensors.index.json"))["weight_map"] != ref["weight_map"]);
  r = test::run_cli({"convert", test::testdata("models/llama"), tmp.file("x"), "--shard-by", "layer", "--shard-order", "name"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--shard-order applies to --shard-size"));
}
