// Mixture-of-experts layers' transients per runtime (sources and commits in docs/estimate.md).
// vLLM's profile run: the unquantized CUDA path runs the routed experts through the modular
// kernel with the Triton experts, whose two workspaces come from one persistent buffer that
// outlives the layer, beside the router's logits, the top-k tables and the block alignment.
// transformers 5: the experts' default implementation, grouped_mm, gathers each token's k
// copies and keeps four (t·k, h) tensors alive at its end.
#include <algorithm>

#include <fmt/format.h>

#include "memory/estimate_detail.hpp"

namespace nunchaku::estimate_detail {

namespace {

constexpr uint64_t kWorkspaceAlign = 256;  // WorkspaceManager.get_simultaneous rounds each view
constexpr uint64_t kBlockM = 64;           // get_default_config's BLOCK_SIZE_M when tokens > experts

struct MoeDims {
  uint64_t t, h, E, k, I, shared, el;  // tokens, hidden, experts, top-k, I_expert / TP, shared I / TP, bytes
};

MoeDims moe_dims(const Estimate& e, uint64_t tokens) {
  const ModelSpec& s = e.spec;
  const uint64_t tp = gpus(e);
  const uint64_t I = uint64_t(std::max<int64_t>(s.moe_intermediate_size > 0 ? s.moe_intermediate_size : s.intermediate_size, 0));
  return {tokens, uint64_t(s.hidden_size), uint64_t(s.num_experts), uint64_t(std::max<int64_t>(s.num_experts_per_tok, 1)),
          I / tp, uint64_t(std::max<int64_t>(s.shared_expert_intermediate_size, 0)) / tp, elem_bytes(e.compute_dtype)};
}

// The Triton experts' workspace13 (M·k·max(I, h), shared with the M·h output) and
// workspace2 (M·k·max(2I, h)), one allocation kept for every later layer.
uint64_t workspace_bytes(const MoeDims& d) {
  const uint64_t ws13 = std::max(mul({d.t, d.k, std::max(d.I, d.h)}), mul({d.t, d.h}));
  const uint64_t ws2 = mul({d.t, d.k, std::max(2 * d.I, d.h)});
  return add(round_up(mul({ws13, d.el}), kWorkspaceAlign), round_up(mul({ws2, d.el}), kWorkspaceAlign));
}

// Freed with the layer: router logits M·E, fused_topk's weights (fp32), ids and
// token_expert_indices (int32), moe_align_block_size's sorted ids, expert ids and count.
uint64_t router_bytes(const MoeDims& d) {
  const uint64_t padded = add(mul({d.t, d.k}), mul({d.E, kBlockM - 1}));
  return add(add(mul({d.t, d.E, d.el}), mul({d.t, d.k, 12})), mul({add(add(padded, (padded + kBlockM - 1) / kBlockM), 1), 4}));
}

}  // namespace

bool has_dense_layer(const Estimate& e) {
  return std::any_of(e.modules.begin(), e.modules.end(),
                     [](const ModuleCost& m) { return m.kind == ModuleKind::Layer && m.layer >= 0 && m.expert_bytes == 0; });
}

// grouped_mm_experts_forward (transformers/integrations/moe.py): at `weighted_out[inv_perm]`
// the gathered inputs, the down projections, the weighted copy and its reordering, each
// (t·k, h); the int64 sort order, expert ids and inverse order and the gathered weights,
// (t·k); the router's logits (t, E) and their fp32 softmax.
uint64_t torch_moe_bytes(const Estimate& e, uint64_t tokens, std::string* f) {
  const MoeDims d = moe_dims(e, tokens);
  const uint64_t S = mul({d.t, d.k});
  *f = fmt::format("grouped_mm experts 4·t·k·h·{0} + t·k·(24+{0}) + router t·E·({0}+4) with k={1} E={2}", d.el, d.k, d.E);
  return add(add(mul({4, S, d.h, d.el}), mul({S, 24 + d.el})), mul({d.t, d.E, d.el + 4}));
}

uint64_t torch_moe_block_bytes(const Estimate& e, uint64_t tokens) {
  const MoeDims d = moe_dims(e, tokens);
  return mul({d.t, d.k, d.h, d.el});
}

uint64_t vllm_moe_peak(const Estimate& e, uint64_t tokens, std::string* f) {
  const MoeDims d = moe_dims(e, tokens);
  const uint64_t residual = torch_residual_bytes(e, tokens), qkv = torch_qkv_bytes(e, tokens);
  const uint64_t ws = workspace_bytes(d), router = router_bytes(d), shared = mul({3, d.t, d.shared, d.el});
  const uint64_t moe_layer = add(ws, std::max(qkv, add(router, shared)));
  const bool dense = has_dense_layer(e);
  const uint64_t dense_mlp = mul({3, d.t, uint64_t(std::max<int64_t>(e.spec.intermediate_size, 0)), d.el});
  const uint64_t dense_layer = dense ? std::max(qkv, dense_mlp) : 0;
  *f = fmt::format(
      "residual 2·t·h·{el} + max({dense}fused-MoE layer: Triton experts' workspace (kept) t·k·(max(I,h) + max(2I,h))·{el} {ws} B + "
      "max(attention t·(a+2·kv)·d·{el} {qkv} B, router logits t·E·{el} + top-k t·k·12 + block alignment (t·k + E·{bm1})·4 {router} B"
      "{sh})) with t={t} h={h} E={E} k={k} I={I} (I_expert / TP {tp}){dI}",
      fmt::arg("el", d.el), fmt::arg("ws", ws), fmt::arg("qkv", qkv), fmt::arg("router", router), fmt::arg("bm1", kBlockM - 1), fmt::arg("t", d.t),
      fmt::arg("h", d.h), fmt::arg("E", d.E), fmt::arg("k", d.k), fmt::arg("I", d.I), fmt::arg("tp", gpus(e)),
      fmt::arg("dense", dense ? fmt::format("dense layer max(attention, mlp 3·t·I_dense·{}) {} B, ", d.el, dense_layer) : ""),
      fmt::arg("sh", d.shared > 0 ? fmt::format(" + shared expert 3·t·{}·{}", d.shared, d.el) : ""),
      fmt::arg("dI", dense ? fmt::format(" I_dense={}", e.spec.intermediate_size) : ""));
  return add(residual, std::max(dense_layer, moe_layer));
}

}  // namespace nunchaku::estimate_detail
