// plan --nodes N --gpus G --vram SIZE: vLLM over nodes (tensor parallel within a node,
// pipeline parallel across), its table and launch lines (docs/plan.md, "Several nodes").
#include "cli/plan_multinode.hpp"

#include <cerrno>
#include <cstdio>
#include <system_error>

#include <fmt/format.h>

#include "cli/export_dir.hpp"
#include "cli/help.hpp"
#include "cli/table.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "core/units.hpp"
#include "cuda/device_info.hpp"
#include "io/atomic_output.hpp"
#include "memory/plan_multinode.hpp"

namespace nunchaku::cli {
namespace {

std::string render(const VllmCluster& c, const Estimate& e, uint64_t vram, const std::vector<std::string>& notes) {
  const size_t width = output_width();
  std::string out = wrap(fmt::format("model:    {}, {} layers, {} params; {} nodes × {} GPUs, {} each", e.spec.architecture,
                                     e.spec.num_layers, format_count(e.parameters), c.pipeline_parallel, c.tensor_parallel,
                                     format_bytes(vram)),
                         width, 10) +
                    "\n" + wrap("runtime:  vllm, tensor parallel within a node, pipeline parallel across nodes", width, 10) + "\n\n";
  const std::vector<TableColumn> cols = {{"node", true}, {"layers"}, {"weights"}, {"KV"}, {"rest", false, 2},
                                         {"total/GPU"},  {"budget", false, 1}, {"KV room", false, 3}};
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < c.stages.size(); ++i) {
    const auto& s = c.stages[i];
    rows.push_back({fmt::format("node {}", i), fmt::format("{}-{} ({})", s.stage.first_layer, s.stage.first_layer + s.stage.num_layers - 1, s.stage.num_layers),
                    format_bytes(s.stage.weight_bytes), format_bytes(s.stage.kv_bytes),
                    format_bytes(s.rank_total - s.stage.weight_bytes - s.stage.kv_bytes), format_bytes(s.rank_total), format_bytes(c.budget),
                    fmt::format("{} tokens", s.kv_tokens)});
  }
  const TableText t = layout_table(cols, rows, width);
  out += t.text;
  if (!t.dropped.empty()) out += wrap(dropped_note(t, width, "estimate --json has the components"), width) + "\n";
  out += wrap(fmt::format("per GPU of each node (its {} GPUs alike); rest = activations, logits, CUDA context, CUDA graphs, "
                          "allocator slack; KV room = the KV cache vLLM would allocate in the budget", c.tensor_parallel),
              width, 0) + "\n";
  for (const auto& n : notes) out += "note: " + wrap(n, width, 6) + "\n";
  for (const auto& n : c.notes) out += "note: " + wrap(n, width, 6) + "\n";
  return out;
}

std::string verdict_line(const VllmCluster& c) {
  if (c.fits) return fmt::format("fits on {} nodes × {} GPUs: TP {} × PP {}", c.pipeline_parallel, c.tensor_parallel, c.tensor_parallel,
                                 c.pipeline_parallel);
  return fmt::format("does NOT fit on the GPUs: the fullest stage is over its budget; vLLM would need {} (per GPU){}",
                     c.offload_flags, c.fewest_nodes > 0 ? fmt::format(" (or --nodes {})", c.fewest_nodes) : "");
}

std::string launch_text(const VllmCluster& c) {
  std::string out = "# with Ray\n";
  for (const auto& l : c.ray_lines) out += l + "\n";
  out += "# or with vLLM's multiprocessing\n";
  for (const auto& l : c.mp_lines) out += l + "\n";
  return out;
}

}  // namespace

int run_plan_multinode(const MultinodeRequest& q, const Checkpoint& ck, const ModelLayout& layout, const Workload& w) {
  if (q.format != "vllm")
    throw Error("usage.nodes", fmt::format("plan --nodes {} plans what spans machines: --format vllm (inference), deepspeed or fsdp "
                                           "(training), not --format {}", w.nodes, q.format),
                {.hint = w.mode == Mode::Infer ? "add --format vllm" : "add --format deepspeed"});
  if (q.vram == 0) throw Error("usage.vram", "plan --nodes needs --vram (the memory of one GPU)");
  const Estimate e = estimate(ck, layout, w);
  std::vector<uint64_t> totals;
  std::string why;
  for (const auto& d : cuda::list_devices(&why)) totals.push_back(d.total_bytes);
  auto nodes_fit = [&](int n) {
    Workload x = w;
    x.nodes = n;
    try {
      const Estimate en = estimate(ck, layout, x);
      if (n == 1) return verdict(en, q.vram).fits;
      return vllm_cluster(en, q.vram, totals, q.model, [](int) { return false; }).fits;
    } catch (const Error&) {
      return false;
    }
  };
  const VllmCluster c = vllm_cluster(e, q.vram, totals, q.model, nodes_fit);
  const std::string table = render(c, e, q.vram, q.notes);
  const std::string lines = launch_text(c);
  if (is_output_dir(q.output)) {
    std::string ray, mp;
    for (const auto& l : c.ray_lines) ray += l + "\n";
    for (const auto& l : c.mp_lines) mp += l + "\n";
    fmt::print("{}\n{}\n", table, verdict_line(c));
    for (const auto& f : write_export_files(q.output, {{"vllm_ray.sh", ray}, {"vllm_mp.sh", mp}})) fmt::print("wrote {}\n", f);
  } else if (!q.output.empty() && q.output != "-") {
    write_file_atomically(q.output, lines);
    fmt::print("{}\n{}\n{}wrote {} (vllm launch lines)\n", table, verdict_line(c), lines, q.output);
  } else {
    fmt::print("{}", lines);
    if (std::fflush(stdout) != 0) throw std::system_error(errno, std::generic_category(), "stdout");
    fmt::print(stderr, "{}{}\n", table, verdict_line(c));
  }
  return c.fits ? 0 : static_cast<int>(Exit::OutOfMemory);
}

}  // namespace nunchaku::cli
