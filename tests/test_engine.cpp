// Engine forward pass against transformers and gguf-py (testdata/engine/goldens.json, made
// by scripts/make_engine_goldens.py): full prompt logits and greedy continuations of tiny
// random llama / qwen2 / mistral / qwen3 models, llama3 rope scaling, tied embeddings,
// bf16/f16 weights, GGUF F32/Q8_0/Q4_0 copies; the quant block kernels against gguf-py's
// dequantization; stories260K against llama2.c's published greedy story.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "engine/kernels.hpp"
#include "engine/engine.hpp"
#include "engine/model.hpp"
#include "format/gguf.hpp"
#include "format/open.hpp"
#include "io/loader.hpp"
#include "io/placement.hpp"
#include "core/source.hpp"
#include "model/model.hpp"
#include "tests/test_engine_helpers.hpp"
#include "tests/helpers.hpp"

using namespace nunchaku;
using namespace nunchaku::engine;
using nlohmann::json;

namespace {

const json& goldens() {
  static json g = json::parse(std::ifstream(test::testdata("engine/goldens.json")));
  return g;
}

// The largest |ours - ref| over a row, relative to the row's largest |ref|. The engine and
// torch both compute in fp32 but sum in different orders (blocked SIMD vs MKL GEMM), which
// moves each logit by a few ulps of the dot products behind it: ~1e-6 of the row's scale
// for these sizes. 1e-4 leaves room for that and still catches any real mistake (a wrong
// rope pairing or norm moves logits by >1e-2 of the scale).
double row_rel_error(const float* ours, const json& ref) {
  double scale = 0, err = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    scale = std::max(scale, std::abs(ref[i].get<double>()));
    err = std::max(err, test::abs_diff(ours[i], ref[i].get<double>()));
  }
  return err / std::max(scale, 1e-6);
}

void check_against_golden(const std::string& key, const std::string& path, double tol, EngineOptions opts = {}) {
  INFO(key);
  const json& g = goldens().at(key);
  auto m = test::load_engine_model(path, [&] {
    opts.max_batch = std::max(opts.max_batch, 1);
    opts.logit_rows = 64;
    opts.max_context = 64;
    return opts;
  }());
  const auto& prompts = g.at("prompts");
  const auto& logits = g.at("logits");
  std::vector<int32_t> p0 = prompts[0].get<std::vector<int32_t>>();
  SeqChunk ch{0, 0, p0, true};
  auto out = m.tf->forward({&ch, 1});
  REQUIRE(out.size() == p0.size() * size_t(m.tf->vocab()));
  REQUIRE(logits.size() == p0.size());
  for (size_t r = 0; r < p0.size(); ++r) {
    INFO("position " << r);
    REQUIRE(logits[r].size() == size_t(m.tf->vocab()));
    CHECK(row_rel_error(out.data() + r * m.tf->vocab(), logits[r]) < tol);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO("greedy prompt " << i);
    auto prompt = prompts[i].get<std::vector<int32_t>>();
    auto got = test::greedy(*m.tf, prompt, 16);
    CHECK(got == g.at("continuations")[i].get<std::vector<int32_t>>());
  }
}

}  // namespace

TEST_CASE("engine tests: a NaN logit is an infinite error, not skipped by the running maximum", "[engine]") {
  const json ref = json::array({1.0, -2.0, 0.5});
  const float fine[] = {1.0f, -2.0f, 0.5f}, nan_last[] = {1.0f, -2.0f, NAN}, nan_first[] = {NAN, -2.0f, 0.5f};
  CHECK(row_rel_error(fine, ref) == 0.0);
  CHECK(row_rel_error(nan_last, ref) == INFINITY);
  CHECK(row_rel_error(nan_first, ref) == INFINITY);
}

TEST_CASE("engine: fp32 llama matches transformers (logits 1e-4, greedy tokens)", "[engine]") {
  check_against_golden("models/llama", test::testdata("models/llama"), 1e-4);
}

TEST_CASE("engine: qwen2 (q/k/v bias, tied) matches transformers", "[engine]") {
  check_against_golden("models/qwen2", test::testdata("models/qwen2"), 1e-4);
}

