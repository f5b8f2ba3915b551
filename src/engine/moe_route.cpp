#include "engine/moe_route.hpp"

#include <cmath>
#include <limits>

namespace nunchaku::engine {

namespace {

// softmax over the chosen experts' logits (experts_out sorted: the first is the largest
// number, or +inf, or NaN when there is no number).
void softmax_chosen(std::span<const float> logits, std::span<const int32_t> chosen, std::span<float> w) {
  const size_t k = chosen.size();
  const float max = logits[size_t(chosen[0])];
  if (std::isnan(max)) {
    for (size_t j = 0; j < k; ++j) w[j] = 0.0f;
    return;
  }
  float sum = 0;
  for (size_t j = 0; j < k; ++j) {
    const float v = logits[size_t(chosen[j])];
    w[j] = std::isnan(v) ? 0.0f : std::isinf(max) ? (v == max ? 1.0f : 0.0f) : std::exp(v - max);
    sum += w[j];
  }
  for (size_t j = 0; j < k; ++j) w[j] /= sum;  // sum >= 1: the first term is 1
}

// The groups a token's experts may come from (RouteLimits): allowed[g] for the best `used`.
template <class Key>
void choose_groups(size_t E, const RouteLimits& lim, const Key& key, bool* allowed) {
  const size_t G = size_t(lim.groups), per = E / G;
  float score[64];
  for (size_t g = 0; g < G; ++g) {
    float best = -std::numeric_limits<float>::infinity(), second = best;
    for (size_t e = g * per; e < (g + 1) * per; ++e) {
      const float v = key(e);
      if (v > best) second = best, best = v;
      else if (v > second) second = v;
    }
    score[g] = lim.top2 && per > 1 ? best + second : best;
    allowed[g] = false;
  }
  for (int64_t u = 0; u < lim.used; ++u) {
    size_t pick = G;
    for (size_t g = 0; g < G; ++g)
      if (!allowed[g] && (pick == G || score[g] > score[pick])) pick = g;
    if (pick < G) allowed[pick] = true;
  }
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

void route_token(std::span<const float> logits, bool norm_topk, std::span<int32_t> experts_out,
                 std::span<float> weights_out, Routing routing, const RouteLimits& limits) {
  const size_t E = logits.size(), k = experts_out.size();
  float max = -std::numeric_limits<float>::infinity();
  for (float v : logits)
    if (v > max) max = v;  // NaN compares false: never the max
  const bool any = std::isfinite(max) || max == std::numeric_limits<float>::infinity();
  const bool sig = routing == Routing::SigmoidTopk;
  const bool grouped = limits.groups > 0 && limits.groups <= 64 && E % size_t(limits.groups) == 0;
  // What the choice ranks: the logit (softmax is monotone), or with groups exp(logit - max)
  // (the probabilities up to their sum: groups add scores), or (sigmoid) the score plus the
  // correction bias.
  const bool probs = grouped && !sig && std::isfinite(max);
  const auto key = [&](size_t e) {
    return sig ? sigmoid(logits[e]) + (limits.bias ? limits.bias[e] : 0.0f) : probs ? std::exp(logits[e] - max) : logits[e];
  };
  bool allowed[64];
  if (grouped) choose_groups(E, limits, key, allowed);
  const size_t per = grouped ? E / size_t(limits.groups) : E;
  // Selection by insertion into the k best (k is small: 1..8 in published models). `better`:
  // a larger number first; NaN below everything; equal values keep the lower index (earlier).
  auto better = [&](size_t a, size_t b) {
    const float x = key(a), y = key(b);
    if (std::isnan(y)) return !std::isnan(x);
    return !std::isnan(x) && x > y;
  };
  size_t n = 0;
  for (size_t e = 0; e < E; ++e) {
    if (grouped && !allowed[e / per]) continue;
    size_t at = n;
    while (at > 0 && better(e, size_t(experts_out[at - 1]))) --at;
    if (at >= k) continue;
    for (size_t i = std::min(n, k - 1); i > at; --i) experts_out[i] = experts_out[i - 1];
    experts_out[at] = int32_t(e);
    if (n < k) ++n;
  }
  if (!any) {
    for (size_t j = 0; j < k; ++j) weights_out[j] = 0.0f;
    return;
  }
  if (routing == Routing::TopkSoftmax) {
    if (k > 0) softmax_chosen(logits, experts_out.first(k), weights_out);
    return;
  }
  if (sig) {
    float sum = 0;
    for (size_t j = 0; j < k; ++j) sum += weights_out[j] = sigmoid(logits[size_t(experts_out[j])]);
    for (size_t j = 0; j < k; ++j) {
      if (norm_topk) weights_out[j] /= sum + 1e-20f;
      weights_out[j] *= limits.scale;
    }
    return;
  }
  double denom = 0;  // softmax over all experts, then the chosen ones' probabilities
  if (max == std::numeric_limits<float>::infinity()) {
    for (float v : logits) denom += v == max ? 1.0 : 0.0;
    for (size_t j = 0; j < k; ++j) weights_out[j] = logits[size_t(experts_out[j])] == max ? float(1.0 / denom) : 0.0f;
  } else {
    float sum = 0;
    for (float v : logits)
      if (!std::isnan(v)) sum += std::exp(v - max);
    for (size_t j = 0; j < k; ++j) {
      const float v = logits[size_t(experts_out[j])];
      weights_out[j] = std::isnan(v) ? 0.0f : std::exp(v - max) / sum;
    }
  }
  if (norm_topk) {
    float s = 0;
    for (size_t j = 0; j < k; ++j) s += weights_out[j];
    if (s > 0)
      for (size_t j = 0; j < k; ++j) weights_out[j] /= s;
  }
  if (limits.scale != 1.0f)
    for (size_t j = 0; j < k; ++j) weights_out[j] *= limits.scale;
}

void group_by_expert(std::span<const int32_t> choice, int64_t experts, std::span<int64_t> first,
                     std::span<int32_t> order) {
  for (int64_t e = 0; e <= experts; ++e) first[size_t(e)] = 0;
  for (int32_t e : choice) ++first[size_t(e) + 1];
  for (int64_t e = 0; e < experts; ++e) first[size_t(e) + 1] += first[size_t(e)];
  // A second pass in assignment order places each at its expert's next row: by expert, then
  // by assignment index (token-major), without a scratch array (fill counts from the start).
  for (size_t a = 0; a < choice.size(); ++a) {
    const size_t e = size_t(choice[a]);
    // rows of expert e already filled: those of earlier assignments with the same expert
    order[size_t(first[e])] = int32_t(a);
    ++first[e];
  }
  // first[e] now points at expert e's end: shift back by one expert.
  for (int64_t e = experts; e > 0; --e) first[size_t(e)] = first[size_t(e) - 1];
  first[0] = 0;
}

}  // namespace nunchaku::engine
