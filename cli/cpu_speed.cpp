#include "cli/cpu_speed.hpp"

#include <map>
#include <tuple>

#include <fmt/format.h>

#include "core/units.hpp"
#include "engine/kernels_q8.hpp"
#include "memory/decode_bound.hpp"

namespace nunchaku::cli {
namespace {

// The roles whose tensor is a matrix a decode step multiplies by (KB/VB: MLA's per-head stacks).
bool matmul_role(Role r) {
  switch (r) {
    case Role::Q: case Role::K: case Role::V: case Role::O: case Role::Gate: case Role::Up: case Role::Down:
    case Role::QKV: case Role::GateUp: case Role::Router: case Role::ExpGate: case Role::ExpUp: case Role::ExpDown:
    case Role::ExpGateUp: case Role::ExpGateUpMixed: case Role::ExpGateUpIn: case Role::ShGate: case Role::ShUp: case Role::ShDown:
    case Role::QA: case Role::QB: case Role::KVA: case Role::KVB: case Role::KB: case Role::VB: case Role::Head: return true;
    default: return false;
  }
}

std::string rate(double weights_per_s) { return fmt::format("{:.1f} G weights/s", weights_per_s / 1e9); }

}  // namespace

std::vector<engine::ProbeClass> decode_classes(const Checkpoint& ck, const ModelLayout& layout, int64_t batch) {
  const ModelSpec* s = layout.spec ? &*layout.spec : nullptr;
  const double routed = s ? routed_fraction(s->num_experts, s->num_experts_per_tok, batch) : 1.0;
  bool head = false;
  for (const Module& m : layout.modules) head = head || (m.component.empty() && m.kind == ModuleKind::Head);
  // (type, rows, cols, exact only) -> matrices per step; under --fast-math the router runs
  // exactly (the CPU backend's moe op), and so do routed experts with no 8-bit path (the moe
  // op rounds only K-quant experts' rows to Q8_K, never to bf16).
  std::map<std::tuple<DType, int64_t, int64_t, bool>, double> by_class;
  for (const Module& m : layout.modules) {
    if (!m.component.empty() || m.kind == ModuleKind::FinalNorm || m.kind == ModuleKind::Other) continue;
    if (m.kind == ModuleKind::Embedding && head) continue;  // a lookup of B rows
    for (size_t k = 0; k < m.tensors.size(); ++k) {
      if (m.tensors[k] >= ck.tensors.size()) continue;
      const TensorInfo& t = ck.tensors[m.tensors[k]];
      const Role r = k < m.roles.size() ? m.roles[k] : Role::None;
      const bool matrix = m.kind == ModuleKind::Embedding ? r == Role::Embed : matmul_role(r);
      const size_t n = t.shape.size();
      if (!matrix || n < 2 || t.shape[n - 1] <= 0 || t.shape[n - 2] <= 0) continue;
      double count = 1;  // a stack [E, rows, cols] (experts, MLA's per-head k_b / v_b): E matrices
      for (size_t i = 0; i + 2 < n; ++i) count *= double(std::max<int64_t>(t.shape[i], 0));
      const bool exact = r == Role::Router ||
                         (is_expert_role(r) && engine::fast_math_path(t.dtype, t.shape[n - 1]) != engine::FastPath::Q8K);
      by_class[{t.dtype, t.shape[n - 2], t.shape[n - 1], exact}] += is_expert_role(r) ? count * routed : count;
    }
  }
  std::vector<engine::ProbeClass> out;
  for (const auto& [key, count] : by_class) out.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), count, std::get<3>(key)});
  return out;
}

std::string probe_line(const engine::SpeedProbe& p) {
  const auto wps = [](const engine::ProbeRate& r, double seconds) { return double(r.of.rows) * double(r.of.cols) / seconds; };
  std::vector<std::string> types;
  for (const auto& r : p.rates)
    types.push_back(r.fast_path ? fmt::format("{} {}x{}: {} exact, {} fast", dtype_name(r.of.dtype), r.of.rows, r.of.cols,
                                              rate(wps(r, r.exact)), rate(wps(r, r.fast)))
                                : fmt::format("{} {}x{}{}: {}", dtype_name(r.of.dtype), r.of.rows, r.of.cols,
                                              r.of.exact_only ? " (router or experts: exact)" : "", rate(wps(r, r.exact))));
  std::string speeds = p.fast_path ? fmt::format("exact {:.1f} tok/s, --fast-math {:.1f} tok/s", p.exact_tok_s, p.fast_tok_s)
                                   : fmt::format("{:.1f} tok/s (exact; no weight here has a --fast-math path on this CPU)", p.exact_tok_s);
  std::string skipped;
  for (const auto& c : p.skipped)
    skipped += fmt::format("{}{} {}x{}", skipped.empty() ? "; not probed: " : ", ", dtype_name(c.dtype), c.rows, c.cols);
  return fmt::format("decode on this CPU at batch {}, measured: at most {} ({} thread{}, {}; the engine's matmuls over {} of "
                     "synthetic weights, {:.2f} s: {}; attention over the context not counted{}; --no-probe skips this)",
                     p.batch, speeds, p.threads, p.threads == 1 ? "" : "s", p.isa, format_bytes(p.buffer_bytes), p.seconds,
                     fmt::join(types, ", "), skipped);
}

nlohmann::json probe_json(const engine::SpeedProbe& p) {
  nlohmann::json types = nlohmann::json::array(), skipped = nlohmann::json::array();
  const auto shape = [](const engine::ProbeClass& c) {
    return nlohmann::json{{"dtype", dtype_name(c.dtype)}, {"rows", c.rows}, {"cols", c.cols}, {"matrices_per_step", c.count},
                          {"exact_only", c.exact_only}};
  };
  for (const auto& r : p.rates) {
    nlohmann::json t = shape(r.of);
    t["exact_seconds"] = r.exact, t["fast_math_seconds"] = r.fast, t["fast_math_path"] = r.fast_path;
    types.push_back(t);
  }
  for (const auto& c : p.skipped) skipped.push_back(shape(c));
  return {{"batch", p.batch}, {"threads", p.threads}, {"isa", p.isa}, {"exact_tokens_per_s", p.exact_tok_s},
          {"fast_math_tokens_per_s", p.fast_tok_s}, {"fast_math_path", p.fast_path}, {"probe_seconds", p.seconds},
          {"buffer_bytes", p.buffer_bytes}, {"types", types}, {"not_probed", skipped}};
}

}  // namespace nunchaku::cli
