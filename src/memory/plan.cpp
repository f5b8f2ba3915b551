// The planner: charges (what each device pays for an assignment) and the balanced and
// sequential strategies. The accelerate-compatible strategy is in plan_accelerate.cpp.
#include "memory/plan.hpp"
#include "memory/engine_memory.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/log.hpp"
#include "memory/estimate_detail.hpp"
#include "core/units.hpp"

namespace nunchaku {
namespace {

constexpr uint64_t kUnlimited = UINT64_MAX;

bool is_gpu(const Device& d) { return d.kind == Device::Kind::Cuda; }
bool is_layer(const ModuleCost& m) { return m.kind == ModuleKind::Layer; }

// A head whose tensors all alias the embedding (estimate() gave it no parameters): it
// goes wherever the embedding goes.
bool is_aliased_head(const ModuleCost& m) { return m.kind == ModuleKind::Head && m.parameters == 0; }

struct Roles {
  size_t n = 0;
  std::optional<size_t> embedding;
  std::optional<size_t> head_holder;  // the module that computes logits
  std::vector<size_t> followers;      // aliased heads (follow the embedding)
  std::vector<size_t> sequence;       // modules the strategies place, in order
  size_t num_layers = 0;
};

Roles roles_of(const Estimate& e) {
  Roles r;
  r.n = e.modules.size();
  for (size_t i = 0; i < r.n; ++i) {
    const auto& m = e.modules[i];
    if (m.kind == ModuleKind::Embedding && !r.embedding) r.embedding = i;
    if (is_layer(m)) r.num_layers++;
  }
  for (size_t i = 0; i < r.n; ++i) {
    const auto& m = e.modules[i];
    if (is_aliased_head(m) && r.embedding) {
      r.followers.push_back(i);
      continue;
    }
    if (m.kind == ModuleKind::Head && !r.head_holder) r.head_holder = i;
    r.sequence.push_back(i);
  }
  if (!r.head_holder) {
    if (r.embedding && (e.spec.tie_word_embeddings || !r.followers.empty())) r.head_holder = r.embedding;
    else if (!r.sequence.empty()) r.head_holder = r.sequence.back();  // no head: logits where the stack ends
  }
  return r;
}

uint64_t overhead_bytes(const Estimate& e) {
  uint64_t s = 0;
  for (const auto& c : e.gpu)
    if (c.overhead) s += c.bytes;
  return s;
}

uint64_t activation_share(const Estimate& e, size_t layers_here, size_t num_layers, bool gpu) {
  if (layers_here == 0) return 0;
  if (!gpu && e.cpu_activation_bytes > 0) return e.cpu_activation_bytes;  // nunchaku's CPU backend (inference)
  if (e.workload.mode == Mode::Infer || num_layers == 0) return e.activation_bytes;  // one transient, reused
  // Training keeps every layer's saved activations: this device's share (rounded up).
  return static_cast<uint64_t>((static_cast<unsigned __int128>(e.activation_bytes) * layers_here + num_layers - 1) / num_layers);
}

}  // namespace

std::string_view strategy_name(Strategy s) {
  switch (s) {
    case Strategy::Balanced: return "balanced";
    case Strategy::Sequential: return "sequential";
    case Strategy::Accelerate: return "accelerate";
  }
  return "?";
}

Strategy parse_strategy(std::string_view s) {
  if (s == "balanced") return Strategy::Balanced;
  if (s == "sequential") return Strategy::Sequential;
  if (s == "accelerate") return Strategy::Accelerate;
  throw Error("usage.strategy", fmt::format("--strategy: unknown strategy '{}'", s), {.hint = "balanced, sequential (or --compat accelerate)"});
}

Placement DevicePlan::placement(const Estimate& e) const {
  Placement p;
  p.source = fmt::format("nunchaku plan ({})", strategy_name(strategy));
  for (size_t i = 0; i < e.modules.size() && i < module_device.size(); ++i)
    if (e.modules[i].loaded) p.modules[e.modules[i].name] = module_device[i];
  for (size_t i = 0; i < e.modules.size() && i < expert_device.size() && i < module_device.size(); ++i)
    if (e.modules[i].loaded && e.modules[i].expert_bytes > 0 && expert_device[i] != module_device[i])
      p.experts[e.modules[i].name] = expert_device[i];
  return p;
}

size_t DevicePlan::gpu_layers() const {
  size_t n = 0;
  for (const auto& d : devices)
    if (is_gpu(d.device)) n += d.layers;
  return n;
}

DevicePlan charge_plan(const Estimate& e, const PlanRequest& r, const std::vector<Device>& where,
                       const std::vector<Device>& experts) {
  const Roles roles = roles_of(e);
  DevicePlan p;
  p.strategy = r.strategy;
  p.offload_exec = r.offload_exec;
  p.module_device = where;
  p.expert_device = experts;
  // Routed experts kept apart from their layer: stored (and, off the GPUs, run) where they are.
  auto apart = [&](size_t i) { return i < experts.size() && e.modules[i].expert_bytes > 0 && experts[i] != where[i]; };
  const size_t K = r.vram.size();
  for (size_t k = 0; k < K; ++k) p.devices.push_back({Device{Device::Kind::Cuda, static_cast<int>(k)}, r.vram[k]});
  p.devices.push_back({Device{Device::Kind::Cpu, 0}, r.cpu_ram});
  const size_t cpu = K;
  auto on_disk = [](const Device& d) { return d.kind == Device::Kind::Disk; };
  bool disk_used = std::any_of(where.begin(), where.end(), on_disk) || std::any_of(experts.begin(), experts.end(), on_disk);
  if (disk_used) p.devices.push_back({Device{Device::Kind::Disk, 0}, kUnlimited});
  const size_t disk = K + 1;

  // Slot of the device a module is stored on, and of the one that runs it (SIZE_MAX: a
  // GPU beyond the request, used by the strategies for "not decided yet": charged nowhere).
  auto slot_of = [&](const Device& d) -> size_t {
    if (d.kind == Device::Kind::Cuda) return d.index >= 0 && static_cast<size_t>(d.index) < K ? static_cast<size_t>(d.index) : SIZE_MAX;
    return d.kind == Device::Kind::Cpu ? cpu : disk;
  };
  const bool stream = r.offload_exec == OffloadExec::Gpu && K > 0;
  auto exec_of = [&](const Device& d) -> size_t {
    if (is_gpu(d)) return slot_of(d);
    return stream ? 0 : cpu;
  };

  std::vector<size_t> exec_layers(p.devices.size(), 0);
  uint64_t largest_offloaded = 0;
  for (size_t i = 0; i < e.modules.size() && i < where.size(); ++i) {
    const ModuleCost& m = e.modules[i];
    const size_t s = slot_of(where[i]), x = exec_of(where[i]);
    const uint64_t kept_apart = apart(i) ? m.expert_bytes : 0;
    if (kept_apart) {
      const size_t es = slot_of(experts[i]);
      if (es != SIZE_MAX) p.devices[es].weights += kept_apart, p.devices[es].expert_layers++;
      if (!is_gpu(experts[i]) && is_gpu(where[i]) && !stream) exec_layers[cpu]++;  // the CPU runs those experts
    }
    if (s != SIZE_MAX) {
      auto& d = p.devices[s];
      d.modules.push_back(i);
      d.weights += m.weight_bytes - kept_apart;
      if (is_layer(m)) {
        d.layers++;
        if (d.first_layer < 0 || m.layer < d.first_layer) d.first_layer = m.layer;
        d.last_layer = std::max(d.last_layer, m.layer);
      }
    }
    if (!is_gpu(where[i])) largest_offloaded = std::max(largest_offloaded, m.weight_bytes);
    if (x == SIZE_MAX) continue;
    p.devices[x].kv_cache += m.kv_bytes;
    p.devices[x].train_states += m.train_bytes;
    if (is_layer(m)) exec_layers[x]++;
    if (roles.head_holder && *roles.head_holder == i) p.devices[x].logits += e.logits_bytes;
  }
  const uint64_t over = overhead_bytes(e);
  for (size_t s = 0; s < p.devices.size(); ++s) {
    auto& d = p.devices[s];
    d.activations = activation_share(e, exec_layers[s], roles.num_layers, is_gpu(d.device));
    // The runtime's fixed costs per GPU of a GPU run. The host process's own (estimate
    // --device cpu: cpu_runtime, glibc_heap) are not charged to the CPU: its budget is for what
    // the run allocates, as run's --cpu-ram (docs/plan.md).
    if (is_gpu(d.device) && e.target == Target::Cuda && (!d.modules.empty() || exec_layers[s] > 0)) d.overheads = over;
  }
  if (stream && largest_offloaded > 0) {
    p.devices[0].staging = 2 * largest_offloaded;
    p.devices[0].overheads = over;
  }
  if (!stream && disk_used && e.runtime == Runtime::Nunchaku && e.workload.mode == Mode::Infer) {
    // nunchaku's engine runs disk modules on the CPU through a ring of stream slots.
    // A MoE layer's slot holds all but its routed experts, read expert by expert into piece
    // slots; a layer in memory whose experts are on disk needs the piece slots alone.
    uint64_t largest_disk = 0, largest_piece = 0;
    for (size_t i = 0; i < e.modules.size() && i < where.size(); ++i) {
      const ModuleCost& m = e.modules[i];
      if (where[i].kind == Device::Kind::Disk) {  // the slot as the engine lays it out (stream_slot_bytes)
        largest_disk = std::max(largest_disk, m.stream_bytes || m.stream_piece_bytes ? m.stream_bytes : m.weight_bytes);
        largest_piece = std::max(largest_piece, m.stream_piece_bytes);
      } else if (apart(i) && experts[i].kind == Device::Kind::Disk) {
        largest_piece = std::max(largest_piece, m.stream_piece_bytes);
      }
    }
    p.devices[cpu].staging = uint64_t(kStreamSlots) * largest_disk +  // the engine's pool (engine_memory.hpp)
                             (largest_piece ? uint64_t(stream_piece_slots(e.spec.num_experts_per_tok)) * largest_piece : 0);
  }

  p.fits = true;
  std::vector<std::string> short_by;
  for (const auto& d : p.devices) {
    if (d.fits()) continue;
    p.fits = false;
    short_by.push_back(fmt::format("{} needs {}, has {}", d.device.str(), format_bytes(d.total()), format_bytes(d.budget)));
  }
  if (disk_used && !r.allow_disk) {
    p.fits = false;
    short_by.push_back("modules left on disk without --disk");
  }
  for (const auto& d : where)
    if (d.kind == Device::Kind::Cuda && slot_of(d) == SIZE_MAX) {
      p.fits = false;
      short_by.push_back("a module is not placed");
      break;
    }
  p.shortfall = fmt::format("{}", fmt::join(short_by, "; "));
  return p;
}

namespace {

// The strategies place roles.sequence in order: a prefix over the GPUs (contiguous
// segments, in device order), then the CPU, then the disk. Followers take the
// embedding's device. Segment costs come from prefix sums (O(1) each) and follow the
// same rules as charge_plan, which stays the authority for the reported numbers.
struct Planner {
  const Estimate& e;
  const PlanRequest& r;
  Roles roles;
  size_t K, n;
  uint64_t over;
  std::vector<uint64_t> w, kv, tr, lay;  // prefix sums over the sequence
  std::vector<uint64_t> wmax_suffix;     // largest weight in sequence[j..n)
  size_t head_pos = SIZE_MAX;             // position of the head holder in the sequence

