// engine::generate_from (the one scheduler, run's streaming source) against each request run
// alone (batch 1, one after another): the same requests give the same tokens, finish reasons
// and counts whether they are given up front or arrive one by one while others run, three
// at a time (sampling is per-request seeded and the kernels batch-invariant, so batch
// composition must not matter).
#include <catch2/catch.hpp>

#include <map>
#include <random>

#include "engine/generate.hpp"
#include "tests/helpers.hpp"
#include "tests/test_engine_helpers.hpp"

using namespace nunchaku;

TEST_CASE("the scheduler gives each request what it gets alone, up front or trickled in", "[run]") {
  engine::EngineOptions eo;
  eo.max_batch = 4;
  auto m = test::load_engine_model(test::testdata("run/llama-spm"), eo);
  engine::Transformer& tf = *m.tf;
  std::mt19937 rng(7);
  std::vector<engine::GenerationRequest> reqs(11);
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto& r = reqs[i];
    r.prompt.resize(1 + rng() % 40);
    for (auto& t : r.prompt) t = int32_t(rng() % uint32_t(tf.vocab()));
    r.max_tokens = 1 + rng() % 20;
    r.sampling.temperature = i % 3 ? 0.8f : 0.0f;
    r.sampling.top_k = i % 2 ? 20 : 0;
    r.sampling.seed = i;
    r.eos_ids = {int32_t(rng() % uint32_t(tf.vocab()))};
  }
  reqs[5].prompt.assign(size_t(tf.max_context()), 1);  // too long: an error for that one only
  engine::SchedulerOptions alone;
  alone.batch_size = 1;
  alone.prefill_chunk = 16;
  const auto expected = engine::generate(tf, reqs, alone);

  for (bool trickle : {false, true}) {
    std::map<size_t, engine::GenerationResult> got;
    size_t next = 0, polls = 0;
    engine::SchedulerOptions st;
    st.batch_size = 3;
    st.prefill_chunk = 16;
    auto source = [&](bool wait, size_t& id, engine::GenerationRequest& g) {
      if (next == reqs.size()) return engine::Pull::End;
      // Trickled: a request is "there" only every third poll unless the scheduler waits.
      if (trickle && !wait && ++polls % 3) return engine::Pull::NotYet;
      id = next;
      g = reqs[next++];
      return engine::Pull::Got;
    };
    st.on_finish = [&](size_t id, const engine::GenerationResult& r) { got.emplace(id, r); };
    engine::GenerationStats stats;
    stats = engine::generate_from(tf, source, st);
    CHECK(stats.max_active > 1);  // it did batch
    INFO("trickle " << trickle);
    REQUIRE(got.size() == reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
      INFO("request " << i);
      CHECK(got[i].tokens == expected[i].tokens);
      CHECK(got[i].finish_reason == expected[i].finish_reason);
      CHECK(got[i].completion_tokens == expected[i].completion_tokens);
      CHECK(got[i].prompt_tokens == expected[i].prompt_tokens);
    }
    CHECK(got[5].finish_reason == "error");
  }
}

TEST_CASE("the scheduler stops when asked, reporting only what finished", "[run]") {
  engine::EngineOptions eo;
  eo.max_batch = 2;
  auto m = test::load_engine_model(test::testdata("run/llama-spm"), eo);
  size_t pulled = 0, finished = 0, steps = 0;
  engine::SchedulerOptions st;
  st.batch_size = 2;
  auto source = [&](bool, size_t& id, engine::GenerationRequest& g) {
    id = pulled++;
    g = {};
    g.prompt = {1, 2, 3};
    g.max_tokens = 1000;  // longer than the stop below allows
    return engine::Pull::Got;
  };
  st.on_finish = [&](size_t, const engine::GenerationResult&) { ++finished; };
  st.should_stop = [&] { return ++steps > 10; };
  engine::generate_from(*m.tf, source, st);
  CHECK(pulled == 2);
  CHECK(finished == 0);
}
