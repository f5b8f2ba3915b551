// Several nodes: the words and numbers per rank and per node (multinode.hpp).
#include "memory/multinode.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.hpp"
#include "core/units.hpp"
#include "memory/estimate_detail.hpp"
#include "memory/fsdp.hpp"

namespace nunchaku {

std::string ranks_text(const Workload& w) {
  const uint64_t g = static_cast<uint64_t>(std::max(1, w.gpus));
  if (w.nodes <= 1) return plural(g, "GPU");
  return fmt::format("{} × {} ({})", plural(uint64_t(w.nodes), "node"), plural(g, "GPU"), plural(w.ranks(), "rank"));
}

namespace {
nlohmann::json network_json(const Estimate& e) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : e.network) {
    const bool crosses = c.formula.rfind("crosses nodes", 0) == 0;
    out.push_back({{"name", c.name}, {"bytes_per_step", c.bytes}, {"crosses_nodes", crosses},
                   {"seconds_per_step", crosses && e.workload.interconnect > 0 ? nlohmann::json(double(c.bytes) / double(e.workload.interconnect))
                                                                                : nlohmann::json(nullptr)},
                   {"formula", c.formula}});
  }
  return out;
}
}  // namespace

nlohmann::json topology_json(const Estimate& e) {
  const Workload& w = e.workload;
  const uint64_t g = static_cast<uint64_t>(std::max(1, w.gpus));
  return {{"num_nodes", std::max(1, w.nodes)},
          {"num_gpus_per_node", g},
          {"num_ranks", w.ranks()},
          {"rank_bytes", e.per_gpu_total},
          {"node_gpu_bytes", estimate_detail::mul({e.per_gpu_total, g})},
          {"node_host_bytes", e.host_total},
          {"interconnect_bytes_per_s", w.interconnect > 0 ? nlohmann::json(w.interconnect) : nlohmann::json(nullptr)},
          {"network", network_json(e)},
          {"fsdp", fsdp_json(e)}};
}

std::vector<int64_t> vllm_pp_partition(int64_t layers, int pp) {
  std::vector<int64_t> parts(static_cast<size_t>(std::max(pp, 1)), layers / std::max(pp, 1));
  const int64_t rest = layers % std::max(pp, 1);
  for (int64_t i = 2; i < rest + 2; ++i) ++parts[parts.size() - static_cast<size_t>(i)];
  return parts;
}

std::vector<PipelineStage> vllm_stages(const Estimate& e, int tp, int pp) {
  using estimate_detail::add;
  const std::vector<int64_t> parts = vllm_pp_partition(e.spec.num_layers, pp);
  std::vector<PipelineStage> st(parts.size());
  for (size_t i = 0, first = 0; i < parts.size(); first += static_cast<size_t>(parts[i]), ++i)
    st[i].first_layer = static_cast<int64_t>(first), st[i].num_layers = parts[i];
  auto stage_of = [&](int64_t layer) {
    for (size_t i = 0; i < st.size(); ++i)
      if (layer < st[i].first_layer + st[i].num_layers) return i;
    return st.size() - 1;
  };
  uint64_t embedding = 0;
  bool head = false;
  std::vector<uint64_t> w(st.size(), 0), kv(st.size(), 0);
  for (const auto& m : e.modules) {
    const size_t i = m.kind == ModuleKind::Layer ? stage_of(m.layer)
                     : m.kind == ModuleKind::Embedding || m.kind == ModuleKind::Other ? 0 : st.size() - 1;
    w[i] = add(w[i], m.weight_bytes);
    kv[i] = add(kv[i], m.kv_bytes);
    if (m.kind == ModuleKind::Embedding) embedding = add(embedding, m.weight_bytes);
    head = head || m.kind == ModuleKind::Head;
  }
  // A tied head: vLLM's last stage builds its own lm_head and loads the embedding into it.
  if (!head && st.size() > 1) w.back() = add(w.back(), embedding);
  const int64_t kvh = e.spec.num_kv_heads > 0 ? e.spec.num_kv_heads : e.spec.num_heads;
  const uint64_t kv_split = e.spec.kv_lora_rank > 0 ? 1 : uint64_t(std::max<int64_t>(1, std::min<int64_t>(tp, kvh)));
  for (size_t i = 0; i < st.size(); ++i) st[i].weight_bytes = w[i] / uint64_t(tp), st[i].kv_bytes = kv[i] / kv_split;
  return st;
}