  Planner(const Estimate& e_, const PlanRequest& r_) : e(e_), r(r_), roles(roles_of(e_)), K(r_.vram.size()) {
    n = roles.sequence.size();
    over = e.target == Target::Cpu ? 0 : overhead_bytes(e);  // GPUs pay the fixed costs of a GPU run only
    w.assign(n + 1, 0), kv.assign(n + 1, 0), tr.assign(n + 1, 0), lay.assign(n + 1, 0), wmax_suffix.assign(n + 1, 0);
    for (size_t j = 0; j < n; ++j) {
      const ModuleCost& m = e.modules[roles.sequence[j]];
      w[j + 1] = w[j] + m.weight_bytes;
      kv[j + 1] = kv[j] + m.kv_bytes;
      tr[j + 1] = tr[j] + m.train_bytes;
      lay[j + 1] = lay[j] + (is_layer(m) ? 1 : 0);
      if (roles.head_holder && *roles.head_holder == roles.sequence[j]) head_pos = j;
    }
    for (size_t j = n; j-- > 0;) wmax_suffix[j] = std::max(wmax_suffix[j + 1], e.modules[roles.sequence[j]].weight_bytes);
  }

  bool head_in(size_t i, size_t j) const { return head_pos >= i && head_pos < j; }

  // What GPU k pays for sequence[i..j) when sequence[prefix..n) is offloaded.
  uint64_t gpu_cost(size_t k, size_t i, size_t j, size_t prefix) const {
    uint64_t weights = w[j] - w[i], cache = kv[j] - kv[i] + tr[j] - tr[i], layers = lay[j] - lay[i];
    bool head = head_in(i, j), used = j > i;
    uint64_t staging = 0;
    if (r.offload_exec == OffloadExec::Gpu && k == 0 && prefix < n) {  // runs the streamed layers
      cache += kv[n] - kv[prefix] + tr[n] - tr[prefix];
      layers += lay[n] - lay[prefix];
      head = head || head_in(prefix, n);
      staging = 2 * wmax_suffix[prefix];
      used = true;
    }
    return weights + cache + activation_share(e, layers, roles.num_layers, true) + (head ? e.logits_bytes : 0) +
           (used ? over : 0) + staging;
  }

