// Multimodal checkpoints (Gemma3ForConditionalGeneration, LlavaForConditionalGeneration,
// Mistral3ForConditionalGeneration) run their language model on text: tiny random fp32
// wrappers with a one-layer vision tower and projector, and transformers' answers for a text
// prompt through the wrapper model's own generate on input_ids alone (written by
// scripts/make_engine_multimodal.py: testdata/engine/multimodal.json). The first 32 greedy
// ids equal transformers' exactly and the logits of every prompt position and the final
// ones are within 1e-4 of each row's largest |logit| (fp32 on both sides); the vision tower
// and projector are neither loaded by run nor charged by estimate --runtime nunchaku.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "format/open.hpp"
#include "io/loader.hpp"
#include "io/placement.hpp"
#include "model/language_model.hpp"
#include "tests/helpers.hpp"
#include "tests/test_engine_helpers.hpp"

using namespace nunchaku;
using namespace nunchaku::engine;
using nlohmann::json;

namespace {

const json& goldens() {
  static const json g = json::parse(std::ifstream(test::testdata("engine/multimodal.json")));
  return g;
}

constexpr const char* kWrappers[] = {"gemma3", "llava", "mistral3", "llama4"};

std::string dir_of(const std::string& name) { return test::testdata("engine/multimodal/" + name); }

// Bytes of the language model's tensors: the file's tensors less the vision tower and
// projector transformers saved (the golden's encoder_bytes, summed by the script).
uint64_t language_model_bytes(const std::string& name) {
  const json& enc = goldens().at(name).at("encoder_bytes");
  return open_checkpoint(dir_of(name)).total_bytes() - enc.at("vision_tower").get<uint64_t>() - enc.at("projector").get<uint64_t>();
}

}  // namespace

TEST_CASE("engine multimodal: gemma3, llava, mistral3 and llama4 wrappers' language models match transformers (32 greedy ids, logits 1e-4)",
          "[engine][families][multimodal]") {
  for (const char* name : kWrappers) {
    INFO(name);
    test::EngineModel m;
    m.ck = open_checkpoint(dir_of(name));
    m.layout = describe_model(m.ck);
    REQUIRE(m.layout.spec);
    CHECK_FALSE(m.layout.spec->wrapper.empty());
    const std::vector<Module> skipped = keep_language_model(m.ck, m.layout);
    REQUIRE(skipped.size() == 2);  // the vision tower and the projector
    for (const TensorInfo& t : m.ck.tensors) {
      CHECK(t.name.find("vision_tower.") == std::string::npos);
      CHECK(t.name.find("vision_model.") == std::string::npos);  // llama4's
      CHECK(t.name.find("multi_modal_projector.") == std::string::npos);
    }
    LoadOptions lo;
    lo.placement = place_all(m.layout, Device{Device::Kind::Cpu, 0});
    m.load = load_checkpoint(m.ck, m.layout, lo);
    CHECK(m.load.report.notes.empty());  // nothing loaded as "(ungrouped)"
    EngineOptions o;
    o.max_context = 64;
    o.logit_rows = 64;
    o.max_tokens = 16;  // the 8-token prompt in one pass, the 39-token replay in three
    o.max_batch = 2;
    m.engine = make_engine(m.ck, m.layout, m.load.store, {o, 2, std::nullopt, Device{Device::Kind::Cpu, 0}});
    m.tf = m.engine.model.get();
    INFO(m.tf->describe());
    test::check_against_golden(*m.tf, goldens().at(name));
  }
}

