// `estimate --runtime transformers --device cpu` against the whole process's peak RSS
// (`/usr/bin/time -v` of a fresh Python process per case: import, from_pretrained, then
// generate, a plain forward or AdamW steps), as scripts/measure_torch.py recorded it in
// testdata/golden/measured_torch.json for the models whose config.json and tensor tables are
// in testdata/measured_torch/ (docs/measured_torch.md), three fresh processes per case. Every
// run within 10 %, and the verdicts at budgets 3 % above and below the case's peak (the median
// of its runs) right in every case.
#include <catch2/catch.hpp>

#include <cmath>
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

// One of testdata/measured_torch's models (its config.json and tensor table) as a sparse
// checkpoint in a temporary folder.
struct MeasuredModel {
  test::TempDir tmp;
  Checkpoint ck;
  ModelLayout layout;
  explicit MeasuredModel(const std::string& name) {
    test::write_arch_fixture(test::testdata("measured_torch/" + name), tmp.path.string());
    ck = open_checkpoint(tmp.path.string());
    layout = describe_model(ck);
  }
};

Workload torch_cpu() {
  Workload w;
  w.runtime = Runtime::Transformers;
  w.target = Target::Cpu;
  return w;
}

Workload workload_of(const json& c) {
  Workload w = torch_cpu();
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

}  // namespace

TEST_CASE("estimate --runtime transformers --device cpu: the whole process's peak RSS, every run within 10% and verdicts at 3%",
          "[estimate][estimate-measured]") {
  const json g = test::read_json(test::testdata("golden/measured_torch.json"));
  const json& cases = g.at("cases");
  REQUIRE(cases.size() >= 15);
  for (const auto& c : cases) {
    INFO(c.at("name").get<std::string>() << " (torch " << g.at("torch").get<std::string>() << ", transformers "
                                         << g.at("transformers").get<std::string>() << ")");
    const MeasuredModel m(c.at("model").get<std::string>());
    const Estimate e = estimate(m.ck, m.layout, workload_of(c));
    const double predicted = double(e.per_gpu_total), peak = c.at("peak").get<double>();
    INFO("predicted " << predicted / (1 << 20) << " MiB, peak " << peak / (1 << 20) << " MiB");
    for (const auto& run : c.at("max_rss")) CHECK(std::abs(predicted - run.get<double>()) <= 0.10 * run.get<double>());
    CHECK(verdict(e, uint64_t(peak * 1.03)).fits);
    CHECK_FALSE(verdict(e, uint64_t(peak * 0.97)).fits);
  }
}

TEST_CASE("estimate --runtime transformers: --attention sdpa refused where transformers refuses it, --steps is training's",
          "[estimate][estimate-measured]") {
  // transformers 5.24's Gemma2PreTrainedModel sets _supports_sdpa = False (softcapping), and
  // from_pretrained(attn_implementation="sdpa") raises; its default there is eager.
  const MeasuredModel m("gemma2-50m");
  const Checkpoint& ck = m.ck;
  const ModelLayout& layout = m.layout;
  Workload w = torch_cpu();
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
  const MeasuredModel m("llama-60m");
  const Checkpoint& ck = m.ck;
  const ModelLayout& layout = m.layout;
  Workload w = torch_cpu();
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
  w.mode = Mode::Train;  // full training: its end state less the optimizer's states is far below the step's peak
  w.overheads.clear();
  w.prefill_chunk = 0;
  CHECK(estimate(ck, layout, w).component("exit_peak") == 0);
}

TEST_CASE("estimate --runtime transformers --device cpu: LoRA peaks at the exit, above its end state less the unmapped logits",
          "[estimate][estimate-measured]") {
  // lora 2 steps b4x256 (docs/measured_torch.md): run's own peak 1831-1870 MiB, end RSS
  // 1720-1786, max RSS 1835-1901: the exit, ~116 MiB above an end state that keeps the step's
  // heap but not its 32 MiB logits blocks (4 × 256 × 8192 × 4 B, glibc mmaps them).
  const MeasuredModel m("llama-60m");
  const Checkpoint& ck = m.ck;
  const ModelLayout& layout = m.layout;
  Workload w = torch_cpu();
  w.mode = Mode::LoRA;
  w.lora_targets = {"q_proj", "v_proj"};
  w.batch = 4;
  w.context = 256;
  const Estimate e = estimate(ck, layout, w);
  REQUIRE(e.component("logits") == 3ULL * 4 * 256 * 8192 * 4);  // logits, fp32 upcast, grad
  const uint64_t run = e.per_gpu_total - e.component("exit_peak");
  CHECK(e.component("exit_peak") > 0);
  CHECK(e.per_gpu_total == run - e.component("logits") - e.component("optimizer_states") + (116ULL << 20));
  w.batch = 1;  // 8 MiB logits blocks stay in glibc's heap: the exit is above the whole run less the states
  const Estimate b1 = estimate(ck, layout, w);
  CHECK(b1.per_gpu_total == b1.per_gpu_total - b1.component("exit_peak") - b1.component("optimizer_states") + (116ULL << 20));
  w.batch = 8;  // 64 MiB logits blocks unmapped: more than the exit touches
  CHECK(estimate(ck, layout, w).component("exit_peak") == 0);
}

}  // namespace nunchaku

namespace nunchaku {

TEST_CASE("estimate --runtime transformers --device cpu: a MoE as stored charges the fused experts' copy, and glibc maps their blocks",
          "[estimate][estimate-measured]") {
  // qwen3moe-30m (4 layers, 16 experts of 256, h 512, top-4) stores each expert's tensors;
  // transformers 5.25 stacks them at load (after from_pretrained: 922 MiB, the dense model's
  // 729 + the experts' file pages 97 + the stacked copy 96; docs/measured_torch.md).
  const MeasuredModel m("qwen3moe-30m");
  const Checkpoint& ck = m.ck;
  const ModelLayout& layout = m.layout;
  Workload w = torch_cpu();
  w.batch = 1;
  w.context = 4096 + 32;
  w.prefill_chunk = 4096;
  const Estimate e = estimate(ck, layout, w);
  CHECK(e.component("fused_experts") == 4ULL * 16 * 3 * 256 * 512 * 4);
  // The experts' four (t·k, h) blocks are 4096 × 4 × 512 × 4 B = 32 MiB, more than the
  // residual (2·t·h·4 = 16 MiB) and q|k|v (t·(8 + 2·2)·64·4 = 12 MiB) the layer frees
  // before them: mapped, so the heap keeps 1.5 × (16 + 12) MiB.
  CHECK(e.component("glibc_heap") == 42ULL << 20);
  w.dtype = DType::BF16;  // converted at load: the stacked bf16 copy is the weights, the file is released
  const Estimate bf16 = estimate(ck, layout, w);
  CHECK(bf16.component("fused_experts") == 0);
  // 16 MiB blocks, under glibc's largest mmap threshold: the whole layer's transient counts,
  // residual 2·t·h·2 + experts 4·t·k·h·2 + t·k·(24 + 2) + router t·E·(2 + 4).
  const uint64_t t = 4096, k = 4, h = 512, E = 16;
  CHECK(bf16.component("glibc_heap") == (2 * t * h * 2 + 4 * t * k * h * 2 + t * k * 26 + t * E * 6) / 2 * 3);
}

}  // namespace nunchaku