  std::vector<Device> expand(const std::vector<Device>& seq_dev) const {
    std::vector<Device> where(roles.n, Device{Device::Kind::Cpu, 0});
    for (size_t j = 0; j < n; ++j) where[roles.sequence[j]] = seq_dev[j];
    for (size_t f : roles.followers) where[f] = roles.embedding ? where[*roles.embedding] : Device{Device::Kind::Cpu, 0};
    return where;
  }

  static Device gpu(size_t k) { return Device{Device::Kind::Cuda, static_cast<int>(k)}; }

  // Greedy over the GPUs with per-device caps: how far into the first `prefix` modules it gets.
  size_t greedy(size_t prefix, const std::vector<uint64_t>& caps, std::vector<Device>* out = nullptr) const {
    size_t pos = 0;
    if (out) out->assign(n, Device{Device::Kind::Cpu, 0});
    for (size_t k = 0; k < K && pos < prefix; ++k) {
      size_t end = pos;
      while (end < prefix && gpu_cost(k, pos, end + 1, prefix) <= caps[k]) ++end;
      if (out)
        for (size_t j = pos; j < end; ++j) (*out)[j] = gpu(k);
      pos = end;
    }
    return pos;
  }

  // Places sequence[prefix..n) on the CPU, the tail on disk while the CPU is short. nunchaku
  // streams disk modules each step, so its MoE layers go first (from the last): on disk one
  // reads its slot and top_k of its experts per token, where a dense module reads all of itself.
  std::vector<Device> offload_rest(std::vector<Device> seq, size_t prefix) const {
    for (size_t j = prefix; j < n; ++j) seq[j] = Device{Device::Kind::Cpu, 0};
    if (!r.allow_disk) return seq;
    std::vector<size_t> order;  // positions, in the order they go to disk
    const bool pieces_first = e.runtime == Runtime::Nunchaku && e.workload.mode == Mode::Infer;
    for (int pass = pieces_first ? 0 : 1; pass < 2; ++pass)
      for (size_t q = n; q > prefix; --q) {
        const bool pieced = e.modules[roles.sequence[q - 1]].stream_piece_bytes > 0;
        if (!pieces_first || pieced == (pass == 0)) order.push_back(q - 1);
      }
    for (size_t j : order) {
      DevicePlan p = charge_plan(e, r, expand(seq));
      if (p.devices[K].fits()) break;
      seq[j] = Device{Device::Kind::Disk, 0};
    }
    return seq;
  }

