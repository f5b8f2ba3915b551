#include "cli/estimate_pipeline.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "cli/help.hpp"
#include "cli/json_doc.hpp"
#include "cli/table.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "core/units.hpp"
#include "memory/pipeline_estimate.hpp"

namespace nunchaku::cli {
namespace {

void print_text(const PipelineEstimate& e, uint64_t vram) {
  const size_t width = output_width();
  fmt::print("pipeline:  {} (diffusers), {} with weights, {} params, {}\n",
             e.pipeline.class_name.empty() ? "unnamed" : e.pipeline.class_name, plural(e.parts.size(), "part"),
             format_count(e.parameters), format_bytes(e.weight_bytes));
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : e.parts)
    rows.push_back({c.part.name, c.part.class_name, format_count(c.parameters), format_bytes(c.weight_bytes)});
  fmt::print("\n{}", layout_table({{"part", true}, {"class", true, 1}, {"params"}, {"weights"}}, rows, width).text);
  fmt::print("\nGPU memory by placement (weights at the peak + fixed costs; activations not counted):\n");
  rows.clear();
  for (const auto& p : e.placements)
    rows.push_back({p.call, format_bytes(p.gpu_bytes), p.host_bytes ? format_bytes(p.host_bytes) : "-",
                    vram ? (p.gpu_bytes <= vram ? "fits" : fmt::format("OOM by {}", format_bytes(p.gpu_bytes - vram))) : ""});
  std::vector<TableColumn> cols = {{"placement", true}, {"GPU"}, {"host RAM"}};
  if (vram) cols.push_back({fmt::format("on {}", format_bytes(vram)), true});
  fmt::print("{}", layout_table(cols, rows, width).text);
  for (const auto& g : e.guessed) fmt::print("{}\n", wrap("guessed: " + g, width, 9));
  for (const auto& n : e.notes) fmt::print("{}\n", wrap("note: " + n, width, 6));
  if (!vram) return;
  const int i = first_fitting(e, vram);
  fmt::print("\n{}\n", wrap(i >= 0 ? fmt::format("verdict: fits with {} ({} headroom; unconfirmed: activations not counted)",
                                                 e.placements[size_t(i)].call, format_bytes(vram - e.placements[size_t(i)].gpu_bytes))
                                   : fmt::format("verdict: OOM by {} even one module at a time (--dtype fp8, or a bigger GPU)",
                                                 format_bytes(e.placements.back().gpu_bytes - vram)),
                            width, 9));
}

}  // namespace

int estimate_pipeline_command(const Pipeline& p, const Workload& w, const std::vector<uint64_t>& vram, bool json,
                              const std::string& path) {
  const PipelineEstimate e = estimate_pipeline(p, w);
  const uint64_t budget = vram.empty() ? 0 : *std::min_element(vram.begin(), vram.end());
  if (json) {
    nlohmann::json j = to_json(e, budget);
    j["path"] = path;
    fmt::print("{}\n", dump_json(stamp(j, "estimate"), 2));
  } else {
    print_text(e, budget);
  }
  return budget && first_fitting(e, budget) < 0 ? static_cast<int>(Exit::OutOfMemory) : 0;
}

}  // namespace nunchaku::cli
