// Several nodes: the words and numbers per rank and per node (multinode.hpp).
#include "memory/multinode.hpp"

#include <fmt/format.h>

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
