// Every architecture record against transformers' own meta-device model: the header-only
// fixtures in testdata/arch/ (scripts/make_arch_fixtures.py) hold a published config.json,
// the tensors exactly as transformers 5 names them (quantized stores as the published
// checkpoints hold them) and what transformers says: sum(p.numel()), the active parameters,
// the decoder layers and, per layer, what its reference implementation caches.
#include <algorithm>
#include <filesystem>
#include <string>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include "format/open.hpp"
#include "memory/estimate.hpp"
#include "model/model.hpp"
#include "tests/arch_fixture.hpp"
#include "tests/helpers.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace nunchaku;

namespace {

std::vector<fs::path> fixtures() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(test::testdata("arch")))
    if (e.is_directory() && fs::exists(e.path() / "expected.json")) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("architecture records: parameters, active parameters and layers equal transformers' meta model", "[arch]") {
  const auto all = fixtures();
  REQUIRE(all.size() >= 30);
  for (const auto& src : all) {
    const json exp = test::read_json((src / "expected.json").string());
    INFO("fixture " << src.filename().string());
    test::TempDir tmp;
    test::write_arch_fixture(src, tmp.path.string());
    const Checkpoint ck = open_checkpoint(tmp.path.string());
    const ModelLayout layout = describe_model(ck);
    REQUIRE(layout.spec);
    const ModelSpec& s = *layout.spec;
    INFO("architecture " << s.architecture << ", warnings: " << fmt::format("{}", fmt::join(layout.warnings, " | ")));
    CHECK(layout.num_parameters == exp["num_parameters"].get<uint64_t>());
    CHECK(layout.num_active_parameters == exp["num_active_parameters"].get<uint64_t>());
    // t5's cross-attention K/V and flux's activations are not modelled: named as guessed.
    CHECK(s.guessed.empty() == (s.architecture != "t5" && s.architecture != "flux"));
    const auto& layers = exp["layers"];
    if (layers.empty()) continue;  // t5/bert: checked in their own cases
    REQUIRE(s.num_layers == static_cast<int64_t>(layers.size()));
    int64_t decoder_layers = 0;
    for (const auto& m : layout.modules) decoder_layers += m.kind == ModuleKind::Layer && m.component.empty();
    CHECK(decoder_layers == s.num_layers);
    for (size_t l = 0; l < layers.size(); ++l) {
      INFO("layer " << l);
      const auto& want = layers[l];
      CHECK(attn_kind_name(s.attn_kind(int64_t(l))) == want["kind"].get<std::string>());
      const int64_t window = l < s.layer_windows.size() ? s.layer_windows[l] : 0;
      CHECK(window == want["window"].get<int64_t>());
      // One-byte elements: kv_layer_bytes counts elements. Per position for caches, per
      // sequence for a recurrent state (the same at any context).
      const uint64_t per_token = kv_layer_bytes(s, int64_t(l), 1, 1, DType::U8);
      if (want["kind"] == "recurrent") {
        CHECK(per_token == want["state_elems"].get<uint64_t>());
        CHECK(kv_layer_bytes(s, int64_t(l), 100000, 1, DType::U8) == per_token);
      } else {
        CHECK(per_token == want["kv_elems_per_token"].get<uint64_t>());
      }
    }
  }
}

TEST_CASE("architecture records: multimodal wrappers keep vision layers out of the decoder stack", "[arch]") {
  for (const char* name : {"gemma3-12b", "llava-1.5-7b", "mistral3-24b", "qwen2-vl-7b", "qwen2.5-vl-7b", "llama4-scout"}) {
    INFO(name);
    test::TempDir tmp;
    test::write_arch_fixture(fs::path(test::testdata("arch")) / name, tmp.path.string());
    const Checkpoint ck = open_checkpoint(tmp.path.string());
    const ModelLayout layout = describe_model(ck);
    REQUIRE(layout.spec);
    CHECK(!layout.spec->wrapper.empty());
    bool vision = false;
    for (const auto& m : layout.modules) {
      if (m.component == "vision_tower") vision = true;
      if (m.kind == ModuleKind::Layer) CHECK(m.component.empty());
    }
    CHECK(vision);
    // Estimate charges KV to the decoder layers only, never to the vision tower or projector.
    Workload w;
    w.context = 4096;
    const Estimate e = estimate(ck, layout, w);
    int64_t cached = 0;
    for (const auto& mc : e.modules) {
      if (mc.kind != ModuleKind::Layer) CHECK(mc.kv_bytes == 0);
      cached += mc.kv_bytes > 0;
    }
    CHECK(cached == layout.spec->num_layers);
  }
}