TEST_CASE("engine: mistral matches transformers", "[engine]") {
  check_against_golden("models/mistral", test::testdata("models/mistral"), 1e-4);
}

TEST_CASE("engine: qwen3 (per-head q/k RMSNorm) matches transformers", "[engine]") {
  check_against_golden("engine/qwen3", test::testdata("engine/qwen3"), 1e-4);
}

TEST_CASE("engine: llama3 rope scaling matches transformers", "[engine]") {
  check_against_golden("engine/llama3-rope", test::testdata("engine/llama3-rope"), 1e-4);
}

TEST_CASE("engine: tied embeddings llama matches transformers", "[engine]") {
  check_against_golden("engine/llama-tied", test::testdata("engine/llama-tied"), 1e-4);
}

TEST_CASE("engine: every ISA's kernels (scalar, AVX2, AVX-512) give the golden answers", "[engine]") {
  test::for_each_isa([&](Isa isa) {
    INFO("ISA " << isa_name(isa));
    check_against_golden("models/llama", test::testdata("models/llama"), 1e-4);
    check_against_golden("engine/llama-small-bf16", test::testdata("engine/llama-small-bf16"), 1e-4);
    check_against_golden("engine/llama-small-gguf/llama-small-q4_0.gguf",
                         test::testdata("engine/llama-small-gguf/llama-small-q4_0.gguf"), 1e-4);
  });
}

TEST_CASE("engine: bf16 and f16 weights are used as stored", "[engine]") {
  // Reference: transformers in fp32 over the bf16/f16-rounded weights, which is exactly
  // what the engine computes (weights stay 16-bit in memory, arithmetic in fp32), so the
  // fp32 tolerance applies.
  check_against_golden("engine/llama-small-bf16", test::testdata("engine/llama-small-bf16"), 1e-4);
  check_against_golden("engine/llama-small-f16", test::testdata("engine/llama-small-f16"), 1e-4);
  auto m = test::load_engine_model(test::testdata("engine/llama-small-bf16"), {});
  CHECK(m.tf->describe().find("weights BF16") != std::string::npos);
  // No fp32 copy: the run state is activations + KV, far below an fp32 copy of the weights
  // would be added to; the weight views point into the store.
  CHECK(m.load.store.find("model.layers.0.mlp.up_proj.weight")->dtype == DType::BF16);
}

TEST_CASE("engine: f16 KV cache stays close to the fp32 reference", "[engine]") {
  // The cache rounds K and V to half precision (rel. 2^-11 ~ 5e-4), so the logits move by
  // about that; greedy tokens still match (min top-1/top-2 gap along the paths >= 3e-3).
  EngineOptions o;
  o.kv_dtype = DType::F16;
  check_against_golden("engine/llama-small", test::testdata("engine/llama-small"), 5e-3, o);
}

TEST_CASE("engine: GGUF F32 copy gives the same greedy tokens as the safetensors one", "[engine]") {
  // Same weights, llama.cpp names, Q/K rows permuted for the interleaved rope.
  auto st = test::load_engine_model(test::testdata("engine/llama-small"), {});
  auto gg = test::load_engine_model(test::testdata("engine/llama-small-gguf/llama-small-f32.gguf"), {});
  CHECK(st.tf->rope_style() == RopeStyle::NeoX);
  CHECK(gg.tf->rope_style() == RopeStyle::Interleaved);
  for (const auto& p : goldens().at("engine/llama-small").at("prompts")) {
    auto prompt = p.get<std::vector<int32_t>>();
    CHECK(test::greedy(*st.tf, prompt, 16) == test::greedy(*gg.tf, prompt, 16));
  }
  check_against_golden("engine/llama-small-gguf/llama-small-f32.gguf",
                       test::testdata("engine/llama-small-gguf/llama-small-f32.gguf"), 1e-4);
}