  // The largest prefix the GPUs can hold. With streamed execution the first GPU's reserve
  // depends on what is offloaded, so each prefix is tried from the longest down.
  size_t max_prefix() const {
    if (K == 0) return 0;
    if (r.offload_exec == OffloadExec::Cpu) return greedy(n, r.vram);
    for (size_t prefix = n + 1; prefix-- > 0;)
      if (greedy(prefix, r.vram) >= prefix) return prefix;
    return 0;
  }

  DevicePlan plan() const {
    const size_t prefix = max_prefix();
    std::vector<Device> seq;
    greedy(prefix, r.vram, &seq);
    if (r.strategy == Strategy::Balanced && prefix > 0) seq = balance(prefix);
    return charge_plan(e, r, expand(offload_rest(seq, prefix)));
  }

  // The smallest common utilization ratio at which the greedy still covers the prefix,
  // so the devices end up evenly loaded rather than the first ones full.
  std::vector<Device> balance(size_t prefix) const {
    auto caps_at = [&](double f) {
      std::vector<uint64_t> c(K);
      for (size_t k = 0; k < K; ++k) c[k] = static_cast<uint64_t>(static_cast<long double>(r.vram[k]) * f);
      return c;
    };
    double lo = 0, hi = 1;
    for (int it = 0; it < 50; ++it) {
      double mid = (lo + hi) / 2;
      if (greedy(prefix, caps_at(mid)) >= prefix) hi = mid;
      else lo = mid;
    }
    std::vector<Device> seq;
    if (greedy(prefix, caps_at(hi), &seq) < prefix) greedy(prefix, r.vram, &seq);
    return seq;
  }
};

}  // namespace

namespace {

bool has_routed_experts(const Estimate& e) {
  return std::any_of(e.modules.begin(), e.modules.end(), [](const ModuleCost& m) { return m.expert_bytes > 0; });
}

// The estimate with every layer's routed experts taken out of its weights.
Estimate without_routed_experts(const Estimate& e) {
  Estimate rest = e;
  for (auto& m : rest.modules) m.weight_bytes -= m.expert_bytes;
  return rest;
}

bool all_on_gpus(const DevicePlan& p) {
  return std::all_of(p.module_device.begin(), p.module_device.end(), is_gpu);
}

// Tensor-granular MoE plan: every layer's attention, norms, router and shared experts (and
// the embedding and head as the layer-granular planner places them) first, with the routed
// experts on the CPU; then experts back onto their layer's GPU, last layer first, while that
// GPU has room. The experts that stay off the GPUs go to the disk, first layers first, while
// the CPU is short (--disk).
DevicePlan split_expert_plan(const Estimate& e, const PlanRequest& r) {
  const Estimate rest = without_routed_experts(e);
  PlanRequest rr = r;
  rr.split_experts = false;
  const Planner pl(rest, rr);
  const size_t prefix = pl.max_prefix();
  std::vector<Device> seq;
  pl.greedy(prefix, r.vram, &seq);
  if (r.strategy == Strategy::Balanced && prefix > 0) seq = pl.balance(prefix);
  for (size_t j = prefix; j < pl.n; ++j) seq[j] = Device{Device::Kind::Cpu, 0};
  const std::vector<Device> where = pl.expand(seq);
  std::vector<Device> experts(e.modules.size(), Device{Device::Kind::Cpu, 0});
  for (size_t i = 0; i < e.modules.size(); ++i)
    if (e.modules[i].expert_bytes == 0 || !is_gpu(where[i])) experts[i] = where[i];
  const size_t K = r.vram.size();
  std::vector<bool> full(K, false);
  for (size_t i = e.modules.size(); i-- > 0;) {
    if (e.modules[i].expert_bytes == 0 || !is_gpu(where[i]) || experts[i] == where[i]) continue;
    const size_t k = static_cast<size_t>(where[i].index);
    if (k >= K || full[k]) continue;
    experts[i] = where[i];
    if (!charge_plan(e, r, where, experts).devices[k].fits()) experts[i] = Device{Device::Kind::Cpu, 0}, full[k] = true;
  }
  if (r.allow_disk)
    for (size_t i = 0; i < e.modules.size(); ++i) {
      if (e.modules[i].expert_bytes == 0 || experts[i].kind != Device::Kind::Cpu) continue;
      if (charge_plan(e, r, where, experts).devices[K].fits()) break;
      experts[i] = Device{Device::Kind::Disk, 0};
    }
  DevicePlan p = charge_plan(e, r, where, experts);
  if (experts == where) p.expert_device.clear();
  return p;
}

// nunchaku's CPU engine short of RAM: every module in memory and the routed experts of the
// first layers on disk, read expert by expert each step (a step reads top_k of a layer's
// experts where a whole layer on disk costs its slot too). nullopt when even every layer's
// experts on disk leave the CPU short.
std::optional<DevicePlan> cpu_expert_disk_plan(const Estimate& e, const PlanRequest& r) {
  const std::vector<Device> where(e.modules.size(), Device{Device::Kind::Cpu, 0});
  std::vector<Device> experts = where;
  const size_t cpu = r.vram.size();
  for (size_t i = 0;; ++i) {
    DevicePlan p = charge_plan(e, r, where, experts);
    if (p.devices[cpu].fits()) return p;
    while (i < e.modules.size() && (e.modules[i].expert_bytes == 0 || !is_layer(e.modules[i]))) ++i;
    if (i == e.modules.size()) return std::nullopt;
    experts[i] = Device{Device::Kind::Disk, 0};
  }
}

}  // namespace

std::vector<int64_t> cpu_expert_layers(const DevicePlan& p, const Estimate& e) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < p.expert_device.size() && i < e.modules.size(); ++i)
    if (e.modules[i].expert_bytes > 0 && e.modules[i].kind == ModuleKind::Layer && !is_gpu(p.expert_device[i]))
      out.push_back(e.modules[i].layer);
  std::sort(out.begin(), out.end());
  return out;
}

