// nunchaku plan PATH --vram 16G[,24G]: a device map charged for what each device holds at
// run time, printed as a table or exported (json for load/run, accelerate, llama.cpp,
// vllm, deepspeed). Exit 3 when nothing fits even with the CPU (and disk with --disk).
#include <cerrno>
#include <cstdio>
#include <memory>
#include <optional>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/model_source.hpp"
#include "cli/plan_multinode.hpp"
#include "cli/export_dir.hpp"
#include "memory/plan_multinode.hpp"
#include "memory/fsdp.hpp"
#include "memory/plan_fsdp.hpp"
#include "cli/bandwidth.hpp"
#include "cli/commands.hpp"
#include "cli/help.hpp"
#include "cli/json_doc.hpp"
#include "cli/table.hpp"
#include "cli/workload_options.hpp"
#include "core/error.hpp"
#include "cuda/device_info.hpp"
#include "format/open.hpp"
#include "io/atomic_output.hpp"
#include "io/weight_store.hpp"
#include "memory/memory_pictures.hpp"
#include "memory/decode_bound.hpp"
#include "memory/plan.hpp"
#include "memory/plan_accelerate.hpp"
#include "memory/plan_export.hpp"
#include "memory/plan_verdict.hpp"
#include "core/units.hpp"
#include "core/text.hpp"