TEST_CASE("engine: GGUF qwen2 (HF row order, biases, tied) uses NeoX rope and matches transformers", "[engine]") {
  // The same weights as testdata/models/qwen2, written with llama.cpp names under arch
  // qwen2, for which llama.cpp uses LLAMA_ROPE_TYPE_NEOX and convert_hf_to_gguf does not
  // permute Q/K.
  auto gg = test::load_engine_model(test::testdata("engine/qwen2-f32.gguf"), {});
  CHECK(gg.tf->rope_style() == RopeStyle::NeoX);
  check_against_golden("models/qwen2", test::testdata("engine/qwen2-f32.gguf"), 1e-4);
}

TEST_CASE("engine: GGUF Q8_0 and Q4_0 match a reference over gguf-py's dequantized weights", "[engine]") {
  // The reference is transformers in fp32 over gguf.quants.dequantize(...) of the written
  // blocks; the engine dequantizes the same blocks inside its dot products, so only the
  // summation order differs and the fp32 tolerance applies.
  for (const char* q : {"q8_0", "q4_0"}) {
    std::string rel = std::string("engine/llama-small-gguf/llama-small-") + q + ".gguf";
    check_against_golden(rel, test::testdata(rel), 1e-4);
  }
}

TEST_CASE("engine: quant block kernels match gguf-py dequantization", "[engine]") {
  json cases = json::parse(std::ifstream(test::testdata("engine/quant_blocks.json")));
  REQUIRE(cases.size() == 8);  // Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K
  test::for_each_isa([&](Isa now) {
    for (const auto& c : cases) {
      std::string type = c.at("type");
      INFO(type << " on " << isa_name(now));
      auto dt = dtype_from_name(type);
      REQUIRE(dt);
      std::string hex = c.at("data_hex");
      std::vector<uint8_t> bytes(hex.size() / 2);
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
      int64_t rows = c.at("rows"), cols = c.at("cols");
      WeightMatrix w{bytes.data(), *dt, rows, cols, bytes.size() / size_t(rows), type};
      REQUIRE(*dtype_nbytes(*dt, uint64_t(cols)) == w.row_bytes);
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        dequant_row(w, r, row.data());
        for (int64_t i = 0; i < cols; ++i) {
          float ref = c.at("dequant")[r][i].get<float>();
          // Same float32 operations in the same order as gguf-py: equal to the last bit
          // or one rounding apart.
          REQUIRE(std::abs(row[size_t(i)] - ref) <= 1e-6f * std::max(1.0f, std::abs(ref)));
        }
      }
      // Batches of 1, 3 and 5 activation rows (row i is x[i % 3]) exercise every tile width.
      const auto& xs = c.at("x");
      for (int64_t B : {1, 3, 5}) {
        std::vector<float> x;
        for (int64_t b = 0; b < B; ++b)
          for (const auto& v : xs[size_t(b % 3)]) x.push_back(v.get<float>());
        std::vector<float> y(size_t(B * rows), -1.0f);
        matmul_rows(w, x.data(), cols, B, y.data(), rows, 0, rows);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t r = 0; r < rows; ++r) {
            double ref = c.at("dot")[size_t(b % 3)][size_t(r)].get<double>();
            // fp32 sums of up to 512 products of magnitude ~0.1-5 against a float64 reference.
            CHECK(std::abs(y[size_t(b * rows + r)] - ref) <= 1e-4 * std::max(1.0, std::abs(ref)));
          }
      }
    }
  });
}

