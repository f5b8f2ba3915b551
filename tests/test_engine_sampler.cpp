// Sampler against hand-computed distributions, and the batch scheduler (continuous
// batching, chunked prefill, per-request errors, EOS / stop / length) against the
// transformers greedy continuations in testdata/engine/goldens.json.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "engine/generate.hpp"
#include "engine/sampler.hpp"
#include "tests/helpers.hpp"
#include "tests/test_engine_helpers.hpp"

using namespace nunchaku;
using namespace nunchaku::engine;

namespace {

std::vector<float> dist(SamplingParams p, std::vector<float> logits, std::vector<int32_t> history = {}) {
  Sampler s(p, int64_t(logits.size()));
  auto d = s.distribution(logits, history);
  return {d.begin(), d.end()};
}

void check_dist(const std::vector<float>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("token " << i);
    CHECK(got[i] == Approx(want[i]).margin(1e-6));
  }
}

const nlohmann::json& goldens() {
  static nlohmann::json g = nlohmann::json::parse(std::ifstream(test::testdata("engine/goldens.json")));
  return g;
}

}  // namespace

TEST_CASE("sampler: greedy takes the lowest id among equal maxima", "[engine]") {
  check_dist(dist({}, {1, 3, 2, 3}), {0, 1, 0, 0});
}

TEST_CASE("sampler: repetition penalty divides positive and multiplies negative logits once per token", "[engine]") {
  // [2, -1, 0.5, 1] with tokens 0 and 1 seen (1 twice), penalty 2 -> [1, -2, 0.5, 1].
  SamplingParams p;
  p.repetition_penalty = 2;
  check_dist(dist(p, {2, -1, 0.5f, 1}, {0, 1, 1}), {1, 0, 0, 0});  // greedy: tie 0/3 -> 0
  p.temperature = 1;
  // softmax([1, -2, 0.5, 1]) = e^x / (2e + e^-2 + e^0.5) = e^x / 7.2196167
  double z = 2 * std::exp(1.0) + std::exp(-2.0) + std::exp(0.5);
  check_dist(dist(p, {2, -1, 0.5f, 1}, {0, 1, 1}), {std::exp(1.0) / z, std::exp(-2.0) / z, std::exp(0.5) / z, std::exp(1.0) / z});
}

TEST_CASE("sampler: temperature scales logits before the softmax", "[engine]") {
  SamplingParams p;
  p.temperature = 0.5f;
  // [0, ln2, ln4] / 0.5 -> weights 1, 4, 16
  check_dist(dist(p, {0, std::log(2.0f), std::log(4.0f)}), {1.0 / 21, 4.0 / 21, 16.0 / 21});
}

TEST_CASE("sampler: top-k keeps the k largest, and ties with the k-th", "[engine]") {
  SamplingParams p;
  p.temperature = 1;
  p.top_k = 2;
  check_dist(dist(p, {0, std::log(2.0f), std::log(4.0f), std::log(3.0f)}), {0, 0, 4.0 / 7, 3.0 / 7});
  check_dist(dist(p, {std::log(4.0f), std::log(2.0f), std::log(2.0f), 0}), {0.5, 0.25, 0.25, 0});
}

