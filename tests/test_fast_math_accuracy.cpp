// What run --fast-math costs in accuracy, driven by scripts/bench_fast_math.sh (hidden:
// runs only when asked for by name, "[.fast-math-accuracy]"). One checkpoint, two engines
// over the same weights, exact and fast math; the same prompt (NUNCHAKU_BENCH_PROMPT
// tokens, default 128; NUNCHAKU_ACC_FIRST: see below) with a logits row per position, then NUNCHAKU_BENCH_DECODE (32)
// greedy steps of the exact engine fed to both (teacher forcing), then each engine's own
// greedy continuation. Prints "ACCURACY {json}": per logits row the relative RMS error
// ||fast - exact|| / ||exact||, KL(exact || fast) in nats, whether the top tokens agree,
// and how many free-running greedy tokens agree before the first difference; with
// NUNCHAKU_ACC_BASELINE, the same for both engines against an unquantized copy.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.hpp"
#include "engine/model.hpp"
#include "tests/test_engine_helpers.hpp"

using namespace nunchaku;
using namespace nunchaku::engine;

namespace {

struct RowStats {
  std::vector<double> rel_rms, kl;
  int64_t top1_same = 0, rows = 0;
  void add(std::span<const float> exact, std::span<const float> fast) {
    double num = 0, den = 0, mx = -INFINITY, mf = -INFINITY;
    for (size_t i = 0; i < exact.size(); ++i) {
      num += (double(fast[i]) - exact[i]) * (double(fast[i]) - exact[i]);
      den += double(exact[i]) * exact[i];
      mx = std::max(mx, double(exact[i]));
      mf = std::max(mf, double(fast[i]));
    }
    rel_rms.push_back(std::sqrt(num / std::max(den, 1e-30)));
    double ze = 0, zf = 0;
    for (size_t i = 0; i < exact.size(); ++i) ze += std::exp(exact[i] - mx), zf += std::exp(fast[i] - mf);
    double k = 0;
    for (size_t i = 0; i < exact.size(); ++i) {
      const double pe = std::exp(exact[i] - mx) / ze;
      k += pe * ((exact[i] - mx - std::log(ze)) - (fast[i] - mf - std::log(zf)));
    }
    kl.push_back(std::max(0.0, k));
    top1_same += test::argmax(exact.data(), int64_t(exact.size())) == test::argmax(fast.data(), int64_t(fast.size()));
    ++rows;
  }
  static double mean(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0 : s / double(v.size());
  }
  static double max(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }
  nlohmann::json json() const {
    return {{"rows", rows}, {"rel_rms_mean", mean(rel_rms)}, {"rel_rms_max", max(rel_rms)},
            {"kl_mean", mean(kl)}, {"kl_max", max(kl)}, {"top1_agree", rows ? double(top1_same) / double(rows) : 0.0}};
  }
};

}  // namespace