void split_vllm_pipeline(Estimate& e) {
  const Workload& w = e.workload;
  const int tp = std::max(1, w.gpus), pp = std::max(1, w.nodes);
  const ModelSpec& s = e.spec;
  if (s.num_heads % tp != 0)
    throw Error("usage.nodes", fmt::format("--gpus {}: vLLM's tensor parallel size (the GPUs of a node) must divide the {} attention heads",
                                           tp, s.num_heads), {.hint = "a --gpus that divides the heads, or fewer GPUs per node"});
  if (pp > s.num_layers)
    throw Error("usage.nodes", fmt::format("--nodes {}: vLLM's pipeline has one stage per node, more than the {} layers", pp, s.num_layers),
                {.hint = fmt::format("at most --nodes {}", s.num_layers)});
  const std::vector<PipelineStage> st = vllm_stages(e, tp, pp);
  size_t worst = 0;
  for (size_t i = 0; i < st.size(); ++i)
    if (estimate_detail::add(st[i].weight_bytes, st[i].kv_bytes) >
        estimate_detail::add(st[worst].weight_bytes, st[worst].kv_bytes))
      worst = i;
  const PipelineStage& f = st[worst];
  const std::string where = fmt::format("stage {} of {} (layers {}-{}{}{}), TP {} within the node", worst, pp, f.first_layer,
                                        f.first_layer + f.num_layers - 1, worst == 0 ? " + embedding" : "",
                                        worst + 1 == st.size() ? " + norm and head" : "", tp);
  for (auto& c : e.gpu) {
    if (c.name == "weights") c.bytes = f.weight_bytes, c.formula = fmt::format("the fullest pipeline {}: its weights / {}", where, tp);
    if (c.name == "kv_cache")
      c.bytes = f.kv_bytes,
      c.formula = fmt::format("{}; its layers' KV in blocks of 16 / {} ({}); vLLM fills the rest of its budget with more blocks", where,
                              s.kv_lora_rank > 0 ? 1 : std::min<int64_t>(tp, s.num_kv_heads > 0 ? s.num_kv_heads : s.num_heads),
                              s.kv_lora_rank > 0 ? "MLA latent, replicated over TP" : "KV heads split over TP, one per rank at least");
  }
  e.runtime_model.push_back(fmt::format("over {} nodes: tensor parallel {} within a node, pipeline parallel {} across nodes (layers per "
                                        "stage {}, vLLM's get_pp_indices)",
                                        pp, tp, pp, fmt::join(vllm_pp_partition(s.num_layers, pp), "/")));
}

