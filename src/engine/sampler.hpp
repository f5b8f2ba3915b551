// Next-token selection for one request: repetition penalty, then greedy or
// temperature -> top-k -> top-p -> min-p -> draw, in the order and with the
// definitions of transformers' logits processors:
//   repetition_penalty: every distinct token of prompt+generated so far has its logit
//     divided by the penalty when positive, multiplied when negative (HF, llama.cpp).
//   top_k: keep tokens whose logit is >= the k-th largest (ties at the edge stay).
//   top_p: in descending probability, keep a token while the mass before it is < top_p.
//   min_p: drop tokens whose probability is < min_p * the top probability.
// Each Sampler owns its seeded RNG, so a request's tokens depend on its seed and its
// logits only, not on which other requests share the batch.
// Scratch buffers are sized to the vocabulary once, in the constructor.
// Total: any logits (NaN counts as -inf, +-inf are handled as limits) with any accepted
// parameters give a non-empty candidate list; parameters that are NaN, out of range or
// (temperature, penalty) not finite are refused by the constructor.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace nunchaku::engine {

struct SamplingParams {
  float temperature = 0;         // 0 = greedy (argmax; the lowest id wins a tie)
  int top_k = 0;                 // 0 = off
  float top_p = 1;               // >= 1 = off
  float min_p = 0;               // 0 = off
  float repetition_penalty = 1;  // 1 = off
  uint64_t seed = 0;
};

// The log-probability of `token` and the `top` most likely tokens (descending, the lower id
// first on a tie; at most 20) under log_softmax of the raw logits of the step: before the
// repetition penalty, temperature and filters (vLLM's default "raw" logprobs). NaN counts
// as -inf, as in sampling.
struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};
constexpr int kMaxTopLogprobs = 20;
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int top);

class Sampler {
 public:
  Sampler(const SamplingParams& params, int64_t vocab);

  // logits: [vocab]; history: prompt + generated ids (for the repetition penalty).
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);

  // The distribution sample() would draw from, [vocab] (zeros for filtered tokens); for
  // greedy, one-hot. For tests and logprobs.
  std::span<const float> distribution(std::span<const float> logits, std::span<const int32_t> history);

  const SamplingParams& params() const { return p_; }

 private:
  void prepare(std::span<const float> logits, std::span<const int32_t> history);  // fills probs_
  void softmax();  // probs_ over order_ from work_
  double next_uniform();  // [0, 1), splitmix64

  SamplingParams p_;
  int64_t vocab_;
  uint64_t state_;
  std::vector<float> work_;    // penalised, tempered logits
  std::vector<float> probs_;   // final distribution
  std::vector<int32_t> order_; // kept token ids, descending probability
  std::vector<uint8_t> seen_;  // repetition penalty dedup
};

}  // namespace nunchaku::engine