TEST_CASE("sampler: top-p keeps tokens while the mass before them is below p", "[engine]") {
  SamplingParams p;
  p.temperature = 1;
  std::vector<float> l = {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
  p.top_p = 0.75f;
  check_dist(dist(p, l), {0, 0.5 / 0.8, 0, 0.3 / 0.8});
  p.top_p = 0.85f;
  check_dist(dist(p, l), {0.15 / 0.95, 0.5 / 0.95, 0, 0.3 / 0.95});
  p.top_p = 0.1f;  // always at least one token
  check_dist(dist(p, l), {0, 1, 0, 0});
}

TEST_CASE("sampler: min-p drops tokens below min_p times the top probability", "[engine]") {
  SamplingParams p;
  p.temperature = 1;
  p.min_p = 0.4f;  // cut = 0.2
  std::vector<float> l = {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
  check_dist(dist(p, l), {0, 0.5 / 0.8, 0, 0.3 / 0.8});
}

TEST_CASE("sampler: same seed, same tokens, draws follow the distribution", "[engine]") {
  SamplingParams p;
  p.temperature = 1;
  p.seed = 7;
  std::vector<float> l = {0, std::log(3.0f), std::log(4.0f), std::log(2.0f)};  // probs .1 .3 .4 .2
  Sampler a(p, 4), b(p, 4);
  std::vector<int> count(4);
  std::vector<int32_t> sa, sb;
  for (int i = 0; i < 20000; ++i) {
    sa.push_back(a.sample(l, {}));
    sb.push_back(b.sample(l, {}));
    ++count[size_t(sa.back())];
  }
  CHECK(sa == sb);
  p.seed = 8;
  Sampler c(p, 4);
  std::vector<int32_t> sc;
  for (int i = 0; i < 200; ++i) sc.push_back(c.sample(l, {}));
  CHECK(std::vector<int32_t>(sa.begin(), sa.begin() + 200) != sc);
  // 20000 draws: standard deviation of a frequency <= 0.0035; 0.015 is > 4 sigma.
  CHECK(count[0] / 20000.0 == Approx(0.1).margin(0.015));
  CHECK(count[1] / 20000.0 == Approx(0.3).margin(0.015));
  CHECK(count[2] / 20000.0 == Approx(0.4).margin(0.015));
  CHECK(count[3] / 20000.0 == Approx(0.2).margin(0.015));
}

TEST_CASE("sampler: bad parameters are an error", "[engine]") {
  SamplingParams p;
  p.top_p = 0;
  CHECK_THROWS_AS(Sampler(p, 4), Error);
  p = {};
  p.temperature = -1;
  CHECK_THROWS_AS(Sampler(p, 4), Error);
  // NaN fails every range test; 1e308 in a request is +inf as a float.
  for (float bad : {NAN, INFINITY}) {
    INFO(bad);
    p = {};
    p.temperature = bad;
    CHECK_THROWS_AS(Sampler(p, 4), Error);
    p = {};
    p.repetition_penalty = bad;
    CHECK_THROWS_AS(Sampler(p, 4), Error);
    p = {};
    p.min_p = bad;
    CHECK_THROWS_AS(Sampler(p, 4), Error);
  }
  p = {};
  p.top_p = NAN;
  CHECK_THROWS_AS(Sampler(p, 4), Error);
}

TEST_CASE("sampler: total on non-finite logits and extreme parameters", "[engine]") {
  // A NaN logit counts as -inf: the rest is sampled as if it were absent.
  SamplingParams t1{.temperature = 1};
  check_dist(dist(t1, {NAN, 0.0f, NAN, float(std::log(3.0))}), {0, 0.25, 0, 0.75});
  // Greedy skips NaN too (max_element over NaN is meaningless).
  check_dist(dist({}, {NAN, 1, NAN, 2}), {0, 0, 0, 1});
  // +inf logits share the mass (the softmax's limit); -inf ones get none.
  check_dist(dist(t1, {INFINITY, 5, -INFINITY, INFINITY}), {0.5, 0, 0, 0.5});
  // Nothing above -inf: a defined choice, the lowest id, with every filter on.
  SamplingParams all{.temperature = 1, .top_k = 2, .top_p = 0.5f, .min_p = 0.1f, .repetition_penalty = 1.3f};
  check_dist(dist(all, {NAN, -INFINITY, NAN, -INFINITY}, {1, 3}), {1, 0, 0, 0});
  // A temperature that overflows finite logits to +-inf, with the largest penalty and
  // min_p (the ASan heap-buffer-overflow of issue 14): the two largest tie at +inf.
  SamplingParams hot{.temperature = 1e-45f, .min_p = 0.1f, .repetition_penalty = 3.4e38f};
  check_dist(dist(hot, {1, -2, 3, 3, 0}, {0, 1}), {0, 0, 0.5, 0.5, 0});
  Sampler s(hot, 5);
  const std::vector<float> logits{1, -2, 3, 3, 0};
  for (int i = 0; i < 100; ++i) {
    int32_t tok = s.sample(logits, std::vector<int32_t>{0, 1});
    CHECK((tok == 2 || tok == 3));
  }
}

TEST_CASE("generate: 8 identical prompts in one batch equal batch size 1, greedy and seeded", "[engine]") {
  EngineOptions o;
  o.max_batch = 8;
  o.max_context = 64;
  auto m = test::load_engine_model(test::testdata("models/llama"), o);
  const auto& g = goldens().at("models/llama");
  GenerationRequest rq;
  rq.prompt = g.at("prompts")[0].get<std::vector<int32_t>>();
  rq.max_tokens = 16;
  std::vector<GenerationRequest> eight(8, rq);
  auto one = generate(*m.tf, std::span(&rq, 1), {.batch_size = 1});
  GenerationStats st;
  auto many = generate(*m.tf, eight, {.batch_size = 8}, &st);
  CHECK(st.max_active == 8);
  CHECK(one[0].tokens == g.at("continuations")[0].get<std::vector<int32_t>>());
  for (const auto& r : many) CHECK(r.tokens == one[0].tokens);

  // Sampling: a request's tokens depend on its seed, not on its neighbours.
  rq.sampling.temperature = 1.0f;
  rq.sampling.top_p = 0.9f;
  rq.sampling.seed = 42;
  auto s1 = generate(*m.tf, std::span(&rq, 1), {.batch_size = 1});
  std::vector<GenerationRequest> mixed(8, rq);
  for (size_t i = 0; i < mixed.size(); ++i)
    if (i % 2) mixed[i].sampling.seed = 100 + i;
  auto s8 = generate(*m.tf, mixed, {.batch_size = 8});
  for (size_t i = 0; i < s8.size(); i += 2) CHECK(s8[i].tokens == s1[0].tokens);
  CHECK(s1[0].tokens.size() == 16);
}

TEST_CASE("generate: more requests than slots, chunked prefill, one over-long prompt fails alone", "[engine]") {
  EngineOptions o;
  o.max_batch = 3;
  o.max_context = 64;
  o.max_tokens = 8;  // forces prompts of 8 and 13 tokens to prefill in pieces next to decodes
  auto m = test::load_engine_model(test::testdata("models/llama"), o);
  const auto& g = goldens().at("models/llama");
  auto prompt = [&](int i) { return g.at("prompts")[size_t(i)].get<std::vector<int32_t>>(); };
  auto cont = [&](int i) { return g.at("continuations")[size_t(i)].get<std::vector<int32_t>>(); };

  std::vector<GenerationRequest> rq;
  for (int i = 0; i < 3; ++i) {  // 0..2: full greedy continuations
    GenerationRequest r;
    r.prompt = prompt(i);
    r.max_tokens = 16;
    rq.push_back(r);
  }
  GenerationRequest too_long;
  too_long.prompt.assign(70, 5);
  rq.push_back(too_long);  // 3
  GenerationRequest short_one;
  short_one.prompt = prompt(1);
  short_one.max_tokens = 5;
  rq.push_back(short_one);  // 4
  GenerationRequest eos = short_one;
  eos.max_tokens = 16;
  eos.eos_ids = {cont(1)[6]};
  rq.push_back(eos);  // 5
  GenerationRequest stopper = short_one;
  stopper.max_tokens = 16;
  stopper.stop = [](std::span<const int32_t> gen) { return gen.size() == 3; };
  rq.push_back(stopper);  // 6
  GenerationRequest bad_id;
  bad_id.prompt = {1, 99999};
  rq.push_back(bad_id);  // 7
  GenerationRequest fills;
  fills.prompt.assign(60, 7);
  fills.max_tokens = 16;
  rq.push_back(fills);  // 8
  GenerationRequest last = rq[2];
  rq.push_back(last);  // 9

  std::vector<size_t> finished;
  GenerationStats st;
  auto res = generate(*m.tf, rq, {.prefill_chunk = 4, .on_finish = [&](size_t i, const GenerationResult&) { finished.push_back(i); }}, &st);
  REQUIRE(res.size() == rq.size());
  CHECK(finished.size() == rq.size());
  CHECK(st.max_active <= 3);
  for (int i : {0, 1, 2, 9}) {
    INFO("request " << i);
    CHECK(res[size_t(i)].finish_reason == "length");
    CHECK(res[size_t(i)].tokens == cont(i == 9 ? 2 : i));
    CHECK(res[size_t(i)].completion_tokens == 16);
    CHECK(res[size_t(i)].prompt_tokens == int64_t(rq[size_t(i)].prompt.size()));
    CHECK(res[size_t(i)].prefill_s >= 0);
    CHECK(res[size_t(i)].decode_s >= 0);
  }
  CHECK(res[3].finish_reason == "error");
  CHECK(res[3].error.find("does not fit the context") != std::string::npos);
  CHECK(res[3].tokens.empty());
  const auto c1 = cont(1);
  CHECK(res[4].finish_reason == "length");
  CHECK(res[4].tokens == std::vector<int32_t>(c1.begin(), c1.begin() + 5));
  // EOS: the first occurrence of that id in the continuation ends it, not included.
  size_t first = size_t(std::find(c1.begin(), c1.end(), eos.eos_ids[0]) - c1.begin());
  CHECK(res[5].finish_reason == "stop");
  CHECK(res[5].tokens == std::vector<int32_t>(c1.begin(), c1.begin() + std::ptrdiff_t(first)));
  CHECK(res[5].completion_tokens == int64_t(first) + 1);
  CHECK(res[6].finish_reason == "stop");
  CHECK(res[6].tokens == std::vector<int32_t>(c1.begin(), c1.begin() + 3));
  CHECK(res[7].finish_reason == "error");
  CHECK(res[7].error.find("outside the vocabulary") != std::string::npos);
  // 60 prompt tokens in a 64-token context: positions 60..63 take 4 generated tokens, and
  // the logits after the last of them give a 5th.
  CHECK(res[8].finish_reason == "length");
  CHECK(res[8].tokens.size() == 5);
  // One count of tokens: the stats sum what the results return (request 5's ending EOS was
  // sampled, completion_tokens first + 1, but is not returned, so not counted), and the
  // prompt tokens of the requests that ran (3 and 7 were refused before running).
  int64_t returned = 0, prompts = 0;
  for (size_t i = 0; i < res.size(); ++i) {
    returned += int64_t(res[i].tokens.size());
    if (i != 3 && i != 7) prompts += int64_t(rq[i].prompt.size());
  }
  CHECK(st.generated_tokens == returned);
  CHECK(st.prompt_tokens == prompts);
  // tok/s is over the time in forward passes, which the whole run contains.
  CHECK(st.busy_s > 0);
  CHECK(st.busy_s <= st.wall_s);
}

TEST_CASE("sampler: top-p over a large vocabulary equals the full-sort definition", "[engine]") {
  // 5000 logits from a fixed LCG; the nucleus needs hundreds of tokens, more than the
  // sampler's first partial sort. Reference: softmax in double, full sort, keep while the
  // mass before a token is < p, renormalize (transformers' TopPLogitsWarper).
  const int V = 5000;
  std::vector<float> logits(V);
  uint32_t st = 12345;
  for (auto& l : logits) {
    st = st * 1664525u + 1013904223u;
    l = float(st >> 8) / float(1 << 24) * 3.0f;
  }
  for (float top_p : {0.3f, 0.9f}) {
    INFO("top_p " << top_p);
    SamplingParams p;
    p.temperature = 0.7f;
    p.top_p = top_p;
    auto got = dist(p, logits);
    std::vector<double> pr(V);
    double mx = *std::max_element(logits.begin(), logits.end()) / 0.7, z = 0;
    for (int i = 0; i < V; ++i) z += pr[size_t(i)] = std::exp(double(logits[size_t(i)]) / 0.7 - mx);
    std::vector<int> idx(V);
    for (int i = 0; i < V; ++i) idx[size_t(i)] = i, pr[size_t(i)] /= z;
    std::sort(idx.begin(), idx.end(), [&](int a, int b) { return pr[size_t(a)] > pr[size_t(b)]; });
    std::vector<double> want(V, 0.0);
    double before = 0, kept = 0;
    int n = 0;
    for (int i : idx) {
      if (n > 0 && before >= top_p) break;
      before += pr[size_t(i)];
      want[size_t(i)] = pr[size_t(i)];
      kept += pr[size_t(i)];
      ++n;
    }
    CHECK(n > 64);
    for (auto& w : want) w /= kept;
    for (int i = 0; i < V; ++i) REQUIRE(got[size_t(i)] == Approx(want[size_t(i)]).margin(1e-6));
  }
}

TEST_CASE("generate logprobs: log_softmax of transformers' last-prompt logits, top-k sorted as the golden's", "[engine]") {
  EngineOptions o;
  o.max_batch = 2;
  o.max_context = 64;
  auto m = test::load_engine_model(test::testdata("models/llama"), o);
  const auto& g = goldens().at("models/llama");
  GenerationRequest rq;
  rq.prompt = g.at("prompts")[0].get<std::vector<int32_t>>();
  rq.max_tokens = 3;
  rq.logprobs = 5;
  // The golden's last prompt row, log_softmax in double: the independent expectation.
  const std::vector<double> row = g.at("logits").back().get<std::vector<double>>();
  double mx = *std::max_element(row.begin(), row.end()), sum = 0;
  for (double v : row) sum += std::exp(v - mx);
  auto golden_lp = [&](size_t i) { return row[i] - mx - std::log(sum); };
  std::vector<int32_t> order(row.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int32_t(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[size_t(a)] > row[size_t(b)]; });
  for (float temperature : {0.0f, 0.7f}) {  // raw logprobs: the same whatever the sampling
    INFO("temperature " << temperature);
    rq.sampling.temperature = temperature;
    rq.sampling.seed = 9;
    auto res = generate(*m.tf, std::span(&rq, 1), {.batch_size = 1});
    REQUIRE(res[0].tokens.size() == 3);
    REQUIRE(res[0].logprobs.size() == 3);
    const auto& first = res[0].logprobs[0];
    CHECK(first.token == res[0].tokens[0]);
    CHECK(std::abs(first.logprob - golden_lp(size_t(first.token))) < 1e-4);
    REQUIRE(first.top.size() == 5);
    for (size_t j = 0; j < 5; ++j) {
      CHECK(first.top[j].first == order[j]);
      CHECK(std::abs(first.top[j].second - golden_lp(size_t(order[j]))) < 1e-4);
      if (j) CHECK(first.top[j].second <= first.top[j - 1].second);
    }
    if (temperature == 0) CHECK(first.token == order[0]);
  }
  rq.logprobs = -1;
  CHECK(generate(*m.tf, std::span(&rq, 1), {.batch_size = 1})[0].logprobs.empty());
}

TEST_CASE("token_logprobs: hand-computed values, NaN as -inf, k capped at 20", "[engine]") {
  const std::vector<float> logits{0, std::log(3.0f), NAN, std::log(4.0f)};  // softmax 1/8, 3/8, 0, 4/8
  auto t = token_logprobs(logits, 1, 3);
  CHECK(std::abs(t.logprob - std::log(3.0 / 8)) < 1e-6);
  REQUIRE(t.top.size() == 3);
  CHECK(t.top[0].first == 3);
  CHECK(t.top[1].first == 1);
  CHECK(t.top[2].first == 0);
  CHECK(token_logprobs(logits, 2, 0).logprob == -INFINITY);
  std::vector<float> wide(64, 0.0f);
  CHECK(token_logprobs(wide, 0, 50).top.size() == 20);
}
