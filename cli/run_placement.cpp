#include "cli/run_placement.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "cli/workload_options.hpp"
#include "core/error.hpp"
#include "core/units.hpp"
#include "cuda/loader.hpp"
#include "io/weight_store.hpp"
#include "memory/engine_memory.hpp"
#include "memory/estimate.hpp"
#include "memory/plan.hpp"

namespace nunchaku::cli {
namespace {

Workload run_workload(const RunPlacementOptions& o, Target target) {
  Workload w;
  w.batch = o.batch_size;
  w.context = o.context;
  w.kv_dtype = o.kv_dtype;
  w.threads = o.threads;
  w.prefill_chunk = o.prefill_chunk;
  w.target = target;
  if (target == Target::Cpu) w.overheads = {{"cuda_context", 0}, {"cublas_workspace", 0}};
  return w;
}

// The CUDA device that runs what no GPU holds (streamed layers, an embedding or head left in
// host memory): the last GPU of the placement (its layers come last, so the stream of
// offloaded layers after them crosses no other GPU), cpu when none.
Device backend_of(const Placement& p) {
  std::set<Device> gpus;
  for (const auto& [name, d] : p.modules)
    if (d.kind == Device::Kind::Cuda) gpus.insert(d);
  return gpus.empty() ? Device{Device::Kind::Cpu, 0} : *gpus.rbegin();
}

// The final norm runs with the head (split backend): a plan that put them on two GPUs gets
// the norm (hidden-size weights) moved to the head's GPU.
void norm_with_head(Placement& p, const ModelLayout& layout) {
  const Module* norm = nullptr;
  const Module* head = nullptr;
  for (const Module& m : layout.modules) {
    if (m.kind == ModuleKind::FinalNorm && !norm) norm = &m;
    if (m.kind == ModuleKind::Head) head = &m;
  }
  if (!norm || !head || !p.modules.count(norm->name) || !p.modules.count(head->name)) return;
  Device& n = p.modules[norm->name];
  const Device h = p.modules[head->name];
  if (n.kind == Device::Kind::Cuda && h.kind == Device::Kind::Cuda && n != h) n = h;
}

// Every GPU the run needs answers (exit 2 naming the one that does not, before any load).
void check_gpus(const RunPlacement& r) {
  for (Device d : r.gpus()) {
    cuda::MemInfo mi;
    std::string err;
    if (!cuda::mem_info(d.index, mi, &err))
      throw Error("usage.device", fmt::format("the placement uses {}, which is not available: {}", d.str(), err),
                  {.hint = "nvidia-smi lists this machine's GPUs; plan for those (--vram with one size per GPU)"});
  }
}

}  // namespace

std::vector<Device> RunPlacement::gpus() const {
  std::set<Device> gpus;
  for (const auto& [name, d] : placement.modules)
    if (d.kind == Device::Kind::Cuda) gpus.insert(d);
  if (backend.kind == Device::Kind::Cuda) gpus.insert(backend);
  return {gpus.begin(), gpus.end()};
}

RunPlacement run_placement(const RunPlacementOptions& o, const Checkpoint& ck, const ModelLayout& layout) {
  const int given = int(!o.plan.empty()) + int(!o.vram.empty());
  if (given > 1) throw Error("usage.placement", "--plan and --vram both say where the weights go; give one");
  RunPlacement r;
  if (!o.plan.empty()) {
    r.placement = read_plan_file(o.plan);
  } else if (!o.vram.empty()) {
    auto dev = parse_device(o.device);
    const int first = dev && dev->kind == Device::Kind::Cuda ? dev->index : 0;
    if (first != 0) throw Error("usage.device", "--vram plans from cuda:0; give --plan for other devices");
    PlanRequest req;
    req.vram = parse_vram(o.vram);
    req.cpu_ram = o.cpu_ram.empty() ? free_bytes_on(Device{Device::Kind::Cpu, 0}) : parse_size_or_throw(o.cpu_ram, "--cpu-ram");
    req.allow_disk = true;
    req.offload_exec = OffloadExec::Gpu;  // layers off the GPU are streamed to it, not run on the CPU
    const Estimate e = estimate(ck, layout, run_workload(o, Target::Cuda));
    // estimate charges the CPU engine's run state; the CUDA backend's differs by its
    // scratch (dequantization panel, cuBLAS workspace) and the logit rows' indices on the
    // device: take that out of the budget the planner sees.
    EngineConfig c;
    c.max_batch = o.batch_size;
    c.max_context = o.context;
    c.max_tokens = engine_max_tokens(o.prefill_chunk, o.batch_size);
    c.kv_dtype = o.kv_dtype;
    c.threads = o.threads;
    const EngineMemory cpu_state = engine_memory(*layout.spec, c);
    c.cuda = true;
    const EngineMemory gpu_state = engine_memory(*layout.spec, c);
    const uint64_t extra = (gpu_state.total() - gpu_state.host_logits) - std::min(cpu_state.total(), gpu_state.total());
    for (uint64_t& v : req.vram) v = v > extra ? v - extra : 0;  // each GPU runs its layers with its own scratch
    const DevicePlan p = make_plan(e, req);
    if (!p.fits)
      throw Error("plan.does_not_fit", fmt::format("the run does not fit: {}", p.shortfall),
                  {.hint = "lower --batch-size or --context, or give more --vram / --cpu-ram"}, Exit::OutOfMemory);
    r.placement = p.placement(e);
  } else if (!o.cpu_ram.empty()) {
    r.placement = plan_placement(estimate(ck, layout, run_workload(o, Target::Cpu)), {}, parse_size_or_throw(o.cpu_ram, "--cpu-ram"));
  } else {
    auto d = parse_device(o.device);
    if (!d || d->kind == Device::Kind::Disk)
      throw Error("usage.device", fmt::format("--device must be cpu or cuda[:N], not '{}'", o.device));
    r.placement = place_all(layout, *d);
  }
  norm_with_head(r.placement, layout);
  r.backend = backend_of(r.placement);
  // --device cuda:N with --cpu-ram (or --vram): the ops run on that GPU, and what is not in
  // its memory is streamed to it.
  if (auto d = parse_device(o.device); o.plan.empty() && d && d->kind == Device::Kind::Cuda) r.backend = *d;
  if (!o.vram.empty() && r.backend.kind != Device::Kind::Cuda) r.backend = Device{Device::Kind::Cuda, 0};
  check_gpus(r);
  return r;
}

}  // namespace nunchaku::cli

namespace nunchaku::cli {
namespace {
bool used_on(Device d, uint64_t& used) {
  cuda::MemInfo mi;
  std::string err;
  if (!cuda::mem_info(d.index, mi, &err)) return false;
  used = mi.total_bytes - mi.free_bytes;
  return true;
}
}  // namespace

GpuMemoryProbe::GpuMemoryProbe(std::vector<Device> gpus) : devices(std::move(gpus)) {
  known = !devices.empty();
  for (Device d : devices) {
    uint64_t used = 0;
    known = known && used_on(d, used);
    base += used;
  }
}

void GpuMemoryProbe::sample() {
  if (!known) return;
  uint64_t used = 0;
  for (Device d : devices) {
    uint64_t u = 0;
    if (!used_on(d, u)) return;
    used += u;
  }
  peak = std::max(peak, used > base ? used - base : 0);
}

std::string GpuMemoryProbe::str() const {
  std::string s;
  for (Device d : devices) s += (s.empty() ? "" : "+") + d.str();
  return s;
}

}  // namespace nunchaku::cli