DevicePlan make_plan(const Estimate& e, const PlanRequest& request) {
  // A runtime that takes a share of each GPU (vLLM: --gpu-memory-utilization) is planned within
  // it, as estimate's verdict holds it: the experts a vLLM plan moves are its export's.
  PlanRequest r = request;
  if (e.usable_fraction < 1.0)
    for (uint64_t& v : r.vram) v = verdict(e, v).budget;
  if (r.strategy == Strategy::Accelerate)
    throw Error("plan.internal", "the accelerate strategy needs the checkpoint: call plan_accelerate()", {}, Exit::Internal);
  DevicePlan p = Planner(e, r).plan();
  // MoE: when whole layers would leave the GPUs, keep every layer's attention there and move
  // routed experts instead (as llama.cpp's --n-cpu-moe / -ot exps=CPU).
  if (r.split_experts && !r.vram.empty() && r.offload_exec == OffloadExec::Cpu && e.workload.mode == Mode::Infer &&
      !(p.fits && all_on_gpus(p)) && has_routed_experts(e)) {
    DevicePlan s = split_expert_plan(e, r);
    if (s.fits || !p.fits) p = std::move(s);
  }
  if (r.split_experts && r.vram.empty() && r.allow_disk && e.runtime == Runtime::Nunchaku && e.workload.mode == Mode::Infer &&
      has_routed_experts(e) && std::any_of(p.module_device.begin(), p.module_device.end(), [](const Device& d) { return d.kind == Device::Kind::Disk; }))
    if (auto s = cpu_expert_disk_plan(e, r)) p = std::move(*s);
  p.strategy = r.strategy;
  log::info("plan ({}): {}{}", strategy_name(r.strategy), p.fits ? "fits" : "does not fit",
            p.fits ? std::string() : ": " + p.shortfall);
  for (size_t i = 0; i < p.module_device.size() && i < e.modules.size(); ++i)
    if (log::enabled(log::Level::Debug)) log::debug("plan: {} -> {}", e.modules[i].name, p.module_device[i].str());
  return p;
}