TEST_CASE("architecture records: sparse Hub configs get their class defaults", "[arch]") {
  test::TempDir tmp;
  test::write_arch_fixture(fs::path(test::testdata("arch")) / "gemma3-12b", tmp.path.string());
  const ModelLayout layout = describe_model(open_checkpoint(tmp.path.string()));
  REQUIRE(layout.spec);
  const ModelSpec& s = *layout.spec;
  CHECK(s.head_dim == 256);          // Gemma3TextConfig default, not 3840 / 16 = 240
  CHECK(s.rope_theta == 1000000.0);
  CHECK(s.max_context == 131072);
  CHECK(s.image_tokens == 256);
  // Gemma 3 12B at 32k, bf16: 8 full layers × 32768 + 40 sliding × 1024 positions,
  // 2 × 8 KV heads × 256 × 2 B each (Gemma3's reference cache).
  CHECK(kv_cache_bytes(s, 32768, 1, DType::BF16) == (8ull * 32768 + 40ull * 1024) * 2 * 8 * 256 * 2);
}

TEST_CASE("architecture records: quantized stores count logical parameters and compute in bf16", "[arch]") {
  for (const char* name : {"gpt-oss-20b-mxfp4", "deepseek-v3-fp8"}) {
    INFO(name);
    test::TempDir tmp;
    test::write_arch_fixture(fs::path(test::testdata("arch")) / name, tmp.path.string());
    const Checkpoint ck = open_checkpoint(tmp.path.string());
    const ModelLayout layout = describe_model(ck);
    Workload w;
    w.context = 4096;
    w.runtime = Runtime::Vllm;
    const Estimate e = estimate(ck, layout, w);
    CHECK(e.compute_dtype == DType::BF16);
    CHECK(e.kv_dtype == DType::BF16);
    const json exp = test::read_json(test::testdata(std::string("arch/") + name + "/expected.json"));
    CHECK(e.parameters == exp["num_parameters"].get<uint64_t>());  // no MTP, no scales
    // Full training charges gradients and AdamW states on the logical parameters.
    Workload t;
    t.mode = Mode::Train;
    t.context = 512;
    const Estimate te = estimate(ck, layout, t);
    CHECK(te.trainable_parameters == exp["num_parameters"].get<uint64_t>());
  }
}

TEST_CASE("architecture records: GGUF layer patterns are llama.cpp's defaults and its KV cells", "[arch][gguf]") {
  // Gemma 3 12B as convert_hf_to_gguf writes it: a window, no pattern key (llama.cpp: 6).
  json md = {{"general.architecture", "gemma3"},        {"gemma3.block_count", 48},
             {"gemma3.embedding_length", 3840},         {"gemma3.attention.head_count", 16},
             {"gemma3.attention.head_count_kv", 8},     {"gemma3.attention.key_length", 256},
             {"gemma3.attention.sliding_window", 1024}, {"gemma3.feed_forward_length", 15360},
             {"gemma3.context_length", 131072},         {"gemma3.rope.freq_base", 1000000.0}};
  const auto g = spec_from_gguf(md);
  REQUIRE(g);
  REQUIRE(g->layer_attn.size() == 48);
  int64_t full = 0;
  for (int64_t l = 0; l < 48; ++l) full += g->attn_kind(l) == AttnKind::Full;
  CHECK(full == 8);
  CHECK(g->attn_kind(5) == AttnKind::Full);
  CHECK(g->attn_kind(4) == AttnKind::Sliding);
  // llama.cpp at 32k, f16 KV, n_ubatch 512, swa_full off: "2528.00 MiB" (8 × 32768 cells +
  // 40 × GGML_PAD(1024 + 512, 256) cells, 8 KV heads × 256 × 2 (K, V) × 2 B).
  const KvCells llama{.window_extra = 512, .window_pad = 256};
  uint64_t kv = 0;
  for (int64_t l = 0; l < 48; ++l) kv += kv_layer_bytes(*g, l, 32768, 1, DType::F16, llama);
  CHECK(kv == 2528ull << 20);

  // gpt-oss: window 128, every other layer (llama.cpp set_swa_pattern(2)).
  json oss = {{"general.architecture", "gpt-oss"},      {"gpt-oss.block_count", 24},
              {"gpt-oss.embedding_length", 2880},       {"gpt-oss.attention.head_count", 64},
              {"gpt-oss.attention.head_count_kv", 8},   {"gpt-oss.attention.key_length", 64},
              {"gpt-oss.attention.sliding_window", 128}, {"gpt-oss.expert_count", 32},
              {"gpt-oss.expert_used_count", 4}};
  const auto o = spec_from_gguf(oss);
  REQUIRE(o);
  CHECK(o->architecture == "gpt_oss");
  CHECK(o->attn_kind(0) == AttnKind::Sliding);
  CHECK(o->attn_kind(1) == AttnKind::Full);
  // 12 full layers × 32768 + 12 sliding × 768 cells (128 + 512 padded), 8 × 64 × 2 × 2 B.
  uint64_t okv = 0;
  for (int64_t l = 0; l < 24; ++l) okv += kv_layer_bytes(*o, l, 32768, 1, DType::F16, llama);
  CHECK(okv == (12ull * 32768 + 12ull * 768) * 8 * 64 * 2 * 2);

  // Llama 4: no window key: chunked, n_swa 8192, every 4th layer global.
  json l4 = {{"general.architecture", "llama4"}, {"llama4.block_count", 48}, {"llama4.embedding_length", 5120},
             {"llama4.attention.head_count", 40}, {"llama4.attention.head_count_kv", 8}};
  const auto f = spec_from_gguf(l4);
  REQUIRE(f);
  CHECK(f->attn_kind(0) == AttnKind::Chunked);
  CHECK(f->attn_kind(3) == AttnKind::Full);
  CHECK(f->layer_windows[0] == 8192);
}