namespace nunchaku::cli {
namespace {

struct PlanCliOptions {
  std::string path, file, vram, cpu_ram, strategy = "balanced", compat, format = "table", output, offload_exec = "cpu";
  std::string bandwidth;  // --bandwidth gpu=...,pcie=...,host=...,disk=... (decode_bound.hpp's defaults otherwise)
  std::string svg;  // --svg FILE
  bool disk = false, min_vram = false, json = false;
  WorkloadOptions w;
};

// The fixes under a verdict that does not fit (nothing when it fits).
std::string render_fixes(const DevicePlan& p, const std::vector<PlanFix>& fixes) {
  if (p.fits) return "";
  if (fixes.empty()) return "nothing tried makes it fit (--disk, --cpu-ram, --quant, --context, more GPUs)\n";
  std::string out = "to make it fit (each re-planned):\n";
  for (const auto& f : fixes) out += fmt::format("  {}\n      {}\n", f.flags, wrap(f.what + " -> " + f.verdict, output_width(), 6));
  return out;
}

std::string dev_layers(const DeviceCharge& d) {
  if (d.layers == 0 && d.expert_layers > 0) return fmt::format("{} exps", d.expert_layers);
  if (d.layers == 0) return d.modules.empty() ? "-" : fmt::format("{} module{}", d.modules.size(), d.modules.size() == 1 ? "" : "s");
  return fmt::format("{}-{} ({})", d.first_layer, d.last_layer, d.layers);
}

std::string render_table(const DevicePlan& p, const Estimate& e, const std::vector<PlanFix>& fixes, const Bandwidths& bw) {
  const auto& s = e.spec;
  std::string out;
  auto put = [&out](fmt::string_view f, auto&&... args) { fmt::format_to(std::back_inserter(out), fmt::runtime(f), args...); };
  const size_t width = output_width();
  if (s.hidden_size > 0)
    put("model:    {}\n", wrap(fmt::format("{} ({}), {}, {} params; {}, batch {}, context {}", s.architecture.empty() ? "unknown" : s.architecture,
        s.source.empty() ? "unknown" : s.source, plural(uint64_t(s.num_layers), "layer"), format_count(e.parameters), mode_name(e.workload.mode),
        e.workload.batch, e.workload.context), width, 10));
  else  // a module tree without config (estimate_weights.cpp)
    put("model:    {}\n", wrap(fmt::format("unknown (no config.json or GGUF metadata), {}, {} params; {}", plural(e.modules.size(), "module"),
        format_count(e.parameters), mode_name(e.workload.mode)), width, 10));
  put("runtime:  {}\n", wrap(std::string(runtime_name(e.runtime)) + (e.runtime_model.empty() ? "" : " (" + e.runtime_model.front() + ")"),
                             width, 10));
  put("strategy: {}{}\n\n", strategy_name(p.strategy),
      p.offload_exec == OffloadExec::Cpu ? " (offloaded layers run on the CPU)" : " (offloaded layers streamed to cuda:0)");
  // Left out first when the width is short: the budget (total + free), then activations.
  const std::vector<TableColumn> cols = {{"device", true}, {"layers"}, {"weights"}, {"KV", false, 3}, {"activations", false, 2},
                                         {"reserve"}, {"total"}, {"budget", false, 1}, {"free"}};
  std::vector<std::vector<std::string>> rows;
  for (const auto& d : p.devices) {
    const uint64_t reserve = d.logits + d.overheads + d.staging + d.train_states;
    const bool unlimited = d.budget == UINT64_MAX;
    std::string free = unlimited ? "-" : d.fits() ? format_bytes(d.budget - d.total()) : "-" + format_bytes(d.total() - d.budget);
    rows.push_back({d.device.str(), dev_layers(d), format_bytes(d.weights), format_bytes(d.kv_cache), format_bytes(d.activations),
                    format_bytes(reserve), format_bytes(d.total()), unlimited ? "-" : format_bytes(d.budget), free});
  }
  const TableText table = layout_table(cols, rows, width);
  put("{}", table.text);
  if (!table.dropped.empty()) put("{}\n", wrap(dropped_note(table, width, "--format json has them"), width));
  for (const auto& n : e.notes) put("note: {}\n", wrap(n, width, 6));
  put("\n{}\n", wrap(fmt::format("reserve = logits + CUDA context/cuBLAS/allocator overheads + staging / stream slots{}",
                                  e.workload.mode == Mode::Infer ? "" : " + gradients/optimizer states"),
                      width, 10));
  for (const auto& n : p.notes) put("note: {}\n", wrap(n, width, 6));
  put("{}\n", wrap(plan_verdict(p, static_cast<size_t>(s.num_layers), &e), width, 2));
  if (p.fits && e.workload.mode == Mode::Infer && e.spec.num_layers > 0)
    put("{}\n", wrap(decode_line(decode_bound(e, p, e.workload.batch, bw), bw), width, 2));
  put("{}", render_fixes(p, fixes));
  return out;
}

// Exports that the target tool cannot run are refused before any work, with the reason.
void refuse_export(const std::string& format, const Workload& w, bool disk) {
  if ((format == "deepspeed" || format == "fsdp") && w.mode == Mode::Infer)
    throw Error("usage.format", format == "fsdp" ? "--format fsdp writes an accelerate config for FSDP training; it needs --mode "
                                                   "train, lora or qlora"
                                                 : "--format deepspeed writes a DeepSpeed training config (ZeRO stage and offload); "
                                                   "it needs --mode train, lora or qlora",
                {.hint = "for inference: --format accelerate, llama.cpp or vllm"});
  if (format == "vllm" && disk)
    throw Error("usage.format", "--format vllm cannot use --disk: vLLM has no disk tier (what --cpu-offload-gb moves out of the GPU "
                                "stays in host memory)",
                {.hint = "leave --disk out (the plan then checks vLLM's offload against --cpu-ram), or --format llama.cpp, "
                         "which reads what does not fit from disk"});
}

struct TrainingExport {
  std::string text;                                         // stdout: ds_config.json or config.yaml
  std::vector<std::pair<std::string, std::string>> files;  // -o DIR: name -> text
  std::string verdict_line;
  bool fits = false;
};

// --format deepspeed / fsdp: model states sharded over the ranks, not a device map. The
// export's files and its own verdict; `p` gets its fits, shortfall and notes.
TrainingExport shard_export(const std::string& format, const Checkpoint& ck, const ModelLayout& layout, const Workload& w,
                            const PlanRequest& r, const std::string& output, DevicePlan& p) {
  TrainingExport x;
  if (format == "deepspeed") {
    if (r.vram.empty()) throw Error("usage.vram", "--format deepspeed needs --vram");
    auto d = deepspeed_config(ck, layout, w, *std::min_element(r.vram.begin(), r.vram.end()));
    x.text = dump_json(d["config"], 2) + "\n";
    x.fits = p.fits = d["fits"].get<bool>();
    p.shortfall = "no ZeRO stage or offload fits --vram (see the note)";
    p.notes.push_back(fmt::format("DeepSpeed: ZeRO-{} offload {}: {} per GPU ({})", d["zero"].get<int>(), d["offload"].get<std::string>(),
                                  format_bytes(d["per_gpu_total"].get<uint64_t>()), x.fits ? "fits" : "does NOT fit even so"));
    // ZeRO partitions states over the GPUs; the layer placement above is not what DeepSpeed runs.
    x.verdict_line = (x.fits ? fmt::format("fits with ZeRO-{} offload {}", d["zero"].get<int>(), d["offload"].get<std::string>())
                             : "does NOT fit: " + p.shortfall) +
                     "; " + d["why"].get<std::string>();
    x.files = {{"ds_config.json", x.text}};
    if (w.nodes > 1 || is_output_dir(output)) {
      const DeepSpeedLaunch l = deepspeed_launch(w, "ds_config.json", "hostfile");
      x.files.push_back({"hostfile", l.hostfile});
      std::string sh;
      for (const auto& line : l.lines) sh += line + "\n";
      x.files.push_back({"deepspeed_launch.sh", sh});
      if (w.nodes > 1)
        for (const auto& line : l.lines) p.notes.push_back(line);
    }
    return x;
  }
  if (r.vram.empty()) throw Error("usage.vram", "--format fsdp needs --vram");
  const FsdpExport fx = fsdp_accelerate_config(ck, layout, w, *std::min_element(r.vram.begin(), r.vram.end()), "config.yaml");
  x.text = fx.yaml;
  x.fits = p.fits = fx.fits;
  p.shortfall = "neither FSDP sharding nor its CPU offload fits --vram (see the note)";
  p.notes.insert(p.notes.end(), fx.notes.begin(), fx.notes.end());
  x.verdict_line = (x.fits ? fmt::format("fits with FSDP {} shard{}", fsdp_strategy_name(fx.strategy),
                                     fx.offload == Offload::None ? "" : " + CPU offload")
                       : "does NOT fit: " + p.shortfall) + "; " + fx.why;
  x.files = {{"config.yaml", fx.yaml}, {"fsdp_launch.sh", fx.launch}};
  if (w.nodes > 1)
    for (const auto& line : fx.lines) p.notes.push_back(line);
  return x;
}

// The output format (--json is --format json), and the option values checked before any work.
std::string checked_format(const PlanCliOptions& o) {
  if (o.json && o.format != "table" && o.format != "json")
    throw Error("usage.format", fmt::format("--json and --format {} disagree", o.format), {.hint = "--json is --format json"});
  std::string format = o.json ? "json" : o.format;
  static const std::vector<std::string> formats = {"table", "json", "accelerate", "llama.cpp", "vllm", "deepspeed", "fsdp"};
  if (std::find(formats.begin(), formats.end(), format) == formats.end())
    throw Error("usage.format", fmt::format("--format: unknown format '{}'", format),
                {.hint = "table, json, accelerate, llama.cpp, vllm, deepspeed, fsdp"});
  if (!o.compat.empty() && o.compat != "accelerate")
    throw Error("usage.compat", fmt::format("--compat: unknown tool '{}'", o.compat), {.hint = "accelerate"});
  if (o.offload_exec != "cpu" && o.offload_exec != "gpu")
    throw Error("usage.offload_exec", fmt::format("--offload-exec must be cpu or gpu, not '{}'", o.offload_exec));
  return format;
}

// Where the routed experts went and the --min-vram answers, as notes of the plan.
// nunchaku beside a GPU maps each MoE layer's router and routed experts from the file into host
// memory (estimate's moe_weights), apart from the CPU's planned charge: where they outgrow the
// CPU budget left, the kernel reads them from disk again as tokens route to them.
void host_moe_note(DevicePlan& p, const Estimate& e) {
  const auto moe = std::find_if(e.host.begin(), e.host.end(), [](const Component& c) { return c.name == "moe_weights"; });
  const auto cpu = std::find_if(p.devices.begin(), p.devices.end(), [](const DeviceCharge& d) { return d.device.kind == Device::Kind::Cpu; });
  if (moe == e.host.end() || moe->bytes == 0 || cpu == p.devices.end()) return;
  const uint64_t left = cpu->budget > cpu->total() ? cpu->budget - cpu->total() : 0;
  if (moe->bytes <= left) return;
  p.notes.push_back(fmt::format("the routers and routed experts ({}, moe_weights) are mapped from the file into host memory "
                                "beside the CPU's {} planned: with {} of --cpu-ram left, up to {} of them are read from disk "
                                "again as tokens route to them (a slower decode, not an out-of-memory)",
                                format_bytes(moe->bytes), format_bytes(cpu->total()), format_bytes(left), format_bytes(moe->bytes - left)));
}

void placement_notes(DevicePlan& p, const Estimate& e, const PlanRequest& r, const PlanCliOptions& o, const Workload& w,
                     std::optional<uint64_t> minv) {
  if (const auto cpu = cpu_expert_layers(p, e); !cpu.empty() && !r.vram.empty())
    p.notes.push_back(fmt::format("routed experts of {} off the GPUs (attention, norms, router and shared experts of every "
                                  "GPU layer stay on it): layers {}",
                                  plural(cpu.size(), "layer"), format_ranges(cpu)));
  std::vector<int64_t> disk_experts;  // without GPUs: layers in memory whose experts are on disk
  for (size_t i = 0; i < p.expert_device.size() && i < e.modules.size(); ++i)
    if (p.expert_device[i].kind == Device::Kind::Disk && p.module_device[i] != p.expert_device[i]) disk_experts.push_back(e.modules[i].layer);
  if (r.vram.empty() && !disk_experts.empty())
    p.notes.push_back(fmt::format("routed experts of {} on disk, read expert by expert as tokens route to them (the rest of "
                                  "each layer stays in memory): layers {}",
                                  plural(disk_experts.size(), "layer"), format_ranges(disk_experts)));
  host_moe_note(p, e);
  if (minv) p.notes.push_back(fmt::format("min VRAM per GPU for everything on {}: {} ({} B)", plural(std::max<size_t>(1, r.vram.size()), "GPU"),
                                          format_bytes(*minv), *minv));
  else if (o.min_vram) p.notes.push_back("min VRAM: no budget holds every module on the GPUs");
  if (o.min_vram && w.mode == Mode::Infer)
    if (auto m = min_vram_without_experts(e, w.gpus))
      p.notes.push_back(fmt::format("min VRAM per GPU with the routed experts in host memory (every layer's attention, router and "
                                    "shared experts, and the KV cache, on the GPUs): {} ({} B)",
                                    format_bytes(*m), *m));
}

// The picture, then the chosen format to -o (FILE or DIR) or stdout, with the words where
// they do not spoil a machine-readable stdout.
void emit_plan(const PlanCliOptions& o, const std::string& format, const std::string& text,
               const std::vector<std::pair<std::string, std::string>>& files, const std::string& verdict_line, const DevicePlan& p,
               const Estimate& e, const std::vector<PlanFix>& fixes, const Bandwidths& bw) {
  if (!o.svg.empty()) {
    write_file_atomically(o.svg, bar_chart_svg(plan_chart(p, e, plan_verdict(p, static_cast<size_t>(e.spec.num_layers), &e))));
    fmt::print(stderr, "wrote {} (svg)\n", o.svg);
  }
  if (is_output_dir(o.output)) {  // -o DIR: the export's files
    if (files.empty())
      throw Error("usage.output", fmt::format("-o {}: a directory takes the exports of several files (--format deepspeed or fsdp, "
                                              "or --format vllm with --nodes); --format {} writes one file", o.output, format),
                  {.hint = "give -o FILE"});
    // DeepSpeed partitions states over the ranks: its notes and verdict, not a layer placement.
    for (const auto& n : p.notes) fmt::print("note: {}\n", wrap(n, output_width(), 6));
    fmt::print("{}\n", verdict_line);
    for (const auto& f : write_export_files(o.output, files)) fmt::print("wrote {}\n", f);
  } else if (!o.output.empty() && o.output != "-") {  // "-o -" is stdout, as no -o
    // The file gets the chosen format; stdout the table (or, for the table itself, where it went).
    write_file_atomically(o.output, text);
    if (format != "table") fmt::print("{}", render_table(p, e, fixes, bw));
    else fmt::print("{}\n", plan_verdict(p, static_cast<size_t>(e.spec.num_layers), &e));
    fmt::print("wrote {} ({})\n", o.output, format);
  } else if (format == "table" || format == "json") {
    fmt::print("{}", text);
  } else {
    // An export on stdout stays machine-readable: the words go to stderr.
    fmt::print("{}", text);
    // Flushed before the words so they follow it; a refused write is main's "cannot write stdout".
    if (std::fflush(stdout) != 0) throw std::system_error(errno, std::generic_category(), "stdout");
    for (const auto& n : p.notes) fmt::print(stderr, "note: {}\n", n);
    fmt::print(stderr, "{}\n{}", verdict_line.empty() ? plan_verdict(p, static_cast<size_t>(e.spec.num_layers), &e) : verdict_line,
               render_fixes(p, fixes));
  }
}

// No module of the plan on a GPU, and the estimate kept a mixture of experts in host memory
// beside one (nunchaku's split: estimate's moe_weights host line).
bool moe_split_without_gpu(const DevicePlan& p, const Estimate& e) {
  const bool on_gpu = std::any_of(p.module_device.begin(), p.module_device.end(),
                                  [](const Device& d) { return d.kind == Device::Kind::Cuda; });
  return !on_gpu && std::any_of(e.host.begin(), e.host.end(), [](const Component& c) { return c.name == "moe_weights"; });
}

// The plan of `e` (the estimate of `w`) on `r`, with the plan's strategy. GPUs too small for
// any module: the run is the CPU engine's, which runs the mixtures of experts it would have run
// beside a GPU in the layers themselves, so `w` and `e` are made again as without a GPU and the
// host is charged them.
DevicePlan plan_moe_aware(const Checkpoint& ck, const ModelLayout& layout, const EstimateBasis& basis, Workload& w, Estimate& e,
                          const PlanRequest& r, AccelerateMap* amap) {
  const auto make = [&] { return r.strategy == Strategy::Accelerate ? plan_accelerate(ck, layout, e, r, amap) : make_plan(e, r); };
  DevicePlan p = make();
  if (w.no_gpu_placement || !moe_split_without_gpu(p, e)) return p;
  w.no_gpu_placement = true;
  e = estimate(ck, layout, w, basis);
  return make();
}

int run_plan(const PlanCliOptions& o) {
  const std::string format = checked_format(o);
  const bool training_export = format == "deepspeed" || format == "fsdp";  // states sharded over ranks, not a device map

  const Bandwidths bw = parse_bandwidths(o.bandwidth);
  PlanRequest r;
  std::vector<std::string> notes;
  r.vram = parse_vram_for_plan(o.vram, notes);
  match_gpus(r.vram, o.w.gpus);
  r.strategy = o.compat == "accelerate" ? Strategy::Accelerate : parse_strategy(o.strategy);
  r.offload_exec = o.offload_exec == "gpu" ? OffloadExec::Gpu : OffloadExec::Cpu;
  r.allow_disk = o.disk;
  r.split_experts = true;  // MoE: routed experts leave the GPUs before attention does
  r.cpu_ram = o.cpu_ram.empty() ? free_bytes_on(Device{Device::Kind::Cpu, 0}) : parse_size_or_throw(o.cpu_ram, "--cpu-ram");
  if (o.cpu_ram.empty()) notes.push_back(fmt::format("--cpu-ram defaulted to the host's available memory, {}", format_bytes(r.cpu_ram)));

  if (is_all_runtimes(o.w)) throw Error("usage.runtime", "plan takes one --runtime (estimate --runtime all compares them)");
  Workload w = to_workload(o.w, std::max<size_t>(1, r.vram.size()));
  refuse_export(format, w, o.disk);
  // An export is planned with the runtime it exports to.
  const std::optional<Runtime> exported = format == "llama.cpp" ? std::optional(Runtime::LlamaCpp)
                                          : format == "vllm"      ? std::optional(Runtime::Vllm)
                                          : format == "deepspeed" ? std::optional(Runtime::DeepSpeed)
                                          : format == "fsdp"      ? std::optional(Runtime::Fsdp)
                                          : format == "accelerate" && w.mode == Mode::Infer ? std::optional(Runtime::Transformers)
                                                                                            : std::nullopt;
  if (exported) {
    if (w.runtime && *w.runtime != *exported)
      throw Error("usage.runtime", fmt::format("--format {} plans for {}, not --runtime {}", format, runtime_name(*exported), runtime_name(*w.runtime)));
    w.runtime = exported;
  }
  Checkpoint ck = open_model(o.path, o.file);
  note_input_path(o.path);  // -o must not name the checkpoint or a file beside it
  for (const auto& f : ck.files) note_input_path(f.path);
  if (!o.output.empty()) check_not_input(o.output);  // refused before any work
  if (!o.svg.empty()) check_not_input(o.svg);
  if (format == "accelerate" && ck.format == Format::GGUF)
    throw Error("usage.format",
                fmt::format("--format accelerate: {} is a GGUF file, and accelerate's device_map places the modules of a "
                            "transformers checkpoint: it cannot load a GGUF by a map of GGUF tensor names (blk.N)",
                            o.path),
                {.hint = "--format llama.cpp runs this file; for accelerate, convert it first (`nunchaku convert MODEL.gguf DIR "
                         "--names hf`) and plan DIR"});
  ModelLayout layout = describe_model(ck);
  // A llama.cpp / vLLM export runs at most the model's context: plan for what it runs.
  if (exported && (*exported == Runtime::LlamaCpp || *exported == Runtime::Vllm) && layout.spec && w.context > 0)
    w.context = export_context(*layout.spec, w.context, *exported, notes);
  if (w.nodes > 1 && !training_export)  // spans machines: no one-machine device map
    return run_plan_multinode({format, o.output, o.path, r.vram.empty() ? 0 : *std::min_element(r.vram.begin(), r.vram.end()), notes},
                              ck, layout, w);
  const EstimateBasis basis = estimate_basis(ck, layout);
  w.no_gpu_placement = r.vram.empty() && !o.min_vram;  // no --vram, or --vram 0
  Estimate e = estimate(ck, layout, w, basis);

  std::optional<uint64_t> minv;
  if (o.min_vram) {
    const int gpus = w.gpus;
    minv = min_vram(e, gpus, r.offload_exec);
    if (r.vram.empty() && minv) r.vram.assign(static_cast<size_t>(gpus), *minv);
  }
  if (r.vram.empty() && o.vram.empty() && !training_export)
    notes.push_back("no --vram: planning for the CPU alone (give --vram 16G[,24G] or --vram auto)");

  if (e.usable_fraction < 1.0 && !r.vram.empty())  // make_plan plans within that share
    notes.push_back(fmt::format("{} uses {:.0f}% of each GPU plus the CUDA context it makes first: planned within {} of the {}",
                                runtime_name(e.runtime), e.usable_fraction * 100, format_bytes(verdict(e, r.vram.front()).budget),
                                format_bytes(r.vram.front())));
  AccelerateMap amap;
  DevicePlan p = plan_moe_aware(ck, layout, basis, w, e, r, &amap);
  p.notes.insert(p.notes.begin(), notes.begin(), notes.end());
  placement_notes(p, e, r, o, w, minv);

  std::vector<PlanFix> fixes;
  if (!p.fits && !training_export) {
    Workload planned = w;
    planned.context = e.workload.context;
    auto replan = [&](Workload w2, const PlanRequest& r2) {
      AccelerateMap m;
      w2.no_gpu_placement = r2.vram.empty();  // as the plan above: a fix may add or drop GPUs
      Estimate e2 = estimate(ck, layout, w2, basis);
      return plan_moe_aware(ck, layout, basis, w2, e2, r2, &m);
    };
    fixes = plan_fixes({planned, r, e.workload.context, static_cast<size_t>(e.spec.num_layers), !o.cpu_ram.empty(), &e}, replan);
    if (format == "vllm")  // refused with it (refuse_export)
      std::erase_if(fixes, [](const PlanFix& f) { return f.flags.find("--disk") != std::string::npos; });
  }

  std::string text;
  std::vector<std::pair<std::string, std::string>> files;  // -o DIR: name -> text
  bool fits = p.fits;
  std::string verdict_line;  // the export's own verdict when the device map's says nothing about it
  if (format == "table") {
    text = render_table(p, e, fixes, bw);
  } else if (format == "json") {
    auto j = to_json(p, e);
    j["path"] = ck.path;
    j["verdict"] = verdict_json(p, static_cast<size_t>(e.spec.num_layers), &e);
    j["fixes"] = to_json(fixes);
    j["min_vram_bytes"] = minv ? nlohmann::json(*minv) : nlohmann::json(nullptr);
    j["decode_bound"] = nlohmann::json(nullptr);
    if (p.fits && e.workload.mode == Mode::Infer && e.spec.num_layers > 0)
      j["decode_bound"] = decode_json(decode_bound(e, p, e.workload.batch, bw), bw);
    text = dump_json(stamp(j, "plan"), 2) + "\n";
  } else if (format == "accelerate") {
    auto j = r.strategy == Strategy::Accelerate ? accelerate_device_map(amap) : accelerate_device_map(p, e, layout);
    text = dump_json(j, 2) + "\n";
  } else if (format == "llama.cpp") {
    auto a = llama_cpp_args(p, e);
    text = a.command + "\n";
    p.notes.insert(p.notes.end(), a.notes.begin(), a.notes.end());
  } else if (format == "vllm") {
    std::vector<uint64_t> totals;
    std::string why;
    for (const auto& d : cuda::list_devices(&why)) totals.push_back(d.total_bytes);
    auto v = vllm_args(e, r.vram, totals);
    // vLLM keeps --cpu-offload-gb per GPU in host memory (pinned): more than the host has cannot start.
    const uint64_t offload = v.cpu_offload_bytes * uint64_t(v.tensor_parallel * v.pipeline_parallel);
    if (offload > r.cpu_ram)
      throw Error("plan.vllm_offload",
                  fmt::format("--format vllm: vLLM would need --cpu-offload-gb {} on each of {}, {} of host memory in all, "
                              "more than {} {} (vLLM has no disk tier)",
                              v.cpu_offload_gb, plural(uint64_t(v.tensor_parallel * v.pipeline_parallel), "GPU"), format_bytes(offload),
                              o.cpu_ram.empty() ? "the host's available" : "--cpu-ram", format_bytes(r.cpu_ram)),
                  {.hint = "more or larger GPUs (--vram), --quant, a shorter --context or smaller --batch; or --format llama.cpp, "
                           "which reads what does not fit from disk"},
                  Exit::OutOfMemory);
    text = v.command + "\n";
    p.notes.insert(p.notes.end(), v.notes.begin(), v.notes.end());
  } else if (format == "deepspeed" || format == "fsdp") {
    TrainingExport x = shard_export(format, ck, layout, w, r, o.output, p);
    if (format == "deepspeed" && std::any_of(e.modules.begin(), e.modules.end(), [](const ModuleCost& m) { return m.expert_bytes > 0; }))
      p.notes.push_back("DeepSpeed cannot keep the routed experts apart: ZeRO partitions every parameter over the ranks, and "
                        "offload_param (ZeRO-3) moves all of them, with no selection by name (deepspeed/runtime/zero/"
                        "offload_config.py); the expert split of an inference plan is exported by --format llama.cpp, vllm "
                        "or accelerate");
    text = std::move(x.text);
    files = std::move(x.files);
    verdict_line = std::move(x.verdict_line);
    fits = x.fits;
  }

  emit_plan(o, format, text, files, verdict_line, p, e, fixes, bw);
  return fits ? 0 : static_cast<int>(Exit::OutOfMemory);
}

}  // namespace

void add_plan(CLI::App& app, Action& action) {
  auto o = std::make_shared<PlanCliOptions>();
  auto* cmd = app.add_subcommand("plan", "Device map over GPUs, CPU and disk charged for what each device holds at run time");
  cmd->footer(
      "Each GPU is charged its weights, its layers' KV cache, activations, logits where the head is,\n"
      "the CUDA context/cuBLAS/allocator overheads, and staging for streamed layers (docs/plan.md).\n"
      "Layers are never split, except a MoE layer's routed experts, which leave the GPUs (and, on the CPU\n"
      "engine, go to disk) before attention does: --format vllm offloads them with --cpu-offload-params\n"
      "experts, llama.cpp with --n-cpu-moe or -ot. --vram 0 plans without GPUs.\n"
      "Exit codes: 0 fits, 2 bad input or usage, 3 nothing fits even with the CPU (and disk with --disk);\n"
      "then the fixes that do fit are listed, each re-planned.\n"
      "Examples:\n"
      "  nunchaku plan model/ --vram 16G --context 8192 --batch 4\n"
      "  nunchaku plan model/ --vram 24G,24G --format accelerate -o device_map.json\n"
      "  nunchaku plan model/ --vram 8G --format llama.cpp\n"
      "  nunchaku plan model/ --min-vram --gpus 2\n"
      "  nunchaku plan model/ --format vllm --nodes 2 --gpus 8 --vram 24G -o launch/\n"
      "  nunchaku plan model/ --mode train --format deepspeed --nodes 2 --gpus 8 --vram 80G -o ds/\n"
      "  nunchaku plan model/ --mode train --format fsdp --nodes 2 --gpus 8 --vram 80G -o fsdp/");
  cmd->add_option("PATH", o->path, "Checkpoint file or directory, or a Hub id (org/name[@rev][:QUANT])")->required();
  add_file_option(cmd, o->file);
  cmd->add_option("--vram", o->vram, "Memory per GPU: 16G, 16G,24G, or auto (free memory of the CUDA devices)")->group(kHardware);
  cmd->add_option("--cpu-ram", o->cpu_ram, "Host memory budget (default: the host's available memory)")->group(kHardware);
  cmd->add_flag("--disk", o->disk, "Allow modules to stay on disk (read-only mmap, read on use)")->group(kHardware);
  cmd->add_option("--strategy", o->strategy, "balanced (most layers on GPUs, then even load) | sequential (fill GPUs in order)")
      ->capture_default_str()->group(kPlanning);
  cmd->add_option("--compat", o->compat, "accelerate: reproduce accelerate's infer_auto_device_map exactly")->group(kPlanning);
  cmd->add_option("--offload-exec", o->offload_exec, "Where offloaded layers run: cpu | gpu (streamed through cuda:0)")->capture_default_str()->group(kPlanning);
  cmd->add_option("--format", o->format, "table | json | accelerate | llama.cpp | vllm | deepspeed | fsdp (accelerate "
                  "config.yaml for FSDP training)")->capture_default_str()->group(kOutput);
  cmd->add_flag("--json", o->json, "Same as --format json")->group(kOutput);
  cmd->add_option("-o,--output", o->output, "Write the --format output to FILE (an export's table goes to stdout); a DIR (existing, "
                  "or ending in /) takes the files of deepspeed (ds_config.json, hostfile, deepspeed_launch.sh), fsdp (config.yaml, "
                  "fsdp_launch.sh) and of vllm over --nodes")
      ->group(kOutput);
  cmd->add_option("--svg", o->svg, "Also draw the plan as an SVG picture (a stacked bar per device: which layers, KV, reserves, budget) to FILE")
      ->group(kOutput);
  add_bandwidth_option(cmd, o->bandwidth);
  cmd->add_flag("--min-vram", o->min_vram, "Also find the smallest memory per GPU that holds everything on the GPUs")->group(kPlanning);
  add_workload_options(cmd, o->w);
  finish_help(cmd);
  cmd->callback([o, &action] { action = [o] { return run_plan(*o); }; });
}

}  // namespace nunchaku::cli