Estimate weights_only_estimate(const ModelLayout& layout, const std::map<std::string, uint64_t>& overheads) {
  Estimate e;
  if (layout.spec) e.spec = *layout.spec;
  e.workload.overheads = overheads;
  for (const auto& m : layout.modules) {
    e.modules.push_back({m.name, m.kind, m.layer, m.parameters, m.bytes, 0, 0, 0});
    e.parameters += m.parameters;
  }
  estimate_detail::add_overheads(e, 0);
  return e;
}

Placement plan_placement(const Estimate& e, std::vector<uint64_t> vram, uint64_t cpu_ram) {
  PlanRequest r;
  r.vram = std::move(vram);
  r.cpu_ram = cpu_ram;
  r.allow_disk = true;
  r.split_experts = true;  // as `plan` does: MoE experts to disk before whole layers
  DevicePlan p = make_plan(e, r);
  if (!p.fits)
    throw Error("plan.does_not_fit", "no placement fits: " + p.shortfall,
                {.hint = "give more --cpu-ram, or see `nunchaku plan --min-vram` for the budget it needs"}, Exit::OutOfMemory);
  return p.placement(e);
}

std::optional<uint64_t> min_vram(const Estimate& e, int gpus, OffloadExec exec) {
  if (gpus < 1) return std::nullopt;
  auto all_on_gpus = [&](uint64_t b) {
    PlanRequest r;
    // b is each GPU's memory; a runtime that takes a share of it (vLLM) plans within that share,
    // as make_plan does.
    r.vram.assign(static_cast<size_t>(gpus), e.usable_fraction < 1.0 ? verdict(e, b).budget : b);
    r.offload_exec = exec;
    Planner pl(e, r);
    return pl.greedy(pl.n, r.vram) >= pl.n;
  };
  uint64_t hi = 1;
  while (!all_on_gpus(hi)) {
    if (hi >= (1ull << 62)) return std::nullopt;
    hi *= 2;
  }
  uint64_t lo = 0;  // lo fails (or is 0), hi fits
  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (all_on_gpus(mid)) hi = mid;
    else lo = mid;
  }
  return hi;
}