TEST_CASE("run on a multimodal checkpoint: transformers' greedy ids, one note, no vision tower loaded or charged",
          "[run][multimodal]") {
  for (const char* name : kWrappers) {
    INFO(name);
    const json& g = goldens().at(name);
    test::TempDir tmp;
    const std::string stats = tmp.file("stats.json");
    auto r = test::run_cli({"run", dir_of(name), "--raw", "--max-tokens", "32", "--batch-size", "1", "--context", "64", "--threads", "2",
                            "--stats", stats},
                           json({{"prompt", g.at("text")}}).dump() + "\n");
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const json out = json::parse(r.out);
    CHECK(out.at("usage").at("prompt_tokens") == g.at("prompt").size());
    CHECK(out.at("token_ids") == g.at("ids"));
    CHECK(out.at("finish_reason") == "length");
    // One note naming the wrapper and what is not loaded.
    const std::string note = "note: " + g.at("hf_class").get<std::string>() + ": the engine runs its language model";
    const size_t at = r.err.find(note);
    REQUIRE(at != std::string::npos);
    CHECK(r.err.find(note, at + 1) == std::string::npos);
    const std::string line = r.err.substr(at, r.err.find('\n', at) - at);
    CHECK(line.find("vision_tower") != std::string::npos);
    CHECK(line.find("multi_modal_projector") != std::string::npos);
    // Run holds the language model's bytes only; estimate's nunchaku runtime charges the same.
    const json s = test::read_json(stats);
    const uint64_t lm = language_model_bytes(name);
    CHECK(s.at("weights").at("resident_bytes") == lm);
    CHECK(s.at("weights").at("streamed_bytes_per_step") == 0);
    CHECK(s.at("run_state_bytes") == s.at("run_state_predicted_bytes"));
    const uint64_t vision = g.at("encoder_bytes").at("vision_tower").get<uint64_t>();
    CHECK(s.at("host_predicted_bytes").get<uint64_t>() < lm + s.at("run_state_bytes").get<uint64_t>() + vision);
    auto e = test::run_cli({"estimate", dir_of(name), "--runtime", "nunchaku", "--device", "cpu", "--context", "64", "--batch", "1", "--json"});
    REQUIRE(e.exit_code == 0);
    const json ej = json::parse(e.out);
    CHECK(ej.at("component_bytes").at("weights") == lm);
    bool noted = false;
    for (const auto& n : ej.at("notes")) noted = noted || n.get<std::string>().find("vision_tower): ") != std::string::npos;
    CHECK(noted);
    // transformers still charges the whole checkpoint.
    auto t = test::run_cli({"estimate", dir_of(name), "--runtime", "transformers", "--device", "cpu", "--context", "64", "--json"});
    REQUIRE(t.exit_code == 0);
    CHECK(json::parse(t.out).at("component_bytes").at("weights").get<uint64_t>() == open_checkpoint(dir_of(name)).total_bytes());
  }
}

TEST_CASE("run on a multimodal checkpoint: a request with an image fails alone, naming it", "[run][multimodal]") {
  const std::string in =
      R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}, )"
      R"({"type": "text", "text": "What is this?"}]}]})"
      "\n"
      R"({"prompt": "Once upon a time", "max_tokens": 3})"
      "\n";
  auto r = test::run_cli({"run", dir_of("gemma3"), "--raw", "--max-tokens", "4", "-q"}, in);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::istringstream lines(r.out);
  std::string first, second;
  std::getline(lines, first);
  std::getline(lines, second);
  const json a = json::parse(first), b = json::parse(second);
  CHECK(a.at("finish_reason") == "error");
  CHECK_THAT(a.at("error").dump(), Catch::Contains("image_url") && Catch::Contains("text only"));
  CHECK(b.at("finish_reason") == "length");
  CHECK(b.at("usage").at("completion_tokens") == 3);
  auto strict = test::run_cli({"run", dir_of("gemma3"), "--raw", "--max-tokens", "4", "-q", "--exit-on-request-error"}, in);
  CHECK(strict.exit_code == 2);
}

TEST_CASE("run on a multimodal checkpoint: a --plan that places the vision tower too is taken", "[run][multimodal]") {
  // As `nunchaku plan` writes one for the whole checkpoint: every module named, the vision
  // tower and projector included; run places the language model and drops the rest.
  test::TempDir tmp;
  const std::string dir = dir_of("llava");
  const ModelLayout layout = describe_model(open_checkpoint(dir));
  json plan = {{"device_map", json::object()}};
  for (const Module& mod : layout.modules) plan["device_map"][mod.name] = "cpu";
  REQUIRE(plan["device_map"].contains("vision_tower"));
  test::write_file(tmp.file("plan.json"), plan.dump());
  const json& g = goldens().at("llava");
  auto r = test::run_cli({"run", dir, "--raw", "--max-tokens", "32", "--plan", tmp.file("plan.json"), "-q"},
                         json({{"prompt", g.at("text")}}).dump() + "\n");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(json::parse(r.out).at("token_ids") == g.at("ids"));
}
