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

}  // namespace

void route_token(std::span<const float> logits, bool norm_topk, std::span<int32_t> experts_out,
                 std::span<float> weights_out, Routing routing) {
  const size_t E = logits.size(), k = experts_out.size();
  float max = -std::numeric_limits<float>::infinity();
  for (float v : logits)
    if (v > max) max = v;  // NaN compares false: never the max
  const bool any = std::isfinite(max) || max == std::numeric_limits<float>::infinity();
  // Selection by insertion into the k best (k is small: 1..8 in published models). `better`:
  // a larger number first; NaN below everything; equal values keep the lower index (earlier).
  auto better = [&](size_t a, size_t b) {
    const float x = logits[a], y = logits[b];
    if (std::isnan(y)) return !std::isnan(x);
    return !std::isnan(x) && x > y;
  };
  size_t n = 0;
  for (size_t e = 0; e < E; ++e) {
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