std::optional<uint64_t> min_vram_without_experts(const Estimate& e, int gpus) {
  if (!has_routed_experts(e)) return std::nullopt;
  return min_vram(without_routed_experts(e), gpus, OffloadExec::Cpu);
}

nlohmann::json to_json(const DevicePlan& p, const Estimate& e) {
  using nlohmann::json;
  json map = json::object(), devs = json::array();
  for (size_t i = 0; i < e.modules.size() && i < p.module_device.size(); ++i)
    if (e.modules[i].loaded) map[e.modules[i].name] = p.module_device[i].str();  // not what the runtime leaves out
  json experts = json::object();
  for (size_t i = 0; i < e.modules.size() && i < p.expert_device.size(); ++i)
    if (e.modules[i].expert_bytes > 0 && p.expert_device[i] != p.module_device[i]) experts[e.modules[i].name] = p.expert_device[i].str();
  for (const auto& d : p.devices) {
    const bool unlimited = d.budget == kUnlimited;
    devs.push_back({{"device", d.device.str()},
                    {"budget_bytes", unlimited ? json(nullptr) : json(d.budget)},
                    {"num_modules", d.modules.size()},
                    {"num_layers", d.layers},
                    {"num_expert_layers", d.expert_layers},
                    {"layer_range", d.layers ? json{d.first_layer, d.last_layer} : json(nullptr)},
                    {"weight_bytes", d.weights},
                    {"kv_cache_bytes", d.kv_cache},
                    {"train_state_bytes", d.train_states},
                    {"activation_bytes", d.activations},
                    {"logits_bytes", d.logits},
                    {"overhead_bytes", d.overheads},
                    {"staging_bytes", d.staging},
                    {"total_bytes", d.total()},
                    {"headroom_bytes", unlimited ? json(nullptr) : json(static_cast<int64_t>(d.budget) - static_cast<int64_t>(d.total()))}});
  }
  return {{"runtime", runtime_name(e.runtime)},
          {"device", e.target == Target::Cpu ? "cpu" : "cuda"},
          {"strategy", strategy_name(p.strategy)},
          {"offload_exec", p.offload_exec == OffloadExec::Cpu ? "cpu" : "gpu"},
          {"device_map", map},
          {"expert_map", experts},
          {"devices", devs},
          {"notes", p.notes}};
}

}  // namespace nunchaku
