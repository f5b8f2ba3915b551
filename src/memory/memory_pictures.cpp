#include "memory/memory_pictures.hpp"

#include <fmt/format.h>

#include "core/units.hpp"

namespace nunchaku {
namespace {

std::string workload_line(const Estimate& e) {
  const Workload& w = e.workload;
  if (e.spec.hidden_size <= 0) return fmt::format("{}, {} params", mode_name(w.mode), format_count(e.parameters));
  return fmt::format("{}, {} params; {}, batch {}, context {}, weights {}, KV {}", e.spec.architecture.empty() ? "unknown" : e.spec.architecture,
                     format_count(e.parameters), mode_name(w.mode), w.batch, w.context, dtype_name(e.weight_dtype), dtype_name(e.kv_dtype));
}

// Consecutive layer indices in `layers` as [first, last] runs, each cut into pieces so that
// there are at most `max_ranges` pieces of (nearly) equal count.
std::vector<std::pair<size_t, size_t>> layer_ranges(const std::vector<size_t>& layers, size_t max_ranges) {
  std::vector<std::pair<size_t, size_t>> out;  // index ranges into `layers`
  const size_t per = std::max<size_t>(1, (layers.size() + max_ranges - 1) / std::max<size_t>(1, max_ranges));
  size_t start = 0;
  for (size_t i = 1; i <= layers.size(); ++i)
    if (i == layers.size() || i - start == per) out.push_back({start, i - 1}), start = i;
  return out;
}

}  // namespace

std::vector<BarSegment> weight_segments(const Estimate& e, const std::vector<size_t>& held, uint64_t expected,
                                        size_t max_ranges) {
  std::vector<BarSegment> out;
  std::vector<size_t> layers;  // module indices of decoder layers, in order
  uint64_t sum = 0;
  auto add_kind = [&](ModuleKind k, uint64_t bytes) {
    const std::string name = fmt::format("weights: {}", module_kind_name(k));
    for (auto& s : out)
      if (s.name == name) return void(s.bytes += bytes);
    out.push_back({name, bytes});
  };
  for (size_t i : held) {
    const ModuleCost& m = e.modules.at(i);
    sum += m.weight_bytes;
    if (m.kind == ModuleKind::Layer && m.layer >= 0) layers.push_back(i);
    else if (m.kind != ModuleKind::Head && m.kind != ModuleKind::FinalNorm) add_kind(m.kind, m.weight_bytes);
  }
  if (sum != expected) return {{"weights", expected}};
  for (auto [a, b] : layer_ranges(layers, max_ranges)) {
    uint64_t bytes = 0;
    for (size_t k = a; k <= b; ++k) bytes += e.modules[layers[k]].weight_bytes;
    const int64_t first = e.modules[layers[a]].layer, last = e.modules[layers[b]].layer;
    out.push_back({first == last ? fmt::format("weights: layer {}", first) : fmt::format("weights: layers {}-{}", first, last), bytes});
  }
  // The head and final norm on top, as the forward pass meets them.
  for (size_t i : held)
    if (e.modules[i].kind == ModuleKind::Head || e.modules[i].kind == ModuleKind::FinalNorm) add_kind(e.modules[i].kind, e.modules[i].weight_bytes);
  return out;
}

BarChart estimate_chart(const std::vector<Estimate>& es, const std::vector<std::optional<Verdict>>& verdicts) {
  BarChart c;
  const Estimate& f = es.front();
  c.title = fmt::format("nunchaku estimate: {}", f.spec.architecture.empty() ? "checkpoint" : f.spec.architecture);
  c.subtitle = workload_line(f);
  const bool cpu = f.target == Target::Cpu;
  for (size_t i = 0; i < es.size(); ++i) {
    const Estimate& e = es[i];
    BarGroup g;
    if (es.size() > 1) g.label = std::string(runtime_name(e.runtime));
    Bar b;
    b.label = cpu ? "per CPU process" : e.workload.gpus > 1 ? fmt::format("per GPU (of {})", e.workload.gpus) : "per GPU";
    std::vector<size_t> all(e.modules.size());
    for (size_t m = 0; m < all.size(); ++m) all[m] = m;
    for (const Component& comp : e.gpu) {
      if (comp.name == "weights") {
        for (auto& s : weight_segments(e, all, comp.bytes)) b.segments.push_back(std::move(s));
      } else {
        b.segments.push_back({comp.name, comp.bytes});
      }
    }
    if (i < verdicts.size() && verdicts[i]) b.budget = verdicts[i]->budget;
    g.bars.push_back(std::move(b));
    if (!e.host.empty()) {
      Bar h;
      h.label = "host (CPU RAM)";
      for (const Component& comp : e.host) h.segments.push_back({comp.name, comp.bytes});
      g.bars.push_back(std::move(h));
    }
    c.groups.push_back(std::move(g));
  }
  for (size_t i = 0; i < es.size(); ++i)
    if (i < verdicts.size() && verdicts[i])
      c.notes.push_back(fmt::format("{}vram {}: {}", es.size() > 1 ? std::string(runtime_name(es[i].runtime)) + ": " : "",
                                    format_bytes(verdicts[i]->vram), verdicts[i]->text));
  return c;
}

BarChart plan_chart(const DevicePlan& p, const Estimate& e, const std::string& verdict_text) {
  BarChart c;
  c.title = fmt::format("nunchaku plan: {} ({})", e.spec.architecture.empty() ? "checkpoint" : e.spec.architecture,
                        strategy_name(p.strategy));
  c.subtitle = workload_line(e);
  BarGroup g;
  for (const DeviceCharge& d : p.devices) {
    Bar b;
    b.label = d.device.str();
    b.segments = weight_segments(e, d.modules, d.weights);
    b.segments.push_back({"kv_cache", d.kv_cache});
    b.segments.push_back({"activations", d.activations});
    b.segments.push_back({"logits", d.logits});
    b.segments.push_back({"train_states", d.train_states});
    b.segments.push_back({"overheads", d.overheads});
    b.segments.push_back({"staging", d.staging});
    if (d.budget != UINT64_MAX) b.budget = d.budget;
    g.bars.push_back(std::move(b));
  }
  c.groups.push_back(std::move(g));
  c.notes.push_back(verdict_text);
  return c;
}

}  // namespace nunchaku
