// The accelerate device_map of multimodal checkpoints (issue 34): tiny random Mistral3,
// Gemma 3, Qwen2-VL and LLaVA models saved by transformers 5, kept header-only in
// testdata/arch-mm/ with the parameter names transformers builds in memory
// (scripts/check_multimodal_device_map.py, which also loads the same maps with
// from_pretrained). transformers 5 saves these under the older names
// ("language_model.model.layers.0...", "vision_tower...") while its modules are
// "model.language_model.layers.0", "model.vision_tower": every in-memory parameter must fall
// under a key of the map, or from_pretrained refuses it.
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "tests/arch_fixture.hpp"
#include "tests/helpers.hpp"

using nlohmann::json;

TEST_CASE("plan --format accelerate: multimodal maps name transformers 5's modules, every parameter placed", "[plan][arch]") {
  for (const char* name : {"mistral3", "gemma3", "qwen2_vl", "llava"}) {
    INFO(name);
    const std::filesystem::path src = std::filesystem::path(nunchaku::test::testdata("arch-mm")) / name;
    nunchaku::test::TempDir dir;
    nunchaku::test::write_arch_fixture(src, dir.path.string());
    const json want = nunchaku::test::read_json((src / "params.json").string());
    std::vector<std::string> args = {"plan", dir.path.string(), "--vram", want["split_vram"], "--cpu-ram", "1G",
                                     "--format", "accelerate"};
    for (const auto& f : want["plan_flags"]) args.push_back(f);
    const auto r = nunchaku::test::run_cli(args);
    REQUIRE(r.exit_code == 0);
    const json map = json::parse(r.out);
    std::set<std::string> devices;
    for (const auto& [key, device] : map.items()) {
      devices.insert(device.dump());
      CHECK_FALSE(key.starts_with("language_model."));  // a checkpoint name, not a module
      CHECK_FALSE(key.starts_with("vision_tower"));
    }
    CHECK(devices.size() == 2);  // split over the GPU and the CPU, as when from_pretrained took it
    for (const auto& p : want["parameters"]) {
      const std::string n = p;
      bool placed = false;
      for (const auto& [key, _] : map.items()) placed = placed || n == key || n.starts_with(key + ".");
      INFO(n);
      CHECK(placed);
    }
  }
}

// nunchaku's engine runs a wrapper's language model alone: its plan's device map leaves the
// vision tower and projector out (run --plan never loads them), where a transformers plan of
// the same checkpoint places them; the JSON's modules are the ones the runtime holds.
TEST_CASE("plan --runtime nunchaku: a multimodal device map holds the language model only", "[plan][arch]") {
  const std::string llava = nunchaku::test::testdata("engine/multimodal/llava");
  auto map_of = [&](const char* runtime) {
    const auto r = nunchaku::test::run_cli({"plan", llava, "--vram", "1G", "--runtime", runtime, "--json"});
    REQUIRE(r.exit_code == 0);
    return json::parse(r.out).at("device_map");
  };
  const json ours = map_of("nunchaku"), torch = map_of("transformers");
  CHECK(torch.contains("vision_tower"));
  CHECK(torch.contains("multi_modal_projector"));
  CHECK_FALSE(ours.contains("vision_tower"));
  CHECK_FALSE(ours.contains("multi_modal_projector"));
  CHECK(ours.contains("language_model.model.layers.0"));
  CHECK(ours.size() + 2 == torch.size());
}
