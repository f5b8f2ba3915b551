// `estimate --runtime transformers --device cpu` against the whole process's peak RSS
// (`/usr/bin/time -v` of a fresh Python process per case: import, from_pretrained, then
// generate, a plain forward or AdamW steps), as scripts/measure_torch.py recorded it in
// testdata/golden/measured_torch.json for the models whose config.json and tensor tables are
// in testdata/measured_torch/ (docs/measured_torch.md), three fresh processes per case. Every
// run within 10 %, and the verdicts at budgets 3 % above and below the case's peak (the median
// of its runs) right, but for the cases named in kOutside3 (why: docs/measured_torch.md).
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <string>

#include "core/error.hpp"
#include "format/open.hpp"
#include "helpers.hpp"
#include "memory/estimate.hpp"
#include "model/model.hpp"
#include "tests/arch_fixture.hpp"

namespace nunchaku {
namespace {

using nlohmann::json;

Workload workload_of(const json& c) {
  Workload w;
  w.runtime = Runtime::Transformers;
  w.target = Target::Cpu;
  w.attention = parse_attention(c.at("attention").get<std::string>());
  if (c.at("dtype") == "bfloat16") w.dtype = DType::BF16;
  const std::string kind = c.at("kind").get<std::string>();
  const int64_t b = c.at("batch").get<int64_t>(), seq = c.at("sequence").get<int64_t>(), n = c.at("new_tokens_or_steps").get<int64_t>();
  w.batch = b;
  if (kind == "generate") {
    w.context = seq + n;    // prompt + new tokens
    w.prefill_chunk = seq;  // the prompt, in one forward
  } else if (kind == "forward") {
    w.context = seq;
    w.all_logits = true;  // model(input_ids).logits: every position
  } else {
    w.mode = kind == "lora" ? Mode::LoRA : Mode::Train;
    w.context = seq;
    w.grad_checkpointing = c.at("extra") == "ckpt";
    w.steps = n == 1 ? 1 : 0;
    if (kind == "lora") w.lora_targets = {"q_proj", "v_proj"};
  }
  return w;
}

// Cases the estimate misses by more than 3 % (docs/measured_torch.md says why).
const std::set<std::string> kOutside3 = {"lora 2 steps b4x256"};

}  // namespace

TEST_CASE("estimate --runtime transformers --device cpu: the whole process's peak RSS, every run within 10% and verdicts at 3%",
          "[estimate][estimate-measured]") {
  const json g = test::read_json(test::testdata("golden/measured_torch.json"));
  const json& cases = g.at("cases");
  REQUIRE(cases.size() >= 15);
  size_t checked = 0;
  for (const auto& c : cases) {
    INFO(c.at("name").get<std::string>() << " (torch " << g.at("torch").get<std::string>() << ", transformers "
                                         << g.at("transformers").get<std::string>() << ")");
    test::TempDir tmp;
    test::write_arch_fixture(test::testdata("measured_torch/" + c.at("model").get<std::string>()), tmp.path.string());
    const Checkpoint ck = open_checkpoint(tmp.path.string());
    const Estimate e = estimate(ck, describe_model(ck), workload_of(c));
    const double predicted = double(e.per_gpu_total), peak = c.at("peak").get<double>();
    INFO("predicted " << predicted / (1 << 20) << " MiB, peak " << peak / (1 << 20) << " MiB");
    for (const auto& run : c.at("max_rss")) CHECK(std::abs(predicted - run.get<double>()) <= 0.10 * run.get<double>());
    if (kOutside3.contains(c.at("name").get<std::string>())) continue;
    ++checked;
    CHECK(verdict(e, uint64_t(peak * 1.03)).fits);
    CHECK_FALSE(verdict(e, uint64_t(peak * 0.97)).fits);
  }
  CHECK(checked + kOutside3.size() == cases.size());  // every name in kOutside3 is a case
}

TEST_CASE("estimate --runtime transformers: --attention sdpa refused where transformers refuses it, --steps is training's",
          "[estimate][estimate-measured]") {
  // transformers 5.24's Gemma2PreTrainedModel sets _supports_sdpa = False (softcapping), and
  // from_pretrained(attn_implementation="sdpa") raises; its default there is eager.
  test::TempDir tmp;
  test::write_arch_fixture(test::testdata("measured_torch/gemma2-50m"), tmp.path.string());
  const Checkpoint ck = open_checkpoint(tmp.path.string());
  const ModelLayout layout = describe_model(ck);
  Workload w;
  w.runtime = Runtime::Transformers;
  w.target = Target::Cpu;
  w.context = 320;
  CHECK(estimate(ck, layout, w).workload.attention == Attention::Eager);
  w.attention = Attention::Sdpa;
  try {
    (void)estimate(ck, layout, w);
    FAIL("sdpa accepted for gemma2");
  } catch (const Error& e) {
    CHECK(e.code() == "usage.attention");
    CHECK(e.exit_code() == 2);
    CHECK(std::string(e.what()).find("gemma2") != std::string::npos);
  }
  w.runtime = Runtime::LlamaCpp;  // llama.cpp runs Gemma 2 with its own kernels
  CHECK_NOTHROW(estimate(ck, layout, w));
  w.runtime = Runtime::Transformers;
  w.attention = Attention::Default;
  w.steps = 1;  // inference has no optimizer step
  CHECK_THROWS_AS(estimate(ck, layout, w), Error);
}

}  // namespace nunchaku

namespace nunchaku {

TEST_CASE("estimate --runtime transformers --device cpu: a batch-1 generate peaks at the interpreter's exit, --overhead torch_exit sets it",
          "[estimate][estimate-measured]") {
  test::TempDir tmp;
  test::write_arch_fixture(test::testdata("measured_torch/llama-60m"), tmp.path.string());
  const Checkpoint ck = open_checkpoint(tmp.path.string());
  const ModelLayout layout = describe_model(ck);
  Workload w;
  w.runtime = Runtime::Transformers;
  w.target = Target::Cpu;
  w.batch = 1;
  w.context = 320;
  w.prefill_chunk = 256;
  auto end_state = [](const Estimate& e) {  // what stays resident to the end
    return e.component("python_runtime") + e.component("torch_loader") + e.component("cpu_runtime") + e.component("weights") +
           e.component("glibc_heap");
  };
  const Estimate e = estimate(ck, layout, w);
  CHECK(e.component("exit_peak") > 0);
  CHECK(e.per_gpu_total == end_state(e) + (116ULL << 20));  // the default, measured: docs/measured_torch.md
  w.overheads["torch_exit"] = 300ULL << 20;
  CHECK(estimate(ck, layout, w).per_gpu_total == end_state(e) + (300ULL << 20));
  w.overheads["torch_exit"] = 0;  // no exit cost: the run's own peak, which is above its end state
  const Estimate run = estimate(ck, layout, w);
  CHECK(run.component("exit_peak") == 0);
  CHECK(run.per_gpu_total > end_state(run));
  w.mode = Mode::Train;  // training charges no exit (its steps' peaks are higher, measured)
  w.overheads.clear();
  CHECK(estimate(ck, layout, w).component("exit_peak") == 0);
}

}  // namespace nunchaku
