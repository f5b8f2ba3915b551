// nunchaku estimate PATH: the memory a workload needs per GPU, component by
// component, a verdict against --vram (exit 3 on predicted OOM) and what would
// make it fit. Thin adapter: options → Workload → estimate() → print.
#include <algorithm>
#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/workload_options.hpp"
#include "core/error.hpp"
#include "cuda/device_info.hpp"
#include "format/open.hpp"
#include "memory/estimate.hpp"
#include "memory/quant.hpp"
#include "memory/units.hpp"
#include "model/model.hpp"

namespace nunchaku::cli {
namespace {

struct EstimateOptions {
  std::string path, vram;
  WorkloadOptions w;
  bool json = false;
};

void print_table(const Estimate& e) {
  const auto& s = e.spec;
  const auto& w = e.workload;
  fmt::print("model:     {} ({}), {} layers, hidden {}, {} heads ({} KV) × {}, vocab {}, {} params\n",
             s.architecture.empty() ? "?" : s.architecture, s.source.empty() ? "?" : s.source, s.num_layers, s.hidden_size,
             s.num_heads, s.num_kv_heads, s.head_dim, s.vocab_size, format_count(e.parameters));
  fmt::print("workload:  {}, batch {}, context {}{}, weights {}{}, compute {}, KV {}", mode_name(w.mode), w.batch, w.context,
             e.context_defaulted ? fmt::format(" (default: min(model max {}, 4096))", s.max_context) : "",
             dtype_name(e.weight_dtype), w.quant.scheme != QuantScheme::None ? " as " + w.quant.label() : "",
             dtype_name(e.compute_dtype), dtype_name(e.kv_dtype));
  if (w.mode != Mode::Infer)
    fmt::print(", {} ({} trainable), ZeRO-{} on {} GPU(s), offload {}", optimizer_name(w.optimizer), format_count(e.trainable_parameters),
               w.zero, w.gpus, offload_name(w.offload));
  else if (w.gpus > 1)
    fmt::print(", split over {} GPUs", w.gpus);
  fmt::print("\nKV cache:  {} per token (all layers, batch 1)\n\n", format_bytes(e.kv_bytes_per_token));
  fmt::print("{:<20} {:>12}  {}\n", "component (per GPU)", "bytes", "formula");
  for (const auto& c : e.gpu) fmt::print("{:<20} {:>12}  {}\n", c.name, format_bytes(c.bytes), c.formula);
  fmt::print("{:<20} {:>12}  ({} B)\n", "total per GPU", format_bytes(e.per_gpu_total), e.per_gpu_total);
  for (const auto& c : e.host) fmt::print("{:<20} {:>12}  {}\n", c.name + " (CPU)", format_bytes(c.bytes), c.formula);
  for (const auto& n : e.notes) fmt::print("note: {}\n", n);
}

int run(const EstimateOptions& o) {
  const auto vram = parse_vram(o.vram);
  Workload w = to_workload(o.w, vram.size());
  Checkpoint ck = open_checkpoint(o.path);
  ModelLayout layout = describe_model(ck);
  Estimate e = estimate(ck, layout, w);
  std::optional<Verdict> v;
  std::vector<Suggestion> sugg;
  if (!vram.empty()) {
    v = verdict(e, *std::min_element(vram.begin(), vram.end()));
    if (!v->fits) sugg = suggest_fits(ck, layout, w, v->vram);
  }
  if (o.json) {
    auto j = to_json(e);
    if (v) {
      j["verdict"] = to_json(*v);
      j["suggestions"] = to_json(sugg);
    }
    fmt::print("{}\n", j.dump(2));
  } else {
    print_table(e);
    if (v) {
      fmt::print("\nvram {}: {}\n", format_bytes(v->vram), v->text);
      if (!v->fits) {
        if (sugg.empty()) fmt::print("nothing tried makes it fit (batch, context, quantization, checkpointing, ZeRO, GPUs)\n");
        else fmt::print("to make it fit (each re-estimated):\n");
        for (const auto& s : sugg)
          fmt::print("  {:<44} {:<34} {} per GPU, {} headroom\n", s.flags, s.what, format_bytes(s.per_gpu_total), format_bytes(s.headroom));
      }
    }
  }
  return v && !v->fits ? static_cast<int>(Exit::OutOfMemory) : 0;
}

}  // namespace

void add_estimate(CLI::App& app, Action& action) {
  auto o = std::make_shared<EstimateOptions>();
  auto* cmd = app.add_subcommand("estimate", "Memory a workload needs per GPU, a verdict against --vram, and what would make it fit");
  cmd->add_option("PATH", o->path, "Checkpoint file or directory")->required();
  add_workload_options(cmd, o->w);
  cmd->add_option("--vram", o->vram, "Memory per GPU: 16G, 16G,24G, or auto (free memory of the CUDA devices)");
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o, &action] { action = [o] { return run(*o); }; });
}

}  // namespace nunchaku::cli
