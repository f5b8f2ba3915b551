#include "engine/sampler.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace nunchaku::engine {

Sampler::Sampler(const SamplingParams& params, int64_t vocab)
    : p_(params), vocab_(vocab), state_(params.seed ^ 0x9E3779B97F4A7C15ull), work_(size_t(vocab)),
      probs_(size_t(vocab)), order_(size_t(vocab)), seen_(size_t(vocab), 0) {
  // Written so that NaN fails every test. A temperature or penalty that overflowed the
  // float (1e308 in a request) is refused here, per request, not sampled from.
  const bool ok = std::isfinite(p_.temperature) && p_.temperature >= 0 && p_.top_k >= 0 && p_.top_p > 0 &&
                  p_.min_p >= 0 && p_.min_p <= 1 && std::isfinite(p_.repetition_penalty) &&
                  p_.repetition_penalty > 0;
  if (!ok)
    throw Error("engine.bad_sampling",
                "sampling parameters out of range (finite temperature >= 0, top_k >= 0, 0 < top_p, "
                "0 <= min_p <= 1, finite repetition_penalty > 0)");
}

double Sampler::next_uniform() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return double(z >> 11) * (1.0 / 9007199254740992.0);  // 53 bits
}

void Sampler::prepare(std::span<const float> logits, std::span<const int32_t> history) {
  if (int64_t(logits.size()) != vocab_) throw Error("engine.bad_sampling", "logits size differs from the vocabulary", {}, Exit::Internal);
  // A NaN logit counts as -inf (it would make every comparison below meaningless).
  for (size_t i = 0; i < work_.size(); ++i) work_[i] = std::isnan(logits[i]) ? -INFINITY : logits[i];
  if (p_.repetition_penalty != 1) {
    for (int32_t id : history) {
      if (id < 0 || id >= vocab_ || seen_[size_t(id)]) continue;
      seen_[size_t(id)] = 1;
      float& v = work_[size_t(id)];
      v = v > 0 ? v / p_.repetition_penalty : v * p_.repetition_penalty;
    }
    for (int32_t id : history)
      if (id >= 0 && id < vocab_) seen_[size_t(id)] = 0;
  }
  std::fill(probs_.begin(), probs_.end(), 0.0f);
  if (p_.temperature == 0) {
    int32_t best = int32_t(std::max_element(work_.begin(), work_.end()) - work_.begin());
    probs_[size_t(best)] = 1;
    order_.assign(1, best);
    return;
  }
  for (float& v : work_) v /= p_.temperature;
  // Candidates: everything, or the top-k (ties with the k-th kept, as transformers does).
  order_.resize(size_t(vocab_));
  for (int64_t i = 0; i < vocab_; ++i) order_[size_t(i)] = int32_t(i);
  auto by_logit = [&](int32_t a, int32_t b) { return work_[size_t(a)] > work_[size_t(b)] || (work_[size_t(a)] == work_[size_t(b)] && a < b); };
  size_t n = order_.size();
  if (p_.top_k > 0 && p_.top_k < vocab_) {
    std::nth_element(order_.begin(), order_.begin() + (p_.top_k - 1), order_.end(), by_logit);
    float kth = work_[size_t(order_[size_t(p_.top_k - 1)])];
    n = size_t(std::partition(order_.begin(), order_.end(), [&](int32_t i) { return work_[size_t(i)] >= kth; }) -
               order_.begin());
  }
  order_.resize(n);
  softmax();
  if (p_.top_p < 1) {
    // Sort only as much of the head as the nucleus needs: 64 candidates, then 4x more
    // until their mass reaches top_p (a large vocabulary is rarely sorted in full).
    size_t m = std::min<size_t>(order_.size(), 64), keep = 0;
    for (;;) {
      std::partial_sort(order_.begin(), order_.begin() + std::ptrdiff_t(m), order_.end(), by_logit);
      double before = 0;
      keep = 0;
      while (keep < m && (keep == 0 || before < double(p_.top_p))) before += probs_[size_t(order_[keep++])];
      if (keep < m || before >= double(p_.top_p) || m == order_.size()) break;
      m = std::min(order_.size(), m * 4);
    }
    for (size_t j = keep; j < order_.size(); ++j) probs_[size_t(order_[j])] = 0;
    order_.resize(keep);
  }
  if (p_.min_p > 0) {
    float top = 0;
    for (int32_t i : order_) top = std::max(top, probs_[size_t(i)]);
    const float cut = p_.min_p * top;
    size_t kept = 0;
    for (int32_t i : order_) {
      if (probs_[size_t(i)] >= cut) order_[kept++] = i;
      else probs_[size_t(i)] = 0;
    }
    order_.resize(kept);
  }
  double total = 0;
  for (int32_t i : order_) total += probs_[size_t(i)];
  for (int32_t i : order_) probs_[size_t(i)] = float(probs_[size_t(i)] / total);
}

