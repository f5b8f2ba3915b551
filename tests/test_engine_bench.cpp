// Throughput measurement driven by scripts/bench_run.sh (hidden: runs only when asked for
// by name, "[.engine-bench]"). Prints one line "BENCH {json}" with prompt and decode tok/s
// at batch 1 and 8 and the DRAM read bandwidth measured with the same thread count.
// Env: NUNCHAKU_BENCH_MODEL (checkpoint path), NUNCHAKU_BENCH_THREADS (0 = all),
// NUNCHAKU_BENCH_PROMPT (prompt tokens, 128), NUNCHAKU_BENCH_DECODE (decode steps, 32),
// NUNCHAKU_BENCH_BATCHES (batch sizes, "1 8"), NUNCHAKU_BENCH_FAST_MATH (1: run --fast-math).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend.hpp"
#include "engine/model.hpp"
#include "engine/thread_pool.hpp"
#include "tests/test_engine_helpers.hpp"

using namespace nunchaku;
using namespace nunchaku::engine;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Read bandwidth (bytes/s): sum 64-bit words of a 1 GiB buffer split over the threads, best of 3.
double read_bandwidth(int threads) {
  ThreadPool pool(threads);
  const size_t words = (size_t(1) << 30) / 8;
  std::unique_ptr<uint64_t[]> buf(new uint64_t[words]);
  for (size_t i = 0; i < words; ++i) buf[i] = i;
  const int64_t tasks = 256;
  std::vector<uint64_t> sums(static_cast<size_t>(tasks));
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = Clock::now();
    pool.run(tasks, [&](int64_t t, int) {
      const uint64_t* p = buf.get() + size_t(t) * (words / size_t(tasks));
      uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
      for (size_t i = 0; i < words / size_t(tasks); i += 4) {
        a0 += p[i];
        a1 += p[i + 1];
        a2 += p[i + 2];
        a3 += p[i + 3];
      }
      sums[size_t(t)] = a0 + a1 + a2 + a3;
    });
    best = std::max(best, double(words * 8) / since(t0));
  }
  uint64_t total = 0;
  for (auto s : sums) total += s;
  if (total == 42) std::puts("");  // keep the reads
  return best;
}

}  // namespace

TEST_CASE("engine benchmark", "[.engine-bench]") {
  const char* path = std::getenv("NUNCHAKU_BENCH_MODEL");
  REQUIRE(path);
  const int threads = int(test::env_int("NUNCHAKU_BENCH_THREADS", 0));
  const int64_t P = test::env_int("NUNCHAKU_BENCH_PROMPT", 128), D = test::env_int("NUNCHAKU_BENCH_DECODE", 32);
  std::vector<int> batches;
  {
    const char* bs = std::getenv("NUNCHAKU_BENCH_BATCHES");
    std::string s = bs && *bs ? bs : "1 8";
    for (size_t i = 0; i < s.size();) {
      size_t j = s.find(' ', i);
      if (j == std::string::npos) j = s.size();
      if (j > i) batches.push_back(std::atoi(s.substr(i, j - i).c_str()));
      i = j + 1;
    }
  }
  REQUIRE(!batches.empty());
  const int B = std::max(1, *std::max_element(batches.begin(), batches.end()));
  EngineOptions o;
  o.max_batch = B;
  o.max_context = P + D + 1;
  o.max_tokens = P * B;
  o.fast_math = test::env_int("NUNCHAKU_BENCH_FAST_MATH", 0) != 0;
  auto m = test::load_engine_model(path, o, Device{Device::Kind::Cpu, 0}, std::nullopt, threads);
  Transformer& tf = *m.tf;

  uint64_t weight_bytes = 0;  // bytes one decode step reads (every matrix once; embedding rows aside)
  for (const auto& t : m.load.store.tensors())
    if (t.name.find("embed") == std::string::npos && t.name.find("token_embd") == std::string::npos) weight_bytes += t.nbytes;
  if (!m.load.store.find("lm_head.weight") && !m.load.store.find("output.weight"))  // tied: the head reads the embedding
    for (const auto& t : m.load.store.tensors())
      if (t.name.find("embed") != std::string::npos || t.name.find("token_embd") != std::string::npos) weight_bytes += t.nbytes;

  std::vector<std::vector<int32_t>> prompts(B);
  for (int b = 0; b < B; ++b)
    for (int64_t i = 0; i < P; ++i) prompts[size_t(b)].push_back(int32_t((i * 7919 + b * 104729 + 3) % tf.vocab()));

  nlohmann::json out;
  out["model"] = path;
  out["describe"] = tf.describe();
  out["weight_bytes"] = weight_bytes;
  for (int batch : batches) {
    std::vector<SeqChunk> chunks;
    for (int b = 0; b < batch; ++b) chunks.push_back({b, 0, prompts[size_t(b)], false});
    tf.forward(chunks);  // warm-up (pages of weights and KV touched)
    double prefill = 1e30;  // best of 3: one run on a shared 2-core VM varies by 20%
    std::span<const float> logits;
    for (int rep = 0; rep < 3; ++rep) {
      auto t0 = Clock::now();
      logits = tf.forward(chunks);
      prefill = std::min(prefill, since(t0));
    }
    std::vector<int32_t> next(static_cast<size_t>(batch));
    for (int b = 0; b < batch; ++b) next[size_t(b)] = test::argmax(logits.data() + size_t(b) * size_t(tf.vocab()), tf.vocab());
    auto t0 = Clock::now();
    for (int64_t s = 0; s < D; ++s) {
      chunks.clear();
      for (int b = 0; b < batch; ++b) chunks.push_back({b, P + s, {&next[size_t(b)], 1}, false});
      logits = tf.forward(chunks);
      for (int b = 0; b < batch; ++b) next[size_t(b)] = test::argmax(logits.data() + size_t(b) * size_t(tf.vocab()), tf.vocab());
    }
    double decode = since(t0);
    std::string k = "b" + std::to_string(batch);
    out[k]["prompt_tok_s"] = double(P * batch) / prefill;
    out[k]["decode_tok_s"] = double(D * batch) / decode;
  }
  out["dram_read_bytes_s"] = read_bandwidth(tf.backend().threads());
  out["threads"] = tf.backend().threads();
  std::printf("BENCH %s\n", out.dump().c_str());
  std::fflush(stdout);
}