TEST_CASE("fast math accuracy", "[.fast-math-accuracy]") {
  const char* path = std::getenv("NUNCHAKU_BENCH_MODEL");
  REQUIRE(path);
  const int threads = int(test::env_int("NUNCHAKU_BENCH_THREADS", 0));
  const int64_t P = test::env_int("NUNCHAKU_BENCH_PROMPT", 128), D = test::env_int("NUNCHAKU_BENCH_DECODE", 32);
  EngineOptions o;
  o.max_context = P + 2 * D + 2;
  o.max_tokens = P;
  o.logit_rows = P;
  auto m = test::load_engine_model(path, o, Device{Device::Kind::Cpu, 0}, std::nullopt, threads);
  EngineOptions of = o;
  of.fast_math = true;
  Engine fast_engine = make_engine(m.ck, m.layout, m.load.store, {of, threads, std::nullopt, Device{Device::Kind::Cpu, 0}});
  Transformer &ex = *m.tf, &fa = *fast_engine.model;
  const int64_t V = ex.vocab();

  // The prompt: NUNCHAKU_ACC_FIRST (e.g. BOS) then the exact engine's greedy tokens, text of
  // the model's own (trained models); unset, P spread-out token ids (random-weight models).
  std::vector<int32_t> prompt;
  if (const int64_t first = test::env_int("NUNCHAKU_ACC_FIRST", -1); first >= 0) {
    prompt.push_back(int32_t(first));
    while (int64_t(prompt.size()) < P) {
      const SeqChunk c{0, int64_t(prompt.size()) - 1, {&prompt.back(), 1}, false};
      prompt.push_back(test::argmax(ex.forward({&c, 1}).data(), V));
    }
  } else {
    for (int64_t i = 0; i < P; ++i) prompt.push_back(int32_t((i * 7919 + 3) % V));
  }
  RowStats prefill, decode;
  std::vector<float> ex_logits;
  {
    const SeqChunk c{0, 0, prompt, true};
    auto le = ex.forward({&c, 1});
    ex_logits.assign(le.begin(), le.end());
    auto lf = fa.forward({&c, 1});
    for (int64_t p = 0; p < P; ++p)
      prefill.add({ex_logits.data() + p * V, size_t(V)}, lf.subspan(size_t(p * V), size_t(V)));
  }
  // Teacher forcing: the exact engine's greedy tokens into both.
  int32_t next = test::argmax(ex_logits.data() + (P - 1) * V, V);
  std::vector<int32_t> exact_tokens;
  for (int64_t s = 0; s < D; ++s) {
    exact_tokens.push_back(next);
    const SeqChunk c{0, P + s, {&exact_tokens.back(), 1}, false};
    auto le = ex.forward({&c, 1});
    ex_logits.assign(le.begin(), le.end());
    decode.add(ex_logits, fa.forward({&c, 1}));
    next = test::argmax(ex_logits.data(), V);
  }
  // Free running from the prompt: each engine's own greedy tokens (slot 0, positions from P).
  auto greedy = [&](Transformer& t) {
    const SeqChunk c{0, 0, prompt, false};
    auto l = t.forward({&c, 1});
    std::vector<int32_t> toks{test::argmax(l.data(), V)};
    for (int64_t s = 0; s + 1 < D; ++s) {
      const SeqChunk d{0, P + s, {&toks.back(), 1}, false};
      auto ld = t.forward({&d, 1});
      toks.push_back(test::argmax(ld.data(), V));
    }
    return toks;
  };
  // NUNCHAKU_ACC_BASELINE: the same model unquantized (e.g. F32): how far each engine's
  // prompt logits are from it, so fast math's cost reads next to the quantization's own.
  nlohmann::json baseline;
  if (const char* base = std::getenv("NUNCHAKU_ACC_BASELINE"); base && *base) {
    auto b = test::load_engine_model(base, o, Device{Device::Kind::Cpu, 0}, std::nullopt, threads);
    REQUIRE(b.tf->vocab() == V);
    const SeqChunk c{0, 0, prompt, true};
    auto lb = b.tf->forward({&c, 1});
    const std::vector<float> ref(lb.begin(), lb.end());
    RowStats vs_exact, vs_fast;
    auto le = ex.forward({&c, 1});
    for (int64_t p = 0; p < P; ++p) vs_exact.add({ref.data() + p * V, size_t(V)}, le.subspan(size_t(p * V), size_t(V)));
    auto lf = fa.forward({&c, 1});
    for (int64_t p = 0; p < P; ++p) vs_fast.add({ref.data() + p * V, size_t(V)}, lf.subspan(size_t(p * V), size_t(V)));
    baseline = {{"model", base}, {"exact_vs_baseline", vs_exact.json()}, {"fast_vs_baseline", vs_fast.json()}};
  }
  const auto ge = greedy(ex), gf = greedy(fa);
  int64_t same = 0;
  while (same < int64_t(ge.size()) && ge[size_t(same)] == gf[size_t(same)]) ++same;
  nlohmann::json out{{"model", path}, {"exact", ex.describe()}, {"fast", fa.describe()},
                     {"prefill", prefill.json()}, {"decode", decode.json()},
                     {"greedy_tokens", D}, {"greedy_agree_prefix", same}, {"baseline", baseline}};
  std::printf("ACCURACY %s\n", out.dump().c_str());
}
