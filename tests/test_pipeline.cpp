// A whole diffusers pipeline folder (model_index.json) against what diffusers and
// transformers say of each part (testdata/pipeline/<case>/expected.json from
// scripts/make_pipeline_fixtures.py: sum(p.numel()) of the meta-device models, bytes of
// their state dicts), and the three placements diffusers offers, computed here by hand.
#include <filesystem>
#include <string>

#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "format/open.hpp"
#include "memory/pipeline_estimate.hpp"
#include "memory/workload.hpp"
#include "model/pipeline.hpp"
#include "tests/arch_fixture.hpp"
#include "tests/helpers.hpp"
#include "tests/json_schema_check.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace nunchaku;

namespace {

// The fixture as a folder: model_index.json, each part's config and a sparse weights file,
// and an empty tokenizer folder (a part without weights).
void write_pipeline(const fs::path& src, const fs::path& dir) {
  fs::copy_file(src / "model_index.json", dir / "model_index.json");
  for (const auto& e : fs::directory_iterator(src)) {
    if (!e.is_directory()) continue;
    fs::create_directories(dir / e.path().filename());
    test::write_arch_fixture(e.path(), (dir / e.path().filename()).string());
  }
  fs::create_directories(dir / "tokenizer");
  test::write_file((dir / "tokenizer" / "vocab.json").string(), "{}");
}

}  // namespace

TEST_CASE("pipeline: each part's parameters and bytes equal diffusers' and transformers' models", "[pipeline]") {
  const fs::path src = fs::path(test::testdata("pipeline")) / "flux-dev";
  const json want = test::read_json((src / "expected.json").string());
  test::TempDir tmp;
  write_pipeline(src, tmp.path);
  const auto p = read_pipeline(tmp.path.string());
  REQUIRE(p);
  CHECK(p->class_name == "FluxPipeline");
  REQUIRE(p->parts.size() == want["components"].size());
  CHECK(std::find(p->no_weights.begin(), p->no_weights.end(), "scheduler") != p->no_weights.end());
  const PipelineEstimate e = estimate_pipeline(*p, Workload{});
  uint64_t total = 0, largest = 0;
  for (const auto& c : e.parts) {
    INFO(c.part.name);
    const json& w = want["components"][c.part.name];
    CHECK(c.part.class_name == w["class_name"].get<std::string>());
    CHECK(c.parameters == w["num_parameters"].get<uint64_t>());
    CHECK(c.weight_bytes == w["weight_bytes"].get<uint64_t>());
    total += w["weight_bytes"].get<uint64_t>();
    largest = std::max(largest, w["weight_bytes"].get<uint64_t>());
  }
  CHECK(e.weight_bytes == total);
  // all on the GPU: every part; model offload: the transformer alone (23.8 GB of bf16);
  // sequential offload: the largest single module, T5's shared embedding 32128 x 4096 x 2 B.
  REQUIRE(e.placements.size() == 3);
  CHECK(e.placements[0].gpu_bytes == total + e.fixed_bytes);
  CHECK(e.placements[1].gpu_bytes == largest + e.fixed_bytes);
  CHECK(largest == want["components"]["transformer"]["weight_bytes"].get<uint64_t>());
  CHECK(e.placements[2].gpu_bytes == 32128ull * 4096 * 2 + e.fixed_bytes);
  CHECK(e.fixed_bytes > 0);
  CHECK(!e.guessed.empty());
  // --dtype fp8 halves every float tensor.
  Workload fp8;
  fp8.dtype = DType::F8_E4M3;
  CHECK(estimate_pipeline(*p, fp8).weight_bytes == total / 2);
  // The verdict takes the first placement that fits, never confirmed.
  const uint64_t vram = 24ull << 30;  // 31.5 GiB of weights do not fit, the transformer's 22.2 GiB do
  REQUIRE(e.placements[0].gpu_bytes > vram);
  REQUIRE(e.placements[1].gpu_bytes <= vram);
  CHECK(first_fitting(e, vram) == 1);
  const json j = to_json(e, vram);
  CHECK(j["verdict"]["confirmed"] == false);
  CHECK(first_fitting(e, 1ull << 20) == -1);
  // The commands that open one checkpoint name the parts instead of "no checkpoint files".
  try {
    (void)open_checkpoint(tmp.path.string());
    FAIL("a pipeline folder opened as one checkpoint");
  } catch (const Error& err) {
    CHECK(err.code() == "open.pipeline");
    CHECK(err.exit_code() == 2);
  }
}

TEST_CASE("pipeline: a folder without model_index.json is not one, bad indexes are exit 2", "[pipeline]") {
  test::TempDir tmp;
  CHECK(!read_pipeline(tmp.path.string()));
  test::write_file((tmp.path / "model_index.json").string(), R"({"_class_name": "X", "unet": "UNet2DConditionModel"})");
  try {
    (void)read_pipeline(tmp.path.string());
    FAIL("a part that is not [library, class] was read");
  } catch (const Error& e) {
    CHECK(e.code() == "pipeline.bad_index");
    CHECK(e.exit_code() == 2);
  }
  test::write_file((tmp.path / "model_index.json").string(), R"({"_class_name": "X", "unet": ["diffusers", "UNet2DConditionModel"]})");
  try {
    (void)read_pipeline(tmp.path.string());
    FAIL("a pipeline without weights was read");
  } catch (const Error& e) {
    CHECK(e.code() == "pipeline.no_weights");
  }
  test::write_file((tmp.path / "model_index.json").string(), "[1,");
  CHECK_THROWS_AS(read_pipeline(tmp.path.string()), Error);
}

TEST_CASE("pipeline: estimate --json follows the schema, exit 3 when not one module fits", "[pipeline][json]") {
  test::TempDir tmp;
  write_pipeline(fs::path(test::testdata("pipeline")) / "flux-dev", tmp.path);
  const json schema = test::read_json(std::string(NUNCHAKU_SOURCE_DIR) + "/docs/schema/estimate.json");
  const auto fits = test::run_cli({"estimate", tmp.path.string(), "--vram", "24G", "--json"});
  REQUIRE(fits.exit_code == 0);
  const json j = json::parse(fits.out);
  CHECK(test::schema_errors(schema, j).empty());
  CHECK(j["verdict"]["placement"] == "pipe.enable_model_cpu_offload()");
  CHECK(j["parts"].size() == 4);
  const auto oom = test::run_cli({"estimate", tmp.path.string(), "--vram", "256M", "--json"});
  CHECK(oom.exit_code == 3);
  CHECK(test::schema_errors(schema, json::parse(oom.out)).empty());
  const auto text = test::run_cli({"estimate", tmp.path.string(), "--vram", "24G"});
  CHECK_THAT(text.out, Catch::Contains("fits with pipe.enable_model_cpu_offload()"));
  CHECK(test::run_cli({"estimate", tmp.path.string(), "--mode", "train"}).exit_code == 2);
  CHECK(test::run_cli({"inspect", tmp.path.string()}).exit_code == 2);
}
