// nunchaku estimate PATH: the memory a workload needs per GPU, component by
// component, a verdict against --vram (exit 3 on predicted OOM) and what would
// make it fit. Thin adapter: options → Workload → estimate() → print.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>

#include <map>

#include <fmt/format.h>

#include "cli/model_source.hpp"
#include "cli/commands.hpp"
#include "cli/estimate_pipeline.hpp"
#include "cli/help.hpp"
#include "cli/bandwidth.hpp"
#include "cli/cpu_speed.hpp"
#include "cli/json_doc.hpp"
#include "cli/run_placement.hpp"
#include "cli/workload_options.hpp"
#include "core/error.hpp"
#include "cuda/device_info.hpp"
#include "format/open.hpp"
#include "io/atomic_output.hpp"
#include "io/weight_store.hpp"
#include "memory/memory_pictures.hpp"
#include "memory/estimate.hpp"
#include "memory/fsdp.hpp"
#include "memory/multinode.hpp"
#include "memory/plan.hpp"
#include "memory/plan_verdict.hpp"
#include "memory/quant.hpp"
#include "core/units.hpp"
#include "model/model.hpp"
#include "model/pipeline.hpp"
#include "core/text.hpp"

namespace nunchaku::cli {
namespace {

struct EstimateOptions {
  std::string path, file, vram, svg, cpu_ram;  // svg: --svg FILE; cpu_ram: host budget of the offload answer
  WorkloadOptions w;
  double margin = 0.05;
  bool json = false, explain = false;
  bool batch_given = false;  // --batch typed: run's default (auto) is not what is asked
  std::string bandwidth;     // --bandwidth: the decode bound's read rates
  bool no_probe = false;     // --no-probe: no measured CPU decode speed
};

// The measured decode speed (cpu_speed.hpp) where the answer is nunchaku's engine on this
// CPU, for inference.
std::optional<engine::SpeedProbe> cpu_speed(const EstimateOptions& o, const Estimate& e, const Checkpoint& ck,
                                            const ModelLayout& layout) {
  const Workload& w = e.workload;
  if (o.no_probe || e.target != Target::Cpu || e.runtime != Runtime::Nunchaku || w.mode != Mode::Infer || w.nodes > 1 ||
      !layout.spec)
    return std::nullopt;
  const std::vector<engine::ProbeClass> classes = decode_classes(ck, layout, w.batch);
  if (classes.empty()) return std::nullopt;
  try {
    return engine::probe_decode(classes, w.batch, w.threads);
  } catch (const Error& err) {  // a memory limit (ulimit -v, a small cgroup): the estimate stands without it
    if (err.code() != "engine.out_of_memory") throw;
    fmt::print(stderr, "note: the decode speed probe was skipped: {}\n", err.what());
    return std::nullopt;
  }
}

// The decode bound of everything on the estimate's device (the CPU, or one GPU when it fits
// there), for inference: nullopt otherwise (plan gives it for an offloaded placement).
std::optional<DecodeBound> device_decode_bound(const Estimate& e, const std::optional<Verdict>& v, const Bandwidths& bw) {
  if (e.workload.mode != Mode::Infer || e.spec.num_layers <= 0 || e.workload.gpus > 1 || e.workload.nodes > 1) return std::nullopt;
  const bool cpu = e.target == Target::Cpu;
  if (!cpu && v && !v->fits) return std::nullopt;
  DevicePlan p;
  p.module_device.assign(e.modules.size(), cpu ? Device{Device::Kind::Cpu, 0} : Device{Device::Kind::Cuda, 0});
  p.fits = true;
  return decode_bound(e, p, e.workload.batch, bw);
}

// What `nunchaku run` takes without --batch-size (auto): the same search run does, over this
// estimate's budget (--vram on a GPU; --cpu-ram, else the host's available memory, on the CPU).
struct RunBatch {
  int sequences = 1;
  std::string why;
};
std::optional<RunBatch> run_default_batch(const EstimateOptions& o, const Estimate& e, const Checkpoint& ck, const ModelLayout& layout) {
  const Workload& w = e.workload;
  if (o.batch_given || e.runtime != Runtime::Nunchaku || w.mode != Mode::Infer || w.nodes > 1 || !layout.spec) return std::nullopt;
  const bool cpu = e.target == Target::Cpu;
  if (!cpu && (o.vram.empty() || o.vram == "auto")) return std::nullopt;  // run fills the GPU's free memory: unknown here
  RunPlacementOptions r;
  r.device = cpu ? "cpu" : "cuda:0";
  if (!cpu) r.vram = o.vram;
  r.cpu_ram = o.cpu_ram;
  r.batch_size = 0;
  r.threads = w.threads;
  r.context = w.context;
  r.prefill_chunk = o.w.prefill_chunk;
  r.kv_dtype = e.kv_dtype;
  RunBatch b;
  try {
    b.sequences = auto_batch_size(r, ck, layout, b.why);
  } catch (const Error&) {  // run would refuse these flags for its own reasons; the estimate stands
    return std::nullopt;
  }
  return b;
}

std::string run_batch_line(const RunBatch& b) {
  return fmt::format("nunchaku run's default, --batch-size auto: {} sequence{}, {}; this estimate is for --batch 1, "
                     "--batch {} gives that run's memory",
                     b.sequences, b.sequences == 1 ? "" : "s", b.why, b.sequences);
}

std::string per_device(const Estimate& e) { return e.target == Target::Cpu ? "CPU" : "GPU"; }

// "label:     text", the text wrapped to the output width under itself.
void print_field(std::string_view label, const std::string& text) {
  fmt::print("{:<11}{}\n", label, wrap(text, output_width(), 11));
}

// "; layers: 40 sliding (window 1024), 8 full" when layers differ in what they cache.
std::string layer_pattern(const ModelSpec& s) {
  if (s.layer_attn.empty()) return "";
  std::map<std::pair<AttnKind, int64_t>, int64_t> count;
  for (size_t i = 0; i < s.layer_attn.size(); ++i)
    ++count[{s.layer_attn[i], i < s.layer_windows.size() ? s.layer_windows[i] : 0}];
  if (count.size() == 1 && count.begin()->first.first == AttnKind::Full) return "";
  std::vector<std::string> parts;
  for (const auto& [k, n] : count)
    parts.push_back(k.second > 0 ? fmt::format("{} {} ({} {})", n, attn_kind_name(k.first),
                                               k.first == AttnKind::Chunked ? "chunk" : "window", k.second)
                                 : fmt::format("{} {}", n, attn_kind_name(k.first)));
  return fmt::format("; layers: {}", fmt::join(parts, ", "));
}

void print_table(const Estimate& e, bool explain) {
  const auto& s = e.spec;
  const auto& w = e.workload;
  const bool described = s.hidden_size > 0;  // else a module tree without config (estimate_weights.cpp)
  if (described)
    print_field("model:", fmt::format("{} ({}), {}, hidden {}, {} ({} KV) × {}, vocab {}, {} params",
                                      s.architecture.empty() ? "unknown" : s.architecture, s.source.empty() ? "unknown" : s.source,
                                      plural(uint64_t(s.num_layers), "layer"), s.hidden_size, plural(uint64_t(s.num_heads), "head"), s.num_kv_heads, s.head_dim, s.vocab_size,
                                      format_count(e.parameters)) +
                                  (e.active_parameters != e.parameters ? fmt::format(" ({} active per token, {} of weights read per decoded token)",
                                                                                     format_count(e.active_parameters), format_bytes(e.weight_bytes_per_token))
                                                                       : "") +
                                  (s.wrapper.empty() ? "" : fmt::format(", language model of a {} checkpoint", s.wrapper)));
  else
    print_field("model:", fmt::format("unknown (no config.json or GGUF metadata), {}, {} params",
                                      plural(e.modules.size(), "module"), format_count(e.parameters)));
  print_field("runtime:", fmt::format("{} on {}", runtime_name(e.runtime), e.target == Target::Cpu ? "the CPU" : "CUDA GPUs"));
  for (const auto& m : e.runtime_model) print_field("", m);
  const int64_t image_ctx = w.images_in_context ? w.images * w.image_tokens : 0;
  std::string wl = fmt::format("{}, batch {}, context {}{}{}, weights {}{}, compute {}, KV {}", mode_name(w.mode), w.batch, w.context,
             image_ctx > 0 ? fmt::format(" ({} text + {} x {} image)", w.context - image_ctx, w.images, w.image_tokens) : "",
             e.context_defaulted ? fmt::format(" (default{}: min(model max {}, 4096))", image_ctx > 0 ? " text" : "", s.max_context) : "",
             dtype_name(e.weight_dtype), w.quant.scheme != QuantScheme::None ? " as " + w.quant.label() : "",
             dtype_name(e.compute_dtype), dtype_name(e.kv_dtype));
  if (!described) wl = fmt::format("{}, weights {}", mode_name(w.mode), dtype_name(e.weight_dtype));
  if (w.mode != Mode::Infer && e.runtime == Runtime::Fsdp)
    wl += fmt::format(", {} ({} trainable), {}, CPU offload {}", optimizer_name(w.optimizer), format_count(e.trainable_parameters),
                      fsdp_layout_text(w), w.offload == Offload::None ? "off" : "on");
  else if (w.mode != Mode::Infer)
    wl += fmt::format(", {} ({} trainable), ZeRO-{} on {}, offload {}", optimizer_name(w.optimizer),
                      format_count(e.trainable_parameters), w.zero, ranks_text(w), offload_name(w.offload));
  else if (w.ranks() > 1)
    wl += fmt::format(", split over {}", ranks_text(w));
  print_field("workload:", wl);
  if (described) print_field("KV cache:", fmt::format("{} per token (all layers, batch 1){}", format_bytes(e.kv_bytes_per_token), layer_pattern(s)));
  for (const auto& g : e.guessed) fmt::print("guessed:   {}\n", g);
  fmt::print("\n");
  // Formulas behind --explain (always in the JSON), each under its row.
  auto row = [&](const std::string& name, uint64_t bytes, const std::string& formula) {
    fmt::print("{:<24} {:>12}\n", name, format_bytes(bytes));
    if (explain && !formula.empty()) fmt::print("    {}\n", wrap("= " + formula, output_width(), 6));
  };
  fmt::print("{:<24} {:>12}\n", fmt::format("component (per {})", per_device(e)), "bytes");
  for (const auto& c : e.gpu) row(c.name, c.bytes, c.formula);
  fmt::print("{:<24} {:>12}  ({} B)\n", fmt::format("total per {}", per_device(e)), format_bytes(e.per_gpu_total), e.per_gpu_total);
  const char* host_of = w.nodes > 1 ? " (CPU per node)" : " (CPU)";
  for (const auto& c : e.host) row(c.name + host_of, c.bytes, c.formula);
  if (w.nodes > 1)
    fmt::print("{:<24} {:>12}  ({} GPUs × {}{})\n", "per node (GPUs)", format_bytes(e.per_gpu_total * uint64_t(w.gpus)), w.gpus,
               format_bytes(e.per_gpu_total), e.host_total > 0 ? fmt::format("; host {}", format_bytes(e.host_total)) : "");
  if (!e.network.empty()) fmt::print("{:<24} {:>12}\n", "per step, across nodes", "bytes");
  for (const auto& c : e.network) row(c.name, c.bytes, c.formula);
  if (!explain) fmt::print("(--explain shows how each row is computed)\n");
  for (const auto& n : e.notes) fmt::print("note: {}\n", wrap(n, output_width(), 6));
}

// --runtime all: one column per runtime, one row per component.
void print_columns(const std::vector<Estimate>& es, const std::vector<std::optional<Verdict>>& vs) {
  std::vector<std::string> rows;
  for (const auto& e : es)
    for (const auto& c : e.gpu)
      if (std::find(rows.begin(), rows.end(), c.name) == rows.end()) rows.push_back(c.name);
  const auto& w = es.front().workload;
  fmt::print("model: {}, {} params; {}, batch {}, context {}, on {}\n\n", es.front().spec.architecture, format_count(es.front().parameters),
             mode_name(w.mode), w.batch, w.context, es.front().target == Target::Cpu ? "the CPU" : "CUDA GPUs");
  fmt::print("{:<18}", fmt::format("per {}", per_device(es.front())));
  for (const auto& e : es) fmt::print(" {:>13}", runtime_name(e.runtime));
  fmt::print("\n");
  for (const auto& r : rows) {
    fmt::print("{:<18}", r);
    for (const auto& e : es) {
      const bool has = std::any_of(e.gpu.begin(), e.gpu.end(), [&](const Component& c) { return c.name == r; });
      fmt::print(" {:>13}", has ? format_bytes(e.component(r)) : "-");
    }
    fmt::print("\n");
  }
  fmt::print("{:<18}", "total");
  for (const auto& e : es) fmt::print(" {:>13}", format_bytes(e.per_gpu_total));
  fmt::print("\n");
  if (vs.front()) {
    fmt::print("{:<18}", fmt::format("vram {}", format_bytes(vs.front()->vram)));
    for (const auto& v : vs) fmt::print(" {:>13}", v->fits ? "fits" : "OOM");
    fmt::print("\n{:<18}", "headroom");
    for (const auto& v : vs) fmt::print(" {:>13}", (v->fits ? "" : "-") + format_bytes(v->margin));
    fmt::print("\n");
  }
  for (const auto& e : es) {
    fmt::print("\n{}:\n", runtime_name(e.runtime));
    for (const auto& m : e.runtime_model) fmt::print("  {}\n", wrap(m, output_width(), 2));
  }
  for (const auto& n : es.front().notes) fmt::print("note: {}\n", wrap(n, output_width(), 6));
}

// The weights as they are fit nowhere with offload: the runtime's 8-bit, then 4-bit weights,
// with plan's offload.
std::optional<OffloadAnswer> quantized_offload(const Checkpoint& ck, const ModelLayout& layout, const EstimateBasis& basis,
                                               const Workload& w, const std::vector<uint64_t>& vram, uint64_t cpu_ram) {
  for (const QuantWhatIf& q : quant_whatifs(w)) {
    Workload wq = w;
    wq.quant = q.spec;
    if (auto a = offload_answer(estimate(ck, layout, wq, basis), vram, cpu_ram)) {
      a->flags = q.flags;
      a->what = q.what;
      return a;
    }
  }
  return std::nullopt;
}

// The partial-offload line: plan's verdict for the same workload (or with the weights
// quantized, named) and its cost per token.
std::string offload_line(const OffloadAnswer& a, const std::string& path) {
  return fmt::format("{}{} (`nunchaku plan {}{}` with the same workload and budget flags); host memory holds {} of the {} of "
                     "weights ({:.1f}%), read from there for every token",
                     a.what.empty() ? "" : "with " + a.what + ": ", a.verdict, path, a.flags.empty() ? "" : " " + a.flags,
                     format_bytes(a.off_gpu_weights), format_bytes(a.weights),
                     a.weights ? 100.0 * double(a.off_gpu_weights) / double(a.weights) : 0.0);
}

void print_suggestions(const Verdict& v, const std::vector<Suggestion>& sugg, double margin,
                       const std::optional<OffloadAnswer>& off, const std::string& path) {
  fmt::print("\n{}\n", wrap(fmt::format("vram {}: {}{}", format_bytes(v.vram), v.text, off ? " with everything on the GPU" : ""),
                             output_width(), 2));
  if (v.fits) return;
  if (off) fmt::print("{}\n", wrap(offload_line(*off, path), output_width(), 2));
  const char* alone = off ? " on the GPU alone" : "";
  if (sugg.empty()) fmt::print("{}\n", wrap(fmt::format("nothing tried makes it fit{} with {:.0f}% of the budget to spare", alone, margin * 100), output_width(), 2));
  else fmt::print("{}\n", wrap(fmt::format("to make it fit{} (combinations, cheapest first, each re-estimated, >= {:.0f}% of the budget "
                                           "to spare):", alone, margin * 100), output_width(), 2));
  for (const auto& s : sugg)
    fmt::print("  {}\n      {}\n", s.flags,
               wrap(fmt::format("{} -> {} per device, {} headroom", s.what, format_bytes(s.per_gpu_total), format_bytes(s.headroom)),
                    output_width(), 6));
}

nlohmann::json offload_json(const OffloadAnswer& a) {
  return {{"subcommand", "plan"}, {"flags", a.flags},
          {"what", fmt::format("{}partial offload: {} of the weights in host memory ({:.1f}%), read from there for every token",
                               a.what.empty() ? "" : a.what + " + ", format_bytes(a.off_gpu_weights),
                               a.weights ? 100.0 * double(a.off_gpu_weights) / double(a.weights) : 0.0)},
          {"cost", a.what.empty() ? 2 : 5},  // + quantized weights' quality (3)
          {"weights_off_gpu_bytes", a.off_gpu_weights},
          {"verdict", {{"fits", true}, {"status", kFitsWithOffload}, {"text", a.verdict}}}};
}

// Without --runtime: one line per runtime that models the mode (total, and the verdict with
// --vram), so the answer for the engine a user runs is there without asking.
void print_other_runtimes(const Checkpoint& ck, const ModelLayout& layout, const Workload& w, const EstimateBasis& basis,
                          const std::vector<uint64_t>& vram, Runtime shown) {
  std::vector<std::string> lines;
  for (Runtime r : runtimes_for(w.mode)) {
    if (r == Runtime::Fsdp && w.target != Target::Cuda) continue;  // as --runtime all
    Workload x = w;
    x.runtime = r;
    try {
      const Estimate e = estimate(ck, layout, x, basis);
      std::string line = fmt::format("{:<13}{:>11}", runtime_name(r), format_bytes(e.per_gpu_total));
      if (!vram.empty()) line += "  " + verdict(e, *std::min_element(vram.begin(), vram.end())).text;
      if (r == shown) line += " (above)";
      lines.push_back(line);
    } catch (const Error&) {  // a runtime that refuses this workload (a flag it lacks): left out
    }
  }
  if (lines.size() < 2) return;
  fmt::print("\n{}\n", wrap(fmt::format("by runtime ({}; --runtime NAME for its table, --runtime all side by side):",
                                       w.target == Target::Cuda ? "per GPU" : "the process"), output_width(), 2));
  for (const auto& l : lines) fmt::print("  {}\n", wrap(l, output_width(), 4));
}

void warn(const Estimate& e) {
  for (const auto& n : e.notes)
    if (n.rfind("warning: ", 0) == 0) fmt::print(stderr, "{}\n", n);
}

int run(const EstimateOptions& o) {
  if (!(o.margin >= 0 && o.margin < 1)) throw Error("usage.margin", "--margin must be in [0, 1): a fraction of the budget");
  auto vram = parse_vram(o.vram);
  // Host memory for the partial-offload answer, as plan takes it.
  const uint64_t cpu_ram = o.cpu_ram.empty() ? free_bytes_on(Device{Device::Kind::Cpu, 0}) : parse_size_or_throw(o.cpu_ram, "--cpu-ram");
  match_gpus(vram, o.w.gpus);
  Workload w = to_workload(o.w, vram.size());
  if (auto pipeline = read_pipeline(o.path)) {  // a diffusers pipeline folder: its parts, not one model
    if (o.w.runtime == "all" || o.explain || !o.svg.empty())
      throw Error("usage.pipeline", "a diffusers pipeline is estimated for PyTorch (diffusers), without --runtime all, "
                  "--explain or --svg", {.hint = "estimate one part: nunchaku estimate " + o.path + "/transformer"});
    if (w.mode != Mode::Infer) throw Error("usage.pipeline", "a diffusers pipeline is estimated for inference", {.hint = "leave --mode out"});
    return estimate_pipeline_command(*pipeline, w, vram, o.json, o.path);
  }
  Checkpoint ck = open_model(o.path, o.file);
  note_input_path(o.path);  // --svg must not name the checkpoint or a file beside it
  for (const auto& f : ck.files) note_input_path(f.path);
  if (!o.svg.empty()) check_not_input(o.svg);
  ModelLayout layout = describe_model(ck);
  std::vector<Workload> ws;
  if (is_all_runtimes(o.w) && layout.spec) {
    for (Runtime r : runtimes_for(w.mode))
      if (r != Runtime::Fsdp || w.target == Target::Cuda) ws.push_back(w), ws.back().runtime = r;  // FSDP: GPUs only
  } else if (is_all_runtimes(o.w))  // a module tree without config: PyTorch is the one runtime that loads it
    ws.push_back(w), ws.back().runtime = Runtime::Transformers;
  else
    ws.push_back(w);
  std::vector<Estimate> es;
  std::vector<std::optional<Verdict>> vs;
  std::vector<std::vector<Suggestion>> suggs;
  std::vector<std::optional<OffloadAnswer>> offs;  // plan's answer with partial offload, when it has one
  const EstimateBasis basis = estimate_basis(ck, layout);
  for (const auto& x : ws) {
    es.push_back(estimate(ck, layout, x, basis));
    vs.emplace_back();
    suggs.emplace_back();
    offs.emplace_back();
    if (!vram.empty()) {
      vs.back() = verdict(es.back(), *std::min_element(vram.begin(), vram.end()));
      if (!vs.back()->fits) suggs.back() = suggest_fits(ck, layout, x, vs.back()->vram, o.margin, 5, &basis);
      if (!vs.back()->fits && x.mode == Mode::Infer && x.target == Target::Cuda && x.nodes <= 1) {
        offs.back() = offload_answer(es.back(), vram, cpu_ram);
        if (!offs.back()) offs.back() = quantized_offload(ck, layout, basis, x, vram, cpu_ram);
        if (offs.back() && is_all_runtimes(o.w))  // plan takes one runtime
          offs.back()->flags += fmt::format("{}--runtime {}", offs.back()->flags.empty() ? "" : " ", runtime_name(es.back().runtime));
      }
    }
  }
  warn(es.front());
  const std::optional<RunBatch> run_batch = es.size() == 1 ? run_default_batch(o, es[0], ck, layout) : std::nullopt;
  const Bandwidths bw = parse_bandwidths(o.bandwidth);
  const std::optional<DecodeBound> decode = es.size() == 1 ? device_decode_bound(es[0], vs[0], bw) : std::nullopt;
  const std::optional<engine::SpeedProbe> speed = es.size() == 1 ? cpu_speed(o, es[0], ck, layout) : std::nullopt;
  if (!o.svg.empty()) {
    write_file_atomically(o.svg, bar_chart_svg(estimate_chart(es, vs)));
    fmt::print(stderr, "wrote {} (svg)\n", o.svg);
  }
  // --runtime all: exit 0 when at least one runtime fits.
  const bool ok = std::any_of(vs.begin(), vs.end(), [](const auto& v) { return !v || v->fits; });
  if (o.json) {
    auto one = [&](size_t i) {
      auto j = to_json(es[i]);
      j["verdict"] = vs[i] ? to_json(*vs[i]) : nlohmann::json(nullptr);
      j["fixes"] = to_json(suggs[i]);
      if (offs[i])  // plan's offload first: it changes no result, only where the weights sit
        j["fixes"].insert(j["fixes"].begin(), offload_json(*offs[i]));
      return j;
    };
    nlohmann::json j;
    if (es.size() == 1) {
      j = one(0);
      if (run_batch) j["run_default_batch"] = {{"batch_size", run_batch->sequences}, {"why", run_batch->why}};
      j["decode_bound"] = decode ? decode_json(*decode, bw) : nlohmann::json(nullptr);
      j["cpu_decode_probe"] = speed ? probe_json(*speed) : nlohmann::json(nullptr);
    } else {
      j["runtimes"] = nlohmann::json::object();
      for (size_t i = 0; i < es.size(); ++i) j["runtimes"][std::string(runtime_name(es[i].runtime))] = one(i);
    }
    j["path"] = o.path;
    fmt::print("{}\n", dump_json(stamp(j, "estimate"), 2));
  } else if (es.size() == 1) {
    print_table(es[0], o.explain);
    if (vs[0]) print_suggestions(*vs[0], suggs[0], o.margin, offs[0], o.path);
    if (decode) fmt::print("\n{}\n", wrap(decode_line(*decode, bw), output_width(), 2));
    if (speed) fmt::print("\n{}\n", wrap(probe_line(*speed), output_width(), 2));
    if (run_batch) fmt::print("\n{}\n", wrap(run_batch_line(*run_batch), output_width(), 2));
    if (o.w.runtime.empty() && layout.spec) print_other_runtimes(ck, layout, w, basis, vram, es[0].runtime);
  } else {
    print_columns(es, vs);
    for (size_t i = 0; i < es.size(); ++i)
      if (vs[i] && !vs[i]->fits && (offs[i] || !suggs[i].empty())) {
        if (offs[i])
          fmt::print("\n{}\n", wrap(fmt::format("{}: {}", runtime_name(es[i].runtime), offload_line(*offs[i], o.path)), output_width(), 2));
        if (suggs[i].empty()) continue;
        fmt::print("\n{}: to make it fit{} (cheapest first):\n", runtime_name(es[i].runtime), offs[i] ? " on the GPU alone" : "");
        for (const auto& s : suggs[i])
          fmt::print("  {}\n      {}\n", s.flags, wrap(fmt::format("{} -> {} headroom", s.what, format_bytes(s.headroom)), output_width(), 6));
      }
  }
  return ok ? 0 : static_cast<int>(Exit::OutOfMemory);
}

}  // namespace

void add_estimate(CLI::App& app, Action& action) {
  auto o = std::make_shared<EstimateOptions>();
  auto* cmd = app.add_subcommand("estimate", "Memory a workload needs per GPU, a verdict against --vram, and what would make it fit");
  cmd->footer(
      "Sizes: 16G = 16 GiB, 16GB = 16*10^9 bytes, 512M; a number needs a unit.\n"
      "Exit codes: 0 fits (or no --vram), 2 bad input or usage, 3 predicted OOM (--runtime all: none fits).\n"
      "Examples:\n"
      "  nunchaku estimate model/ --vram 16G --context 8192 --batch 4\n"
      "  nunchaku estimate model/ --runtime all --vram 24G\n"
      "  nunchaku estimate model/ --mode qlora --vram 24G --json\n"
      "  nunchaku estimate gemma-3-12b-it/ --images 2 --vram 24G\n"
      "  nunchaku estimate FLUX.1-dev/ --vram 24G    (a diffusers pipeline: every part)\n"
      "  nunchaku estimate model/ --mode train --zero 3 --nodes 2 --gpus 8 --vram 80G --interconnect 400Gb --explain\n"
      "  nunchaku estimate model/ --mode train --runtime fsdp --fsdp-strategy hybrid --nodes 2 --gpus 8 --vram 80G");
  cmd->add_option("PATH", o->path, "Checkpoint file or directory (a diffusers pipeline folder too), or a Hub id "
                  "(org/name[@rev][:QUANT])")->required();
  add_file_option(cmd, o->file);
  add_workload_options(cmd, o->w);
  cmd->add_option("--vram", o->vram, "Memory per GPU: 16G, 16G,24G, or auto (free memory of the CUDA devices)")->group(kHardware);
  cmd->add_option("--cpu-ram", o->cpu_ram, "Host memory for the partial-offload answer when the GPUs are short, as plan "
                  "takes it (default: the host's available memory)")->group(kHardware);
  add_bandwidth_option(cmd, o->bandwidth);
  cmd->add_flag("--no-probe", o->no_probe, "With --device cpu: skip the measured decode speed (a fraction of a second "
                "timing the engine's matmuls on synthetic weights of the model's types)")->group(kHardware);
  cmd->add_option("--margin", o->margin, "Suggestions keep this fraction of the budget free")->capture_default_str()->group(kOutput);
  cmd->add_flag("--json", o->json, "Print JSON (formulas included)")->group(kOutput);
  cmd->add_option("--svg", o->svg, "Also draw the estimate as an SVG picture (a stacked bar per device against the budget) to FILE")
      ->group(kOutput);
  cmd->add_flag("--explain", o->explain, "Show how each component is computed (its formula)")->group(kOutput);
  finish_help(cmd);
  cmd->callback([o, cmd, &action] {
    o->batch_given = cmd->count("--batch") > 0;
    action = [o] { return run(*o); };
  });
}

}  // namespace nunchaku::cli

