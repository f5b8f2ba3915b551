// nunchaku load PATH: stream a checkpoint into memory by a placement and report how
// it went. Thin adapter: options -> Placement -> load_checkpoint -> text or JSON.
#include <cstdio>
#include <unistd.h>

#include <fmt/format.h>

#include "cli/model_source.hpp"
#include "cli/commands.hpp"
#include "cli/help.hpp"
#include "cli/json_doc.hpp"
#include "cli/progress.hpp"
#include "cli/trace_session.hpp"
#include "cli/workload_options.hpp"
#include "core/error.hpp"
#include "core/interrupt.hpp"
#include "cuda/loader.hpp"
#include "format/open.hpp"
#include "io/atomic_output.hpp"
#include "io/loader.hpp"
#include "memory/estimate.hpp"
#include "memory/plan.hpp"
#include "core/text.hpp"
#include "core/units.hpp"
#include "model/model.hpp"

namespace nunchaku::cli {
namespace {

struct LoadCliOptions {
  std::string path, file, plan, device, vram, cpu_ram, dtype;
  std::string trace;  // --trace FILE
  std::string staging_size = "64M";
  int staging_buffers = 4;
  int threads = 0;
  bool direct_io = false, verify = false, json = false, no_pin = false, measure_h2d = false, copy = false;
};

Placement choose_placement(const LoadCliOptions& o, const Checkpoint& ck, const ModelLayout& layout, std::vector<std::string>& notes) {
  const int given = !o.plan.empty() + !o.device.empty() + (!o.vram.empty() || !o.cpu_ram.empty());
  if (given > 1) throw Error("usage.placement", "use one of --plan, --device, --vram/--cpu-ram");
  if (!o.plan.empty()) return read_plan_file(o.plan);
  if (!o.device.empty()) {
    auto d = parse_device(o.device);
    if (!d || d->kind == Device::Kind::Disk)
      throw Error("usage.device", "--device must be cpu, cuda or cuda:N, not '" + o.device + "'");
    return place_all(layout, *d);
  }
  // Budgets: the planner, reserving the KV cache and activations of one sequence at the
  // default context (no model description: weights and CUDA overheads only).
  auto planned = [&](std::vector<uint64_t> vram, uint64_t ram, std::map<std::string, uint64_t> overheads) {
    Estimate e;
    try {
      Workload w;
      w.overheads = overheads;
      e = estimate(ck, layout, w);
      notes.push_back(fmt::format("placement: nunchaku plan (balanced), KV cache and activations reserved for batch 1 × {}",
                                  plural(uint64_t(e.workload.context), "token")));
    } catch (const Error& err) {
      if (!std::string_view(err.code()).starts_with("estimate.")) throw;
      e = weights_only_estimate(layout, overheads);
      notes.push_back("placement: nunchaku plan (balanced) of the weights (no model description for KV/activations)");
    }
    return plan_placement(e, std::move(vram), ram);
  };
  if (!o.vram.empty() || !o.cpu_ram.empty()) {
    std::vector<uint64_t> vram = parse_vram_for_plan(o.vram, notes);
    uint64_t ram = o.cpu_ram.empty() ? free_bytes_on(Device{Device::Kind::Cpu, 0}) : parse_size_or_throw(o.cpu_ram, "--cpu-ram");
    return planned(vram, ram, {});
  }
  // Nothing given: cuda:0's free memory (its context already exists, so not charged again), else the CPU.
  std::string why;
  cuda::MemInfo mi;
  if (cuda::loader_available(&why) && cuda::mem_info(0, mi, &why))
    return planned({mi.free_bytes}, free_bytes_on(Device{Device::Kind::Cpu, 0}), {{"cuda_context", 0}});
  notes.push_back("placement: everything on the CPU (" + why + ")");
  return place_all(layout, Device{Device::Kind::Cpu, 0});
}

// Names: docs/json.md; shape: docs/schema/load.json.
nlohmann::json report_json(const Checkpoint& ck, const LoadResult& r) {
  using nlohmann::json;
  const LoadReport& p = r.report;
  json dev = json::object(), gpu = json::object(), mods = json::array();
  for (const auto& [d, b] : p.bytes_per_device) dev[d.str()] = b;
  for (const auto& [d, g] : p.gpu)
    gpu[d.str()] = {{"predicted_bytes", g.predicted},
                    {"measured_bytes", g.measured},
                    {"error_percent", g.predicted ? 100.0 * (double(g.measured) - double(g.predicted)) / double(g.predicted) : 0.0}};
  for (const auto& m : r.store.modules())
    mods.push_back({{"name", m.name}, {"device", m.device.str()}, {"memory", memory_kind_name(m.memory)}, {"allocated_bytes", m.bytes}});
  return {{"path", ck.path},
          {"format", format_name(ck.format)},
          {"num_tensors", p.tensors},
          {"num_converted_tensors", p.converted_tensors},
          {"num_disk_tensors", p.disk_tensors},
          {"device_bytes", dev},
          {"memory_bytes", p.allocated},
          {"loaded_bytes", p.total_bytes},
          {"read_bytes", p.bytes_read},
          {"direct_bytes", p.bytes_direct},
          {"staged_bytes", p.bytes_staged},
          {"num_mapped_modules", p.mapped_modules},
          {"mapped_bytes", p.bytes_mapped},
          {"num_chunks", p.chunks},
          {"num_reader_threads", p.reader_threads},
          {"num_staging_buffers", p.staging_buffers},
          {"staging_bytes", p.staging_bytes},
          {"direct_io", p.direct_io},
          {"wall_s", p.wall_s},
          {"alloc_s", p.alloc_s},
          {"read_s", p.read_s},
          {"copy_s", p.copy_s},
          {"convert_s", p.convert_s},
          {"verify_s", p.verify_s},
          {"gb_per_s", p.gb_per_s()},
          {"host_peak_bytes", p.host_peak_bytes},
          {"max_rss_bytes", p.max_rss_bytes},
          {"gpu_memory", gpu},
          {"h2d_peak_gb_per_s", nullptr},
          {"load_vs_h2d_peak", nullptr},
          {"modules", mods},
          {"num_verified_tensors", p.verified_tensors},
          {"notes", p.notes}};
}

// Every line fits output_width(): wrapped at spaces, continuation lines indented two columns.
void put(const std::string& text) { fmt::print("{}\n", wrap(printable(text, kMessageShown), output_width(), 2)); }

void print_text(const Checkpoint& ck, const LoadResult& r, bool verify) {
  const LoadReport& p = r.report;
  put(fmt::format("loaded {} ({}, {}, {}) in {:.3f} s: {:.2f} GB/s", ck.path, format_name(ck.format), plural(p.tensors, "tensor"),
                  format_bytes(p.total_bytes), p.wall_s, p.gb_per_s()));
  std::map<Device, int> nmod;
  for (const auto& m : r.store.modules()) nmod[m.device]++;
  for (const auto& [d, b] : p.bytes_per_device)
    fmt::print("  {:<8} {:>12}  {}{}\n", d.str(), format_bytes(b), plural(nmod[d], "module"),
               d.kind == Device::Kind::Disk ? " (mmap views, read on use)" : "");
  put(fmt::format("phases: alloc {:.3f} s, read {:.3f} s ({}), copy {:.3f} s, convert {:.3f} s", p.alloc_s, p.read_s,
                  plural(p.reader_threads, "thread"), p.copy_s, p.convert_s));
  std::string reads = fmt::format("reads: {} straight into place, {} through staging", format_bytes(p.bytes_direct),
                                  format_bytes(p.bytes_staged));
  if (p.staging_buffers) reads += fmt::format(" ({} x {})", p.staging_buffers, format_bytes(p.staging_bytes));
  put(reads + (p.direct_io ? ", O_DIRECT" : ""));
  if (p.mapped_modules)
    put(fmt::format("mapped: {} ({}) as populated read-only mappings of the page cache (no copy; --copy to copy)",
                    plural(p.mapped_modules, "CPU module"), format_bytes(p.bytes_mapped)));
  if (p.converted_tensors) put("converted " + plural(p.converted_tensors, "tensor"));
  put(fmt::format("host memory: {} allocated at peak, max RSS {}", format_bytes(p.host_peak_bytes), format_bytes(p.max_rss_bytes)));
  for (const auto& [d, g] : p.gpu) {
    double err = g.predicted ? 100.0 * (double(g.measured) - double(g.predicted)) / double(g.predicted) : 0.0;
    put(fmt::format("{} memory: {} measured (cudaMemGetInfo) vs {} predicted ({:+.1f}%)", d.str(), format_bytes(g.measured),
                    format_bytes(g.predicted), err));
  }
  if (verify)
    put(fmt::format("verify: {} the file bytes ({:.3f} s)",
                    p.verified_tensors == 1 ? "1 tensor matches" : plural(p.verified_tensors, "tensor") + " match", p.verify_s));
  for (const auto& n : p.notes) put("note: " + n);
}

int run_load(const LoadCliOptions& o) {
  TraceSession tr(o.trace, "load");
  Checkpoint ck = [&] {
    trace::Span span("open", "load");
    return open_checkpoint(o.path);
  }();
  note_input_path(o.path);  // --trace must not name the checkpoint or a file beside it
  for (const auto& f : ck.files) note_input_path(f.path);
  tr.check();
  ModelLayout layout = describe_model(ck);
  std::vector<std::string> notes;
  LoadOptions lo;
  lo.placement = choose_placement(o, ck, layout, notes);
  for (const auto& [_, d] : lo.placement.modules)
    if (d.kind == Device::Kind::Cuda) tr.watch_cuda(d.index);
  if (!o.dtype.empty()) {
    auto d = dtype_from_user(o.dtype);
    if (!d || (*d != DType::F16 && *d != DType::BF16))
      throw Error("usage.dtype", "--dtype must be fp16 or bf16, not '" + o.dtype + "'");
    lo.dtype = d;
  }
  lo.staging_bytes = parse_size_or_throw(o.staging_size, "--staging-size");
  lo.staging_buffers = o.staging_buffers;
  lo.reader_threads = o.threads;
  lo.direct_io = o.direct_io;
  lo.verify = o.verify;
  lo.pin_host = !o.no_pin;
  lo.map_host = !o.copy;
  lo.cancel = &interrupt_flag();  // SIGINT/SIGTERM set it (core/interrupt.hpp)
  Progress progress("loading", !o.json);
  if (progress.on()) lo.progress = [&progress](const LoadProgress& p) { progress.bytes(p.done_bytes, p.total_bytes); };
  // Pinned H2D peak of the first CUDA device in the placement, measured in this run so
  // the load's GB/s can be read against the hardware (scripts/gpu-check.sh).
  double h2d_peak = 0;
  int h2d_dev = -1;
  if (o.measure_h2d) {
    for (const auto& [_, d] : lo.placement.modules)
      if (d.kind == Device::Kind::Cuda) {
        h2d_dev = d.index;
        break;
      }
    std::string err;
    if (h2d_dev < 0) throw Error("usage.measure_h2d", "--measure-h2d needs a placement with a CUDA device");
    h2d_peak = cuda::measure_h2d_peak(h2d_dev, 1ull << 30, 5, &err);
    if (h2d_peak <= 0) throw Error("load.cuda", "cannot measure the H2D peak: " + err, {}, Exit::Internal);
  }
  InterruptGuard guard;
  LoadResult r = [&] {
    try {
      trace::Span span("load", "load");
      return load_checkpoint(ck, layout, lo);
    } catch (const Error& e) {
      progress.clear();
      if (e.code() == "load.interrupted") throw Error(e.code(), e.message(), e.context(), interrupted_exit());  // 143 for SIGTERM
      throw;
    } catch (...) {
      progress.clear();
      throw;
    }
  }();
  progress.clear();
  r.report.notes.insert(r.report.notes.begin(), notes.begin(), notes.end());
  if (tr.on()) {
    tr.predict_load(r.report, r.report.host_peak_bytes);
    for (const auto& [d, g] : r.report.gpu) tr.predict(cuda_memory_counter(d.index), g.predicted);
    tr.finish({{"path", ck.path}});
  }
  if (o.json) {
    auto j = report_json(ck, r);
    if (h2d_dev >= 0) {
      j["h2d_peak_gb_per_s"] = h2d_peak / 1e9;
      j["load_vs_h2d_peak"] = r.report.gb_per_s() * 1e9 / h2d_peak;
    }
    fmt::print("{}\n", dump_json(stamp(j, "load"), 2));
  } else {
    print_text(ck, r, o.verify);
    if (h2d_dev >= 0)
      fmt::print("pinned H2D peak on cuda:{}: {:.2f} GB/s; this load reached {:.0f}% of it\n", h2d_dev, h2d_peak / 1e9,
                 100.0 * r.report.gb_per_s() * 1e9 / h2d_peak);
  }
  return 0;
}

}  // namespace

void add_load(CLI::App& app, Action& action) {
  auto o = std::make_shared<LoadCliOptions>();
  auto* cmd = app.add_subcommand("load", "Stream a checkpoint into GPU/CPU memory layer by layer and report speed and memory");
  cmd->footer(
      "Placement: --plan FILE (JSON {\"modules\": {name: \"cuda:0\"|\"cpu\"|\"disk\"}}, see docs/load.md), or\n"
      "--device cpu|cuda[:N] (everything there), or --vram/--cpu-ram (planned as `nunchaku plan` does,\n"
      "the rest stays on disk). With none: planned over cuda:0's free memory and the CPU, or the CPU\n"
      "without CUDA.\n"
      "Exit codes: 2 bad input or unreadable/truncated file, 3 out of memory, 130/143 SIGINT/SIGTERM.\n"
      "Examples:\n"
      "  nunchaku load model/ --device cpu --verify\n"
      "  nunchaku load model/ --plan plan.json --dtype fp16 --json");
  cmd->add_option("PATH", o->path, "Checkpoint file or directory, or a Hub id in the local HF cache")->required();
  add_file_option(cmd, o->file);
  cmd->add_option("--plan", o->plan, "Placement plan JSON (nunchaku plan --format json)")->group(kPlacement);
  cmd->add_option("--device", o->device, "Put every module on one device: cpu, cuda, cuda:N")->group(kPlacement);
  cmd->add_option("--vram", o->vram, "GPU budget(s) to plan for (e.g. 16G or 16G,24G)")->group(kPlacement);
  cmd->add_option("--cpu-ram", o->cpu_ram, "Host RAM budget to plan for (default: available memory); the rest stays on disk")->group(kPlacement);
  cmd->add_option("--staging-size", o->staging_size, "Bytes per staging buffer (default 64M)")->group(kLoading);
  cmd->add_option("--staging-buffers", o->staging_buffers, "Staging buffers in the ring (default 4)")->group(kLoading);
  cmd->add_option("--threads", o->threads, "Reader threads (default min(4, cores))")->group(kLoading);
  cmd->add_option("--dtype", o->dtype, "Convert F32/F16/BF16 tensors to fp16 or bf16 while loading")->group(kLoading);
  cmd->add_flag("--direct-io", o->direct_io, "Read with O_DIRECT where alignment allows (bypasses the page cache)")->group(kLoading);
  cmd->add_flag("--copy", o->copy, "CPU modules as private copies, not populated read-only mappings of the page cache")->group(kLoading);
  cmd->add_flag("--no-pin", o->no_pin, "Keep CPU-offloaded modules in pageable memory even with CUDA")->group(kLoading);
  cmd->add_flag("--verify", o->verify, "Checksum every tensor after it lands against the file bytes")->group(kOutput);
  cmd->add_flag("--measure-h2d", o->measure_h2d, "Also measure the pinned host-to-device peak (1 GiB x 5) before loading")->group(kOutput);
  cmd->add_flag("--json", o->json, "Print the report as one JSON document")->group(kOutput);
  cmd->add_option("--trace", o->trace,
                  "Write a Chrome trace (Perfetto, chrome://tracing) of the load to FILE: phases, and host RSS, pinned "
                  "and GPU memory and file bytes read sampled every 2 ms beside their predictions")
      ->group(kOutput);
  finish_help(cmd);
  cmd->callback([o, &action] { action = [o] {
    o->path = local_model_path(o->path, o->file, false);
    return run_load(*o);
  }; });
}

}  // namespace nunchaku::cli