// The GGUF twins llama.cpp loaded (testdata/golden/measured_llamacpp.json: their metadata as
// convert_hf_to_gguf writes it, scripts/measure_llamacpp.py) read back as the transformers model
// of the same config (testdata/arch/<case>/expected.json): layer by layer the same kind, window
// and KV elements per position or state per sequence, except where llama.cpp runs the family
// differently: the llama arch has no window (Mistral-7B) and llama.cpp's phi3 turns phi-3's off.
TEST_CASE("architecture records: each llama.cpp GGUF twin has its transformers model's layers", "[arch][gguf]") {
  const json g = test::read_json(test::testdata("golden/measured_llamacpp.json"));
  int twins = 0;
  for (const auto& [file, f] : g.at("files").items()) {
    const std::string arch = f.at("metadata").at("general.architecture").get<std::string>();
    const std::string name = file.substr(0, file.find("-l" + std::to_string(f.at("metadata").at(arch + ".block_count").get<int>()) + "-"));
    const fs::path src = fs::path(test::testdata("arch")) / name;
    if (!fs::exists(src / "expected.json")) continue;  // smollm2
    const json exp = test::read_json((src / "expected.json").string());
    const auto& layers = exp.at("layers");
    INFO(file);
    const auto s = spec_from_gguf(f.at("metadata"));
    REQUIRE(s);
    if (s->num_layers != static_cast<int64_t>(layers.size())) continue;  // cut to its first layers (the count below)
    const bool window_off = name == "mistral-7b" || name == "phi3-mini";
    for (size_t l = 0; l < layers.size(); ++l) {
      INFO("layer " << l);
      const auto& want = layers[l];
      const uint64_t per_token = kv_layer_bytes(*s, int64_t(l), 1, 1, DType::U8);
      if (window_off) {
        CHECK(want.at("kind") == "sliding");
        CHECK(s->attn_kind(int64_t(l)) == AttnKind::Full);
        CHECK(kv_layer_bytes(*s, int64_t(l), 100000, 1, DType::U8) == 100000 * per_token);
      } else {
        CHECK(attn_kind_name(s->attn_kind(int64_t(l))) == want.at("kind").get<std::string>());
        CHECK((l < s->layer_windows.size() ? s->layer_windows[l] : 0) == want.at("window").get<int64_t>());
      }
      CHECK(per_token == want.at(want.at("kind") == "recurrent" ? "state_elems" : "kv_elems_per_token").get<uint64_t>());
    }
    ++twins;
  }
  CHECK(twins == 24);
}

TEST_CASE("architecture records: an unknown family is estimated loudly, never a plain 'fits'", "[arch]") {
  test::TempDir tmp;
  test::write_arch_fixture(fs::path(test::testdata("arch")) / "llama3-8b", tmp.path.string());
  json cfg = test::read_json(tmp.file("config.json"));
  cfg["model_type"] = "brand_new_lm";
  cfg["architectures"] = {"BrandNewLMForCausalLM"};
  test::write_file(tmp.file("config.json"), cfg.dump());
  const Checkpoint ck = open_checkpoint(tmp.path.string());
  const ModelLayout layout = describe_model(ck);
  REQUIRE(layout.spec);
  CHECK(layout.spec->architecture == "brand_new_lm");
  REQUIRE(!layout.spec->guessed.empty());
  Workload w;
  w.context = 1024;
  const Estimate e = estimate(ck, layout, w);
  CHECK(!e.guessed.empty());
  const Verdict v = verdict(e, 1ull << 40);
  CHECK(v.fits);
  CHECK(v.text.find("unconfirmed") != std::string::npos);
}
