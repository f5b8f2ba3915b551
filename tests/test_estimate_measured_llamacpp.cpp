// `estimate --runtime llama.cpp --device cpu` against llama.cpp's own buffer sizes: the
// golden testdata/golden/measured_llamacpp.json holds, per case, what llama.cpp
// (llama-cpp-python, C API, no tokens decoded) logged for "CPU_Mapped"/"CPU_REPACK" model
// buffers, "KV buffer size", "output buffer size" and "compute buffer size", and the index of
// the GGUF it loaded as gguf-py read it (scripts/measure_llamacpp.py; docs/estimate.md).
// Each component must be within 3 %, and a verdict at a budget 3 % off the measured total
// must come out right.
#include <catch2/catch.hpp>

#include <cmath>

#include "helpers.hpp"
#include "memory/estimate.hpp"
#include "model/model.hpp"

namespace nunchaku {
namespace {

using nlohmann::json;

constexpr double kMiB = 1 << 20;

Checkpoint checkpoint_of(const std::string& name, const json& f) {
  Checkpoint ck;
  ck.format = Format::GGUF;
  ck.path = name;
  ck.files.push_back({name, f.at("bytes").get<uint64_t>()});
  ck.metadata = f.at("metadata");
  for (const auto& t : f.at("tensors")) {
    TensorInfo ti;
    ti.name = t[0].get<std::string>();
    const auto dt = dtype_from_ggml(t[1].get<uint32_t>());
    REQUIRE(dt.has_value());
    ti.dtype = *dt;
    const auto ne = t[2].get<std::vector<int64_t>>();
    ti.shape.assign(ne.rbegin(), ne.rend());  // ggml ne → PyTorch order
    ti.offset = t[3].get<uint64_t>();
    ti.nbytes = t[4].get<uint64_t>();
    ck.tensors.push_back(std::move(ti));
  }
  return ck;
}

Workload workload_of(const json& c) {
  Workload w;
  w.runtime = Runtime::LlamaCpp;
  w.target = Target::Cpu;
  w.batch = c.at("sequences").get<int64_t>();
  w.context = c.at("context").get<int64_t>();
  w.ubatch = c.at("ubatch").get<int64_t>();
  w.prefill_chunk = std::max<int64_t>(w.ubatch, kLlamaCppBatch);  // the script's n_batch
  w.attention = c.at("flash_attention").get<bool>() ? Attention::Flash : Attention::Eager;
  w.kv_dtype = dtype_from_user(c.at("kv_type").get<std::string>());
  w.swa_full = c.at("swa_full").get<bool>();
  w.repack = c.at("repack").get<bool>();  // the golden's CPU has AVX-512: true = repack as there
  return w;
}

// llama.cpp's log line (MiB, two decimals) → the estimate's component of the same buffer.
const std::pair<const char*, const char*> kComponents[] = {{"model_CPU_Mapped", "weights"},
                                                           {"model_CPU_REPACK", "weights_repacked"},
                                                           {"kv", "kv_cache"},
                                                           {"output", "logits"},
                                                           {"compute", "activations"}};

// Compute buffers not modelled yet, named here and in docs/estimate.md with their misses:
// DeepSeek-V2-Lite (MLA without a q LoRA: 208 vs 240.26 MiB, constant over context and flash
// attention) and SmolLM2's tied q4_0 output layer repacked (98.25 vs 102.51 MiB). The other
// buffers of these cases are checked.
bool compute_not_modelled(const json& c) {
  const std::string m = c.at("model").get<std::string>();
  return m == "deepseek-v2-lite" || (m == "smollm2-135m" && c.at("weights") == "q4_0" && c.at("repack").get<bool>());
}

}  // namespace

TEST_CASE("estimate --runtime llama.cpp: every buffer within 3% of llama.cpp's own log", "[estimate][estimate-measured]") {
  const json g = test::read_json(test::testdata("golden/measured_llamacpp.json"));
  const json& cases = g.at("cases");
  REQUIRE(cases.size() >= 20);
  int compared = 0, verdicts = 0;
  for (const auto& c : cases) {
    const std::string file = c.at("file").get<std::string>();
    INFO(c.at("name").get<std::string>());
    const Checkpoint ck = checkpoint_of(file, g.at("files").at(file));
    const ModelLayout layout = describe_model(ck);
    const Estimate e = estimate(ck, layout, workload_of(c));
    const json& m = c.at("measured_mib");
    double measured_total = 0;
    for (auto [log, comp] : kComponents) {
      const double pred = double(e.component(comp)) / kMiB;
      if (!m.contains(log)) {
        // Not logged: no such buffer (no repack), or the memory-fit mode's dummy buffers.
        if (std::string(log) == "model_CPU_REPACK" && c.at("mode") == "alloc") CHECK(pred == 0);
        continue;
      }
      const double got = m.at(log).get<double>();
      INFO(comp << ": predicted " << pred << " MiB, llama.cpp " << got << " MiB");
      measured_total += got;
      if (std::string(log) == "compute" && compute_not_modelled(c)) {
        CHECK(pred < got);  // still an underestimate: a fix must move these cases to the checked ones
        continue;
      }
      CHECK(std::abs(pred - got) <= std::max(0.03 * got, 0.01));
      ++compared;
    }
    // Verdicts at budgets 3% off the measured total (all of llama.cpp's buffers; the alloc
    // mode logs every one): above it fits, below it is OOM.
    if (c.at("mode") == "alloc" && !compute_not_modelled(c)) {
      INFO("predicted total " << double(e.per_gpu_total) / kMiB << " MiB, llama.cpp " << measured_total << " MiB");
      CHECK(verdict(e, uint64_t(measured_total * 1.03 * kMiB)).fits);
      CHECK_FALSE(verdict(e, uint64_t(measured_total * 0.97 * kMiB)).fits);
      ++verdicts;
    }
  }
  CHECK(compared >= 60);
  CHECK(verdicts >= 8);
}

}  // namespace nunchaku
