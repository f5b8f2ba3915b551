// Any checkpoint, not only the LLMs nunchaku knows: a module tree without config.json
// (testdata/models/module-tree: accelerate's own test model, made by
// scripts/make_module_tree_fixture.py) is estimated from its weights and planned as
// accelerate plans it; expected.json is what accelerate itself said of it.
#include <catch2/catch.hpp>

#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/helpers.hpp"

using namespace nunchaku;
using nlohmann::json;

namespace {
const json& expected() {
  static json j = json::parse(std::ifstream(test::testdata("models/module-tree/expected.json")));
  return j;
}
const std::string kTree = test::testdata("models/module-tree");
}  // namespace

TEST_CASE("plan --compat accelerate on a module tree gives accelerate's device map", "[plan]") {
  // accelerate's test case: max_memory {0: 200, 1: 200} bytes. Its map reserves nothing for the
  // CUDA context, so the fixed costs are zeroed to compare the map alone (exit 0: it fits).
  auto r = test::run_cli({"plan", kTree, "--vram", "200B,200B", "--compat", "accelerate", "--format", "accelerate",
                          "--overhead", "cuda_context=0", "--overhead", "cublas_workspace=0", "--overhead",
                          "allocator_slack=0"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(json::parse(r.out) == expected().at("accelerate_map_200_200"));
  // With the CUDA context charged, 200 B per GPU is honestly too small: exit 3, same map.
  auto honest = test::run_cli({"plan", kTree, "--vram", "200B,200B", "--compat", "accelerate", "--format", "accelerate"});
  CHECK(honest.exit_code == 3);
  CHECK(json::parse(honest.out) == expected().at("accelerate_map_200_200"));
  // Balanced (the default) puts every module on a GPU when they fit.
  auto bal = test::run_cli({"plan", kTree, "--vram", "1G,1G", "--json"});
  REQUIRE(bal.exit_code == 0);
  const json p = json::parse(bal.out);
  uint64_t on_gpus = 0;
  for (const auto& d : p.at("devices"))
    if (d.at("device").get<std::string>().rfind("cuda:", 0) == 0) on_gpus += d.at("weight_bytes").get<uint64_t>();
  CHECK(on_gpus == expected().at("module_bytes").at("").get<uint64_t>());
}

TEST_CASE("estimate on a module tree: its weights (as stored or --dtype) and the runtime's fixed costs", "[estimate]") {
  for (bool bf16 : {false, true}) {
    INFO("bf16 " << bf16);
    std::vector<std::string> args = {"estimate", kTree, "--vram", "1G", "--json"};
    if (bf16) args.insert(args.end(), {"--dtype", "bf16"});
    auto r = test::run_cli(args);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const json j = json::parse(r.out);
    const json& c = j.at("component_bytes");
    const uint64_t weights = c.at("weights").get<uint64_t>(), kv = c.contains("kv_cache") ? 1 : 0;
    CHECK(c.contains("cuda_context"));
    // accelerate's compute_module_sizes of the whole model (bf16: floats halved, the int64
    // batch counter kept).
    CHECK(weights == expected().at(bf16 ? "module_bytes_bf16" : "module_bytes").at("").get<uint64_t>());
    CHECK(kv == 0);
  }
  auto text = test::run_cli({"estimate", kTree});
  CHECK(text.exit_code == 0);
  CHECK(text.out.find("no config.json or GGUF metadata") != std::string::npos);
  CHECK(text.out.find("3 modules") != std::string::npos);
  // What needs the model's dimensions is refused with the reason (exit 2).
  auto train = test::run_cli({"estimate", kTree, "--mode", "train"});
  CHECK(train.exit_code == 2);
  CHECK(train.err.find("training needs the model's dimensions") != std::string::npos);
  auto ours = test::run_cli({"estimate", kTree, "--runtime", "nunchaku"});
  CHECK(ours.exit_code == 2);
}
