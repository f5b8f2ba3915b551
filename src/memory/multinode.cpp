// Several nodes: the words and numbers per rank and per node (multinode.hpp).
#include "memory/multinode.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/units.hpp"
#include "memory/estimate_detail.hpp"

namespace nunchaku {

std::string ranks_text(const Workload& w) {
  const uint64_t g = static_cast<uint64_t>(std::max(1, w.gpus));
  if (w.nodes <= 1) return plural(g, "GPU");
  return fmt::format("{} × {} ({})", plural(uint64_t(w.nodes), "node"), plural(g, "GPU"), plural(w.ranks(), "rank"));
}

nlohmann::json topology_json(const Estimate& e) {
  const Workload& w = e.workload;
  const uint64_t g = static_cast<uint64_t>(std::max(1, w.gpus));
  return {{"num_nodes", std::max(1, w.nodes)},
          {"num_gpus_per_node", g},
          {"num_ranks", w.ranks()},
          {"rank_bytes", e.per_gpu_total},
          {"node_gpu_bytes", estimate_detail::mul({e.per_gpu_total, g})},
          {"node_host_bytes", e.host_total}};
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

std::string rank_breakdown(const Estimate& e) {
  if (e.runtime != Runtime::DeepSpeed) return "";
  uint64_t states = 0, transient = 0, over = 0;
  for (const auto& c : e.gpu) {
    if (c.overhead) over = estimate_detail::add(over, c.bytes);
    else if (c.name == "activations" || c.name == "logits") transient = estimate_detail::add(transient, c.bytes);
    else states = estimate_detail::add(states, c.bytes);
  }
  const Workload& w = e.workload;
  return fmt::format("per GPU: model states {} (ZeRO-{}{} over {}), activations + logits {}, overheads {}", format_bytes(states), w.zero,
                     w.offload == Offload::None ? "" : fmt::format(" offload {}", offload_name(w.offload)), ranks_text(w),
                     format_bytes(transient), format_bytes(over));
}

}  // namespace nunchaku
