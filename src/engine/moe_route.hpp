// Routing of a mixture-of-experts layer, the host-side arithmetic every backend shares:
// which experts a token goes to and with what weight (the Backend::moe contract, MoeFfn).
#pragma once

#include <cstdint>
#include <span>

#include "model/recipe.hpp"

namespace nunchaku::engine {

// One token: `logits` [experts] -> the top `experts_out.size()` experts and their weights.
// Weights are softmax(logits) at the chosen experts (fp32, max subtracted), divided by their
// sum when `norm_topk` (then they add up to 1). Order: largest weight first, ties to the lower
// expert index. A NaN logit ranks below every number and gets weight 0; when no logit is a
// number the first experts are chosen with weight 0 (the routed part then adds nothing).
// Never allocates; experts_out.size() == weights_out.size() <= logits.size().
// Routing::TopkSoftmax (gpt-oss): the same choice, weights a softmax over the chosen experts'
// logits alone (max subtracted: the first); NaN logits chosen get 0, +inf ones share 1.
// Routing::SigmoidTopk (DeepSeek-V3): scores sigmoid(logit); the choice by score + bias[e]
// (RouteLimits::bias), the weights the chosen scores, divided by their sum (+ 1e-20) when
// `norm_topk`.
// RouteLimits (DeepSeek): the experts form `groups` equal groups in order and only the best
// `used` groups are chosen from, a group ranked by its best score (transformers' DeepSeek-V2)
// or by the sum of its two best (`top2`: V3, and llama.cpp for every gating), ties to the
// lower group; scores are the softmax probabilities (SoftmaxTopk) or sigmoid + bias; the
// weights end times `scale`.
struct RouteLimits {
  int64_t groups = 0, used = 0;  // 0 groups: no limit (at most 64 groups)
  const float* bias = nullptr;   // [experts] (SigmoidTopk)
  float scale = 1;
  bool top2 = false;
};
void route_token(std::span<const float> logits, bool norm_topk, std::span<int32_t> experts_out,
                 std::span<float> weights_out, Routing routing = Routing::SoftmaxTopk, const RouteLimits& limits = {});

// The assignments of a pass grouped by expert: `choice` [tokens x k] expert ids (each in
// [0, experts)) -> `first` [experts + 1] (expert e's assignments are rows first[e] ..
// first[e+1]) and `order` [tokens x k] (the assignment index t * k + j of each row, by
// expert, then by token, then by j). Stable, so results do not depend on thread timing.
void group_by_expert(std::span<const int32_t> choice, int64_t experts, std::span<int64_t> first,
                     std::span<int32_t> order);

}  // namespace nunchaku::engine