// Softmax over the candidates, total on any logits: when some are +inf (a tiny
// temperature overflowed them) they share the mass equally, the limit of the softmax;
// when none is above -inf the lowest-id candidate gets it all. The largest candidate
// always gets probability > 0, so the filters after this never empty the list.
void Sampler::softmax() {
  float mx = -INFINITY;
  for (int32_t i : order_) mx = std::max(mx, work_[size_t(i)]);
  auto weight = [&](float v) -> double {
    if (mx == INFINITY) return v == INFINITY ? 1.0 : 0.0;
    if (mx == -INFINITY) return 0.0;
    return std::exp(double(v) - double(mx));
  };
  double sum = 0;
  for (int32_t i : order_) sum += weight(work_[size_t(i)]);
  if (sum == 0) {
    const int32_t first = *std::min_element(order_.begin(), order_.end());
    probs_[size_t(first)] = 1;
    order_.assign(1, first);
    return;
  }
  for (int32_t i : order_) probs_[size_t(i)] = float(weight(work_[size_t(i)]) / sum);
}

std::span<const float> Sampler::distribution(std::span<const float> logits, std::span<const int32_t> history) {
  prepare(logits, history);
  return probs_;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  prepare(logits, history);
  if (order_.size() == 1) return order_[0];
  double u = next_uniform(), acc = 0;
  for (int32_t i : order_) {
    acc += probs_[size_t(i)];
    if (u < acc) return i;
  }
  return order_.back();  // rounding left u above the last partial sum
}

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int top) {
  auto at = [&](size_t i) { return std::isnan(logits[i]) ? -INFINITY : logits[i]; };
  float mx = -INFINITY;
  for (size_t i = 0; i < logits.size(); ++i) mx = std::max(mx, at(i));
  double sum = 0;
  if (std::isfinite(mx))
    for (size_t i = 0; i < logits.size(); ++i) sum += std::exp(double(at(i)) - double(mx));
  const double lse = std::isfinite(mx) ? double(mx) + std::log(sum) : double(mx);
  auto lp = [&](size_t i) { return float(std::isfinite(lse) ? double(at(i)) - lse : (at(i) == mx ? 0.0 : -INFINITY)); };
  TokenLogprobs out;
  out.token = token;
  out.logprob = token >= 0 && size_t(token) < logits.size() ? lp(size_t(token)) : -INFINITY;
  const size_t k = std::min<size_t>(size_t(std::clamp(top, 0, kMaxTopLogprobs)), logits.size());
  if (k == 0) return out;
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
  std::partial_sort(ids.begin(), ids.begin() + std::ptrdiff_t(k), ids.end(), [&](int32_t a, int32_t b) {
    return at(size_t(a)) > at(size_t(b)) || (at(size_t(a)) == at(size_t(b)) && a < b);
  });
  for (size_t j = 0; j < k; ++j) out.top.emplace_back(ids[j], lp(size_t(ids[j])));
  return out;
}

}  // namespace nunchaku::engine