TEST_CASE("engine: stories260K greedy from BOS tells llama2.c's published story", "[engine]") {
  NUNCHAKU_REQUIRE_SHARED();
  // Published in llama2.c's README (and the stories260K model card) as the output of
  // `./run stories260K/stories260K.bin -z stories260K/tok512.bin -t 0.0`.
  const std::string expected =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she "
      "saw a big, red ball. She wanted to play with it, but it was too high.\n"
      "Lily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do. She said, \"I want "
      "to play with your ball, but I can't find it.\"\n"
      "Lily was sad and didn't know what to do. She said, \"I'm sorry, Lily. I didn't know what to do.\"\n"
      "Lily didn't want to help her mom, so she said, \"I'm sorry, mom. I didn't know what to do.\" Her mom said, "
      "\"Don't worry, Lily. We can help you.";
  std::string path = test::shared_testfile("gguf/stories260K.gguf");
  EngineOptions o;
  o.max_context = 512;
  auto m = test::load_engine_model(path, o);
  CHECK(m.tf->rope_style() == RopeStyle::Interleaved);
  // llama2.c's run.c: start from BOS (1), 256 steps, stop early if BOS comes again.
  std::vector<int32_t> prompt = {1};
  auto ids = test::greedy(*m.tf, prompt, 300, /*stop_token=*/1);
  FileSource src(path);
  GgufFile gf = read_gguf_file(src);
  const auto* tokens = gf.find("tokenizer.ggml.tokens")->strings();
  REQUIRE(tokens);
  std::string text = test::decode_spm_pieces(tokens->to_vector(), ids);
  // run.c drops the space the first piece carries after BOS.
  if (!text.empty() && text[0] == ' ') text.erase(0, 1);
  CHECK(text.substr(0, expected.size()) == expected);
}

TEST_CASE("engine: disk-offloaded weights (mmap views of the file) run as they are", "[engine]") {
  EngineOptions o;
  o.max_context = 64;
  auto m = test::load_engine_model(test::testdata("engine/llama-small-gguf/llama-small-q8_0.gguf"), o,
                                   Device{Device::Kind::Disk, 0});
  REQUIRE(m.load.store.find("blk.0.attn_q.weight")->device.kind == Device::Kind::Disk);
  Transformer& tf = *m.tf;
  const json& g = goldens().at("engine/llama-small-gguf/llama-small-q8_0.gguf");
  for (size_t i = 0; i < g.at("prompts").size(); ++i) {
    auto prompt = g.at("prompts")[i].get<std::vector<int32_t>>();
    CHECK(test::greedy(tf, prompt, 16) == g.at("continuations")[i].get<std::vector<int32_t>>());
  }
}

TEST_CASE("engine: unsupported models and misuse are errors with a code", "[engine]") {
  auto code_of = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.code();
    }
    return std::string("no error");
  };
  Checkpoint ck = open_checkpoint(test::testdata("models/gpt2"));
  ModelLayout layout = describe_model(ck);
  LoadOptions lo;
  lo.placement = place_all(layout, Device{Device::Kind::Cpu, 0});
  LoadResult lr = load_checkpoint(ck, layout, lo);
  CHECK(code_of([&] { make_engine(ck, layout, lr.store, {}); }) == "engine.unsupported_architecture");

  EngineOptions o;
  o.max_context = 16;
  o.max_batch = 2;
  auto m = test::load_engine_model(test::testdata("engine/llama-small"), o);
  std::vector<int32_t> ids = {1, 2, 3};
  std::vector<int32_t> bad = {1, 500};
  std::vector<int32_t> long_ids(17, 3);
  SeqChunk two[2] = {{0, 0, ids}, {0, 0, ids}};
  CHECK(code_of([&] { m.tf->forward(two); }) == "engine.bad_batch");
  SeqChunk slot{5, 0, ids};
  CHECK(code_of([&] { m.tf->forward({&slot, 1}); }) == "engine.bad_batch");
  SeqChunk tok{0, 0, bad};
  CHECK(code_of([&] { m.tf->forward({&tok, 1}); }) == "engine.bad_token");
  SeqChunk full{0, 0, long_ids};
  CHECK(code_of([&] { m.tf->forward({&full, 1}); }) == "engine.context_full");
  SeqChunk gap{1, 2, ids};  // slot 1 holds nothing yet
  CHECK(code_of([&] { m.tf->forward({&gap, 1}); }) == "engine.bad_batch");
}

TEST_CASE("engine: a KV cache larger than the available memory is engine.out_of_memory (exit 3)", "[engine]") {
  EngineOptions o;
  o.max_batch = 1 << 20;
  o.max_context = 1 << 20;  // 2^40 positions x 16 floats x 2 layers x 2: far beyond any RAM
  o.max_tokens = 8;
  try {
    test::load_engine_model(test::testdata("engine/llama-small"), o);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == "engine.out_of_memory");
    CHECK(e.exit_code() == 3);
  }
}
