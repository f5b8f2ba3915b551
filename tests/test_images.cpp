// --images: the tokens one image takes (against transformers' own processors,
// testdata/golden/image_tokens.json from scripts/make_image_tokens_golden.py), images in
// the KV cache, and which runtimes load a vision tower.
#include <filesystem>
#include <string>

#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "format/open.hpp"
#include "memory/estimate.hpp"
#include "model/model.hpp"
#include "tests/arch_fixture.hpp"
#include "tests/helpers.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace nunchaku;

namespace {

struct Fixture {
  test::TempDir tmp;
  Checkpoint ck;
  ModelLayout layout;
  explicit Fixture(const char* name) {
    test::write_arch_fixture(fs::path(test::testdata("arch")) / name, tmp.path.string());
    ck = open_checkpoint(tmp.path.string());
    layout = describe_model(ck);
  }
};

// Bytes of the fixture's tensors whose names start with one of `prefixes`, from tensors.json
// ("#" expands to `experts` copies), as stored.
uint64_t bytes_under(const char* name, std::initializer_list<std::string_view> prefixes) {
  const json t = test::read_json((fs::path(test::testdata("arch")) / name / "tensors.json").string());
  uint64_t total = 0;
  for (const auto& row : t) {
    const std::string n = row[0];
    bool in = false;
    for (auto p : prefixes) in = in || n.rfind(p, 0) == 0;
    if (!in) continue;
    uint64_t b = row[1] == "F32" ? 4 : row[1] == "BF16" || row[1] == "F16" ? 2 : 1;
    for (const auto& d : row[2]) b *= d.get<uint64_t>();
    total += b;
  }
  return total;
}

}  // namespace

TEST_CASE("images: tokens per image equal transformers' processors", "[arch][images]") {
  const json golden = test::read_json(test::testdata("golden/image_tokens.json"));
  REQUIRE(golden["cases"].size() == 6);
  for (const auto& [name, want] : golden["cases"].items()) {
    INFO(name);
    Fixture f(name.c_str());
    REQUIRE(f.layout.spec);
    CHECK(f.layout.spec->image_tokens == want["image_tokens"].get<int64_t>());
    CHECK(f.layout.spec->image_tokens_at_most == (want["kind"] == "at_most"));
  }
}

TEST_CASE("images: --images N puts N x tokens per image in every sequence's KV cache", "[arch][images]") {
  Fixture f("gemma3-12b");
  Workload w;
  w.context = 4096;
  w.batch = 2;
  w.images = 3;
  w.runtime = Runtime::Transformers;
  const Estimate e = estimate(f.ck, f.layout, w);
  CHECK(e.workload.context == 4096 + 3 * 256);
  CHECK(e.workload.image_tokens == 256);
  // Gemma 3 12B, bf16: 8 full layers hold every position, 40 sliding layers 1024; 2 x 8 KV
  // heads x 256 per position per layer, 2 sequences.
  CHECK(e.component("kv_cache") == (8ull * 4864 + 40ull * 1024) * 2 * 8 * 256 * 2 * 2);
  // Resolving the resolved workload again (as the fix search does) adds nothing.
  CHECK(estimate(f.ck, f.layout, e.workload).workload.context == 4864);
  // --image-tokens overrides the model's count.
  w.image_tokens = 100;
  CHECK(estimate(f.ck, f.layout, w).workload.context == 4096 + 300);
}

TEST_CASE("images: llama.cpp loads the vision tower (its --mmproj file) only for images", "[arch][images]") {
  for (const char* name : {"gemma3-12b", "llava-1.5-7b", "mistral3-24b", "qwen2-vl-7b", "llama4-scout"}) {
    INFO(name);
    Fixture f(name);
    const uint64_t vision = bytes_under(name, {"model.vision_tower.", "vision_tower.", "model.multi_modal_projector.",
                                              "multi_modal_projector.", "model.visual.", "visual.", "model.vision_model.",
                                              "vision_model."});
    REQUIRE(vision > 0);
    Workload w;
    w.context = 2048;
    w.image_tokens = 64;  // the same context either way
    w.runtime = Runtime::LlamaCpp;
    const Estimate text_only = estimate(f.ck, f.layout, w);
    w.images = 1;
    w.context = 2048 - 64;
    const Estimate with_image = estimate(f.ck, f.layout, w);
    CHECK(with_image.workload.context == text_only.workload.context);
    uint64_t a = 0, b = 0;
    for (const auto& m : text_only.modules) a += m.weight_bytes;
    for (const auto& m : with_image.modules) b += m.weight_bytes;
    CHECK(b - a == vision);
    // transformers builds the whole model, images or not.
    w.images = 0;
    w.runtime = Runtime::Transformers;
    uint64_t t = 0;
    for (const auto& m : estimate(f.ck, f.layout, w).modules) t += m.weight_bytes;
    CHECK(t == b);
  }
}

TEST_CASE("images: refused without a vision tower, guessed without its weights", "[arch][images]") {
  Fixture f("llama3-8b");
  Workload w;
  w.context = 4096;
  w.images = 1;
  try {
    (void)estimate(f.ck, f.layout, w);
    FAIL("estimate took --images on a text-only checkpoint");
  } catch (const Error& err) {
    CHECK(err.code() == "usage.images");
  }
  w.image_tokens = 576;  // a GGUF + mmproj user knows the count: the encoder is not in the checkpoint
  const Estimate e = estimate(f.ck, f.layout, w);
  CHECK(e.workload.context == 4096 + 576);
  CHECK(!e.guessed.empty());
}

TEST_CASE("images: a suggested --context leaves room for the images when typed back", "[arch][images]") {
  Fixture f("gemma3-12b");
  Workload w;
  w.context = 65536;
  w.images = 8;
  w.runtime = Runtime::Transformers;
  const uint64_t vram = 32ull << 30;
  const auto fixes = suggest_fits(f.ck, f.layout, w, vram);
  bool typed = false;
  for (const auto& s : fixes) {
    if (s.flags.rfind("--context ", 0) != 0 || s.flags.find(' ', 10) != std::string::npos) continue;
    Workload x = w;
    x.context = std::stoll(s.flags.substr(10));
    const Estimate e = estimate(f.ck, f.layout, x);
    INFO(s.flags);
    CHECK(verdict(e, vram).fits);
    CHECK(e.workload.context == x.context + 8 * 256);
    typed = true;
  }
  CHECK(typed);
}
