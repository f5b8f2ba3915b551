#include "cli/run_placement.hpp"

#include <algorithm>
#include <functional>
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
#include "core/host_memory.hpp"

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
  // --cpu-ram budgets what the engine allocates (docs/run.md): the process's own fixed cost
  // (estimate's cpu_runtime) is outside it.
  if (target == Target::Cpu) w.overheads = {{"cuda_context", 0}, {"cublas_workspace", 0}, {"cpu_runtime", 0}};
  return w;
}

// The engine's configuration for these options (what run's engine will allocate).
EngineConfig engine_config_of(const RunPlacementOptions& o) {
  EngineConfig c;
  c.max_batch = o.batch_size;
  c.max_context = o.context;
  c.max_tokens = engine_max_tokens(o.prefill_chunk, o.batch_size);
  c.kv_dtype = o.kv_dtype;
  c.threads = o.threads;
  c.fast_math = o.fast_math;
  return c;
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

// The bytes of each MoE layer's mixture of experts (is_expert_part_role), by module name.
std::map<std::string, uint64_t> moe_bytes(const Checkpoint& ck, const ModelLayout& layout) {
  std::map<std::string, uint64_t> out;
  for (const Module& m : layout.modules) {
    if (m.kind != ModuleKind::Layer || std::find(m.roles.begin(), m.roles.end(), Role::Router) == m.roles.end()) continue;
    uint64_t n = 0;
    for (size_t k = 0; k < m.tensors.size() && k < m.roles.size(); ++k)
      if (is_expert_part_role(m.roles[k]) && m.tensors[k] < ck.tensors.size()) n += ck.tensors[m.tensors[k]].nbytes;
    out[m.name] = n;
  }
  return out;
}

// A GPU run of a MoE model: the CUDA backend runs no experts, so a CPU part runs every layer's
// mixture of experts (KTransformers' split) and the placement keeps each in host memory: the
// experts of a layer on a GPU go to the CPU (mapped from the file), those of a layer in host
// memory or on disk stay with it.
void moe_to_host(Placement& p, const Checkpoint& ck, const ModelLayout& layout) {
  for (const auto& [name, bytes] : moe_bytes(ck, layout)) {
    const Device layer = p.device_of(name);
    Device& e = p.experts.try_emplace(name, layer).first->second;
    if (e.kind == Device::Kind::Cuda) e = Device{Device::Kind::Cpu, 0};
    p.moe_on_host = true;
  }
}

// --device without a budget: every weight there.
Device single_device(const RunPlacementOptions& o) {
  auto d = parse_device(o.device);
  if (!d || d->kind == Device::Kind::Disk)
    throw Error("usage.device", fmt::format("--device must be cpu or cuda[:N], not '{}'", o.device));
  return *d;
}

// The --vram plan (budgets x `scale`): the first layers that fit on the GPUs, the rest in
// host memory or on disk, streamed to the GPU.
DevicePlan vram_plan(const RunPlacementOptions& o, const Checkpoint& ck, const ModelLayout& layout, double scale,
                     Estimate* e_out) {
  auto dev = parse_device(o.device);
  const int first = dev && dev->kind == Device::Kind::Cuda ? dev->index : 0;
  if (first != 0) throw Error("usage.device", "--vram plans from cuda:0; give --plan for other devices");
  PlanRequest req;
  req.vram = parse_vram(o.vram);
  req.cpu_ram = o.cpu_ram.empty() ? free_bytes_on(Device{Device::Kind::Cpu, 0}) : parse_size_or_throw(o.cpu_ram, "--cpu-ram");
  req.allow_disk = true;
  req.offload_exec = OffloadExec::Gpu;  // layers off the GPU are streamed to it, not run on the CPU
  // estimate charges the CUDA backend's run state (its scratch: dequantization panel and
  // cuBLAS workspace) on every GPU that runs layers, as engine_memory() sizes it for the run.
  Estimate e = estimate(ck, layout, run_workload(o, Target::Cuda));
  // (A MoE's mixtures of experts are charged to the host there: moe_to_host below keeps them so.)
  for (uint64_t& v : req.vram) v = uint64_t(double(v) * scale);
  req.cpu_ram = uint64_t(double(req.cpu_ram) * scale);
  DevicePlan p = make_plan(e, req);
  if (e_out) *e_out = std::move(e);
  return p;
}

// Weight bytes a plan keeps where they are read in place (GPUs, or host memory).
uint64_t kept_weights(const DevicePlan& p) {
  uint64_t n = 0;
  for (const DeviceCharge& d : p.devices)
    if (d.device.kind == Device::Kind::Cuda || d.device.kind == Device::Kind::Cpu) n += d.weights;
  return n;
}

// --batch-size auto: the most sequences (at most kAutoBatchGpu on a GPU, kAutoBatchCpu on
// the CPU, where a batch this size is already compute-bound) whose run state fits the
// memory the weights leave, 5% of the budget kept spare, without pushing a layer off the
// device it gets at batch 1 (a streamed layer costs more than a larger batch gains).
constexpr int kAutoBatchGpu = 256, kAutoBatchCpu = 16;
constexpr double kAutoSpare = 0.05;

int auto_batch_impl(const RunPlacementOptions& o, const Checkpoint& ck, const ModelLayout& layout, std::string& why) {
  if (!o.plan.empty())
    throw Error("usage.batch_size", "--batch-size auto needs a budget to fill; a --plan file gives none",
                {.hint = "give a number, or --vram / --cpu-ram / --device instead of --plan"});
  const auto dev = parse_device(o.device);
  const bool gpu = !o.vram.empty() || (dev && dev->kind == Device::Kind::Cuda);
  const int cap = gpu ? kAutoBatchGpu : kAutoBatchCpu;
  auto with = [&](int b) {
    RunPlacementOptions q = o;
    q.batch_size = b;
    return q;
  };
  std::function<bool(int)> fits;
  std::string where;
  if (!o.vram.empty() || !o.cpu_ram.empty()) {
    auto plan_at = [&](int b) {
      if (!o.vram.empty()) return vram_plan(with(b), ck, layout, 1.0 - kAutoSpare, nullptr);
      PlanRequest req;
      req.cpu_ram = uint64_t(double(parse_size_or_throw(o.cpu_ram, "--cpu-ram")) * (1.0 - kAutoSpare));
      req.allow_disk = true;
      req.split_experts = true;  // as plan_placement
      return make_plan(estimate(ck, layout, run_workload(with(b), Target::Cpu)), req);
    };
    const DevicePlan one = plan_at(1);
    if (!one.fits) return 1;  // the plan itself reports what is short
    const uint64_t kept = kept_weights(one);
    fits = [=](int b) {
      const DevicePlan p = plan_at(b);
      return p.fits && kept_weights(p) >= kept;
    };
    where = !o.vram.empty() ? "--vram" : "--cpu-ram";
  } else {
    const Device d = single_device(o);
    uint64_t free = 0;
    std::string limited_by;
    if (d.kind == Device::Kind::Cuda) {
      cuda::MemInfo mi;
      std::string err;
      if (!cuda::mem_info(d.index, mi, &err))
        throw Error("usage.device", fmt::format("{} is not available: {}", d.str(), err));
      free = mi.free_bytes;
    } else {
      const HostMemory hm = host_memory_available();  // ulimit -v and cgroup limits included
      free = hm.bytes;
      limited_by = hm.limited_by;
    }
    uint64_t weights = 0;
    for (const Module& m : layout.modules) weights += m.bytes;
    if (d.kind == Device::Kind::Cuda)  // a mixture of experts stays in host memory (moe_to_host)
      for (const auto& [name, bytes] : moe_bytes(ck, layout)) weights -= std::min(weights, bytes);
    const uint64_t budget = uint64_t(double(free) * (1.0 - kAutoSpare));
    const int64_t panel_cols = panel_cols_of(ck, layout);
    fits = [=, &o, &layout](int b) {
      EngineConfig c = engine_config_of(with(b));
      c.cuda = d.kind == Device::Kind::Cuda;
      c.panel_cols = panel_cols;
      return weights + engine_memory(*layout.spec, c).total() <= budget;
    };
    where = fmt::format("{}'s free memory{}", d.str(), limited_by.empty() ? "" : " (limited by " + limited_by + ")");
  }
  int lo = 1, hi = cap;  // fits(lo) or lo == 1
  if (!fits(1)) hi = 1;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (fits(mid)) lo = mid;
    else hi = mid - 1;
  }
  why = fmt::format("the most sequences (at most {}) whose KV cache and activations fit {} beside the weights, "
                    "{:.0f}% kept spare", cap, where, kAutoSpare * 100);
  return lo;
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

int auto_batch_size(const RunPlacementOptions& o, const Checkpoint& ck, const ModelLayout& layout, std::string& why) {
  return auto_batch_impl(o, ck, layout, why);
}

RunPlacement run_placement(const RunPlacementOptions& o_in, const Checkpoint& ck, const ModelLayout& layout) {
  const int given = int(!o_in.plan.empty()) + int(!o_in.vram.empty());
  if (given > 1) throw Error("usage.placement", "--plan and --vram both say where the weights go; give one");
  RunPlacement r;
  RunPlacementOptions o = o_in;
  if (o.batch_size == 0) {  // --batch-size auto
    o.batch_size = auto_batch_impl(o, ck, layout, r.batch_reason);
  }
  r.batch_size = o.batch_size;
  if (!o.plan.empty()) {
    r.placement = read_plan_file(o.plan);
    for (const std::string& m : o.not_loaded) r.placement.modules.erase(m);
  } else if (!o.vram.empty()) {
    Estimate e;
    const DevicePlan p = vram_plan(o, ck, layout, 1.0, &e);
    if (!p.fits)
      throw Error("plan.does_not_fit", fmt::format("the run does not fit: {}", p.shortfall),
                  {.hint = "lower --batch-size or --context, or give more --vram / --cpu-ram"}, Exit::OutOfMemory);
    r.placement = p.placement(e);
  } else if (!o.cpu_ram.empty()) {
    r.placement = plan_placement(estimate(ck, layout, run_workload(o, Target::Cpu)), {}, parse_size_or_throw(o.cpu_ram, "--cpu-ram"));
  } else {
    r.placement = place_all(layout, single_device(o));
  }
  norm_with_head(r.placement, layout);
  r.backend = backend_of(r.placement);
  // --device cuda:N with --cpu-ram (or --vram): the ops run on that GPU, and what is not in
  // its memory is streamed to it.
  if (auto d = parse_device(o.device); o.plan.empty() && d && d->kind == Device::Kind::Cuda) r.backend = *d;
  if (!o.vram.empty() && r.backend.kind != Device::Kind::Cuda) r.backend = Device{Device::Kind::Cuda, 0};
  if (r.backend.kind == Device::Kind::Cuda) moe_to_host(r.placement, ck, layout);
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