namespace {

std::string at_bandwidth(const Workload& w, uint64_t bytes) {
  if (w.interconnect == 0) return "; give --interconnect (e.g. 400Gb) for the time";
  const double s = double(bytes) / double(w.interconnect);
  const std::string t = s >= 1 ? fmt::format("{:.2f} s", s) : s >= 1e-3 ? fmt::format("{:.2f} ms", s * 1e3) : fmt::format("{:.1f} µs", s * 1e6);
  return fmt::format("; at --interconnect {:.4g} Gb/s ({:.4g} GB/s): {} per step", double(w.interconnect) * 8 / 1e9,
                     double(w.interconnect) / 1e9, t);
}

void vllm_traffic(Estimate& e) {
  using estimate_detail::mul;
  const Workload& w = e.workload;
  const uint64_t h = e.spec.hidden_size, el = estimate_detail::elem_bytes(e.compute_dtype), tp = std::max(1, w.gpus);
  const uint64_t decode = uint64_t(w.batch), prefill = uint64_t(kVllmMaxNumBatchedTokens);
  // IntermediateTensors between stages: hidden_states and residual, t × h each.
  for (auto [name, t] : {std::pair{"pp_activations_decode", decode}, std::pair{"pp_activations_prefill", prefill}}) {
    const uint64_t b = mul({2, t, h, el});
    e.network.push_back({name, b, fmt::format("crosses nodes: each stage boundary sends hidden_states + residual, 2·t·h·{} B with t={} "
                                              "({}), per step and boundary{}", el, t, t == decode ? "decode: one token per sequence"
                                              : "prefill: max_num_batched_tokens", at_bandwidth(w, b))});
  }
  const std::vector<int64_t> parts = vllm_pp_partition(e.spec.num_layers, std::max(1, w.nodes));
  const uint64_t layers = uint64_t(*std::max_element(parts.begin(), parts.end()));
  const uint64_t ar = mul({2, layers, decode, h, el}) / tp * 2 * (tp - 1);
  e.network.push_back({"tp_allreduce_decode", ar,
                       fmt::format("inside a node (NVLink/PCIe, not the interconnect): 2 all-reduces per layer × {} layers of t·h·{} B, "
                                   "ring 2·(TP−1)/TP = {}/{} per GPU, t={}", layers, el, 2 * (tp - 1), tp, decode)});
}

void deepspeed_traffic(Estimate& e) {
  using estimate_detail::mul;
  const Workload& w = e.workload;
  const uint64_t M = uint64_t(std::max(1, w.nodes)), el = estimate_detail::elem_bytes(e.compute_dtype);
  const uint64_t T = e.trainable_parameters, P = e.parameters;
  // What one node's link carries of a collective over every rank: the (M - 1) / M of the
  // tensor that lives on the other nodes (hierarchical: once per node, not per GPU).
  const uint64_t grads = mul({T, el}) / M * (M - 1);
  if (w.zero < 3) {
    const uint64_t b = mul({2, grads});
    e.network.push_back({"gradient_allreduce", b, fmt::format("crosses nodes: 16-bit gradients all-reduced (reduce-scatter + all-gather) "
                                                              "each step: 2 × {} trainable × {} B × (M−1)/M, M={} nodes{}",
                                                              T, el, M, at_bandwidth(w, b))});
    return;
  }
  const uint64_t params = mul({P, el}) / M * (M - 1);
  const uint64_t b = estimate_detail::add(mul({2, params}), grads);
  e.network.push_back({"zero3_gather_reduce", b,
                       fmt::format("crosses nodes: ZeRO-3 gathers the 16-bit parameters in forward and again in backward and "
                                   "reduce-scatters the gradients: (2 × {} params + {} trainable) × {} B × (M−1)/M, M={} nodes{}",
                                   P, T, el, M, at_bandwidth(w, b))});
}

// FSDP (fsdp.hpp). Full shard: as ZeRO-3, the parameters all-gathered in forward and again in
// backward (reshard_after_forward) and the gradients reduce-scattered, over every rank. Hybrid:
// those collectives stay within a node; across nodes only each rank's gradient shard is
// all-reduced over the M replicas (FSDP2's all_reduce_group), 2 × T·e × (M−1)/M per node.
void fsdp_traffic(Estimate& e) {
  using estimate_detail::mul;
  const Workload& w = e.workload;
  const uint64_t M = uint64_t(std::max(1, w.nodes)), el = estimate_detail::elem_bytes(e.compute_dtype);
  const uint64_t T = e.trainable_parameters, P = e.parameters;
  const uint64_t grads = mul({T, el}) / M * (M - 1), params = mul({P, el}) / M * (M - 1);
  if (w.fsdp == FsdpStrategy::Full) {
    const uint64_t b = estimate_detail::add(mul({2, params}), grads);
    e.network.push_back({"fsdp_gather_reduce", b,
                         fmt::format("crosses nodes: FSDP full shard all-gathers the parameters in {} for forward and again for "
                                     "backward and reduce-scatters the gradients: (2 × {} params + {} trainable) × {} B × (M−1)/M, "
                                     "M={} nodes{}", dtype_name(e.compute_dtype), P, T, el, M, at_bandwidth(w, b))});
    return;
  }
  const uint64_t b = mul({2, grads});
  e.network.push_back({"hsdp_gradient_allreduce", b,
                       fmt::format("crosses nodes: FSDP hybrid shard all-reduces each rank's gradient shard over the {} replicas "
                                   "(reduce-scatter + all-gather): 2 × {} trainable × {} B × (M−1)/M, M={} nodes{}",
                                   M, T, el, M, at_bandwidth(w, b))});
  const uint64_t G = uint64_t(std::max(1, w.gpus));
  const uint64_t in = mul({P, el}) / G * (G - 1);
  e.network.push_back({"hsdp_gather_reduce", estimate_detail::add(mul({2, in}), mul({T, el}) / G * (G - 1)),
                       fmt::format("inside a node (NVLink/PCIe, not the interconnect): parameter all-gathers (forward, backward) "
                                   "and gradient reduce-scatter over the {} GPUs of the node, (2 × {} + {}) × {} B × (G−1)/G per GPU",
                                   G, P, T, el)});
}

}  // namespace

void add_cross_node_traffic(Estimate& e) {
  if (e.workload.nodes <= 1) return;
  if (e.runtime == Runtime::Vllm) vllm_traffic(e);
  else if (e.runtime == Runtime::DeepSpeed) deepspeed_traffic(e);
  else if (e.runtime == Runtime::Fsdp) fsdp_traffic(e);
}

std::string rank_breakdown(const Estimate& e) {
  if (e.runtime != Runtime::DeepSpeed && e.runtime != Runtime::Fsdp) return "";
  uint64_t states = 0, transient = 0, over = 0, gathered = 0;
  for (const auto& c : e.gpu) {
    if (c.overhead) over = estimate_detail::add(over, c.bytes);
    else if (c.name == "activations" || c.name == "logits") transient = estimate_detail::add(transient, c.bytes);
    else if (c.name == "fsdp_unsharded") gathered = c.bytes;
    else states = estimate_detail::add(states, c.bytes);
  }
  const Workload& w = e.workload;
  if (e.runtime == Runtime::Fsdp)
    return fmt::format("per GPU: model states {} ({}{}), all-gathered units {}, activations + logits {}, overheads {}",
                       format_bytes(states), fsdp_layout_text(w),
                       w.offload == Offload::None ? "" : fmt::format("; CPU offload: {} per node in host memory", format_bytes(e.host_total)),
                       format_bytes(gathered), format_bytes(transient), format_bytes(over));
  return fmt::format("per GPU: model states {} (ZeRO-{}{} over {}), activations + logits {}, overheads {}", format_bytes(states), w.zero,
                     w.offload == Offload::None ? "" : fmt::format(" offload {}", offload_name(w.offload)), ranks_text(w),
                     format_bytes(transient), format_bytes(over));
}

}  // namespace nunchaku
