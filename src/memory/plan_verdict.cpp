// Verdict words and re-planned fixes (plan_verdict.hpp).
#include "memory/plan_verdict.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/units.hpp"
#include "memory/quant.hpp"

namespace nunchaku {
namespace {

bool is_gpu(const Device& d) { return d.kind == Device::Kind::Cuda; }

// Units counted by the verdict: decoder layers, or modules when there are no layers.
size_t units_on(const DeviceCharge& d, bool by_layer) { return by_layer ? d.layers : d.modules.size(); }

}  // namespace

std::string_view plan_status(const DevicePlan& p) {
  if (!p.fits) return kOom;
  bool gpus = false, off = false;
  for (const auto& d : p.devices) {
    if (is_gpu(d.device)) gpus = true;
    else if (!d.modules.empty() || d.expert_layers > 0) off = true;
  }
  return gpus && off ? kFitsWithOffload : kFits;  // no GPU budget: the CPU is the target
}

namespace {

// The modules that are not decoder layers and sit off the GPUs: "lm_head on the CPU".
std::string modules_off_gpu(const DevicePlan& p, const Estimate* e) {
  if (!e) return "";
  std::vector<std::string> parts;
  for (const auto& d : p.devices) {
    if (is_gpu(d.device)) continue;
    std::vector<std::string> names;
    for (size_t i : d.modules)
      if (i < e->modules.size() && e->modules[i].layer < 0) names.push_back(e->modules[i].name);
    if (!names.empty())
      parts.push_back(fmt::format("{} on {}", fmt::join(names, ", "), d.device.kind == Device::Kind::Cpu ? "the CPU" : "disk"));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

std::string plan_verdict(const DevicePlan& p, size_t num_layers, const Estimate* e) {
  if (!p.fits) return "does NOT fit: " + p.shortfall;
  const bool by_layer = num_layers > 0;
  const std::string_view unit = by_layer ? "layer" : "module";
  size_t gpu = 0, cpu = 0, disk = 0, gpus = 0;
  uint64_t smallest = UINT64_MAX;
  for (const auto& d : p.devices) {
    const size_t n = units_on(d, by_layer);
    if (is_gpu(d.device)) {
      gpu += n;
      ++gpus;
      smallest = std::min(smallest, d.budget);
    } else if (d.device.kind == Device::Kind::Cpu) {
      cpu += n;
    } else {
      disk += n;
    }
  }
  const size_t total = gpu + cpu + disk;
  const std::string rest = disk ? fmt::format(", {} on disk", disk) : "";
  if (gpus == 0) {
    size_t experts_on_disk = 0;  // layers kept in memory whose routed experts are on disk
    for (const auto& d : p.devices)
      if (d.device.kind == Device::Kind::Disk) experts_on_disk += d.expert_layers;
    return fmt::format("runs on the CPU{}{}: no GPU budget (--vram) given", disk ? fmt::format(" with {} on disk", plural(disk, unit)) : "",
                       experts_on_disk ? fmt::format(" with the routed experts of {} on disk", plural(experts_on_disk, "layer")) : "");
  }
  if (gpu == 0)
    return fmt::format("runs on the CPU{}: no {} fits in {} of VRAM", disk ? fmt::format(" and disk ({} on disk)", disk) : "", unit,
                       format_bytes(smallest));
  size_t expert_cpu = 0, expert_disk = 0;
  for (const auto& d : p.devices)
    if (d.device.kind == Device::Kind::Cpu) expert_cpu += d.expert_layers;
    else if (d.device.kind == Device::Kind::Disk) expert_disk += d.expert_layers;
  const std::string experts =
      expert_cpu + expert_disk == 0 ? ""
      : fmt::format("; routed experts of {} on the CPU{}", plural(expert_cpu + expert_disk, "layer"),
                    expert_disk ? fmt::format(" ({} of them on disk)", expert_disk) : "");
  const std::string others = by_layer ? modules_off_gpu(p, e) : "";
  if (cpu == 0 && disk == 0 && experts.empty() && !others.empty())  // the layers fit, the head (say) does not
    return fmt::format("fits with offload: all {} {}, {}", plural(total, std::string(unit)), gpus == 1 ? "on the GPU" : "on the GPUs", others);
  if (cpu == 0 && disk == 0)
    return fmt::format("fits {}: all {}{}", experts.empty() ? (gpus == 1 ? "on the GPU" : "on the GPUs") : "with offload",
                       plural(total, std::string(unit)) + (experts.empty() ? "" : gpus == 1 ? " on the GPU" : " on the GPUs"), experts);
  return fmt::format("fits with offload: {} of {} {}s on GPUs, {} on the CPU{}{}", gpu, total, unit, cpu, rest, experts);
}

namespace {

// A size as a flag takes it back exactly: "8G", "512M", "1000B".
std::string size_flag(uint64_t b) {
  if (b && b % (uint64_t(1) << 30) == 0) return fmt::format("{}G", b >> 30);
  if (b && b % (uint64_t(1) << 20) == 0) return fmt::format("{}M", b >> 20);
  return fmt::format("{}B", b);
}

struct Candidate {
  std::string flags, what;
  std::function<void(Workload&, PlanRequest&)> apply;
};

std::vector<Candidate> quant_candidates(const Workload& w) {
  std::vector<Candidate> out;
  for (const QuantWhatIf& q : quant_whatifs(w))
    out.push_back({q.flags, q.what, [s = q.spec](Workload& x, PlanRequest&) { x.quant = s; }});
  return out;
}

struct Fixer {
  const PlanFixInput& in;
  const Replan& replan;

  std::optional<DevicePlan> plan(const Workload& w, const PlanRequest& r) const {
    try {
      DevicePlan p = replan(w, r);
      if (p.fits) return p;
    } catch (const Error&) {
    }
    return std::nullopt;
  }

  // Smallest --cpu-ram that fits (bisection in MiB), given the other changes.
  std::optional<Candidate> cpu_ram(bool disk) const {
    Workload w = in.workload;
    PlanRequest r = in.request;
    r.allow_disk = r.allow_disk || disk;
    uint64_t lo = r.cpu_ram >> 20, hi = uint64_t(1) << 30;  // MiB; 1 PiB is past any host
    auto ok = [&](uint64_t mib) { PlanRequest x = r; x.cpu_ram = mib << 20; return plan(w, x).has_value(); };
    if (!ok(hi)) return std::nullopt;
    while (lo + 1 < hi) {  // ok(hi) holds; ok(lo) does not (the plan failed at lo)
      const uint64_t mid = lo + (hi - lo) / 2;
      if (ok(mid)) hi = mid;
      else lo = mid;
    }
    const uint64_t bytes = hi < 1024 ? hi << 20 : (hi + 1023) / 1024 << 30;  // whole MiB below 1 GiB, else whole GiB
    return Candidate{"--cpu-ram " + size_flag(bytes), "more host memory", [bytes](Workload&, PlanRequest& x) { x.cpu_ram = bytes; }};
  }

  // Longest --context that fits (bisection), given the other changes.
  std::optional<Candidate> context(const PlanRequest& r) const {
    if (in.workload.mode != Mode::Infer || in.context <= 1) return std::nullopt;
    auto ok = [&](int64_t c) { Workload x = in.workload; x.context = c; x.prefill_chunk = std::min(x.prefill_chunk, c); return plan(x, r).has_value(); };
    if (!ok(1)) return std::nullopt;
    int64_t lo = 1, hi = in.context - 1;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (ok(mid)) lo = mid;
      else hi = mid - 1;
    }
    return Candidate{fmt::format("--context {}", lo), "a shorter context", [lo](Workload& x, PlanRequest&) {
                       x.context = lo;
                       x.prefill_chunk = std::min(x.prefill_chunk, lo);
                     }};
  }

  std::optional<Candidate> more_gpus(const PlanRequest& r) const {
    if (r.vram.empty()) return std::nullopt;
    const size_t n = r.vram.size();
    const uint64_t size = *std::min_element(r.vram.begin(), r.vram.end());
    for (size_t g : {n + 1, n + 2, 2 * n, 4 * n, 8 * n}) {
      if (g <= n || g > 64) continue;
      PlanRequest x = r;
      x.vram.assign(g, size);
      Workload w = in.workload;
      w.gpus = static_cast<int>(g);
      if (plan(w, x))
        return Candidate{fmt::format("--vram {} --gpus {}", size_flag(size), g), fmt::format("{} GPUs", g),
                         [g, size](Workload& y, PlanRequest& q) { q.vram.assign(g, size); y.gpus = static_cast<int>(g); }};
    }
    return std::nullopt;
  }

};

}  // namespace

std::vector<PlanFix> plan_fixes(const PlanFixInput& in, const Replan& replan, size_t max_fixes) {
  Fixer f{in, replan};
  std::vector<PlanFix> out;
  auto try_one = [&](const Candidate& c, bool with_disk) {
    if (out.size() >= max_fixes) return;
    Workload w = in.workload;
    PlanRequest r = in.request;
    if (with_disk) r.allow_disk = true;
    c.apply(w, r);
    if (auto p = f.plan(w, r))
      out.push_back({with_disk ? "--disk " + c.flags : c.flags, with_disk ? "modules on disk + " + c.what : c.what,
                     plan_verdict(*p, in.num_layers, in.names), std::string(plan_status(*p)),
                     plan_headroom(*p)});
  };
  auto rounds = [&](bool with_disk) {
    PlanRequest r = in.request;
    if (with_disk) r.allow_disk = true;
    if (in.cpu_ram_given)
      if (auto c = f.cpu_ram(with_disk)) try_one(*c, with_disk);
    auto qs = quant_candidates(in.workload);
    if (!qs.empty()) try_one(qs[0], with_disk);
    if (auto c = f.context(r)) try_one(*c, with_disk);
    if (qs.size() > 1) try_one(qs[1], with_disk);
    if (auto c = f.more_gpus(r)) try_one(*c, with_disk);
  };
  if (!in.request.allow_disk) try_one({"--disk", "modules past the CPU stay on disk (read on use)", [](Workload&, PlanRequest& r) { r.allow_disk = true; }}, false);
  rounds(false);
  if (out.empty() && !in.request.allow_disk) rounds(true);
  return out;
}

int64_t plan_headroom(const DevicePlan& p) {
  int64_t least = INT64_MAX;
  for (const auto& d : p.devices)
    if (d.budget != UINT64_MAX && (!d.modules.empty() || is_gpu(d.device)))
      least = std::min(least, int64_t(d.budget) - int64_t(d.total()));
  return least == INT64_MAX ? 0 : least;
}

nlohmann::json verdict_json(const DevicePlan& p, size_t num_layers, const Estimate* e) {
  return {{"fits", p.fits},
          {"status", plan_status(p)},
          {"text", plan_verdict(p, num_layers, e)},
          {"headroom_bytes", plan_headroom(p)},
          {"shortfall", p.fits ? nlohmann::json(nullptr) : nlohmann::json(p.shortfall)}};
}

nlohmann::json to_json(const std::vector<PlanFix>& fixes) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& f : fixes)  // each fix is a plan that fits (plan_fixes keeps no other)
    a.push_back({{"subcommand", "plan"},
                 {"flags", f.flags},
                 {"what", f.what},
                 {"verdict", {{"fits", true}, {"status", f.status}, {"text", f.verdict}, {"headroom_bytes", f.headroom}, {"shortfall", nullptr}}}});
  return a;
}

// 8- and 4-bit what-ifs in the runtime's own formats (as estimate suggests them).
std::vector<QuantWhatIf> quant_whatifs(const Workload& w) {
  if (w.mode != Mode::Infer || w.quant.scheme != QuantScheme::None) return {};
  const Runtime rt = w.runtime.value_or(Runtime::Nunchaku);
  auto q = [](int bits, std::string flags, std::string label, QuantSpec s) {
    return QuantWhatIf{std::move(flags), fmt::format("{}-bit weights ({})", bits, label), s};
  };
  if (rt == Runtime::Transformers)
    return {q(8, "--quant int8", "int8", parse_quant("int8")), q(4, "--quant nf4", "nf4", parse_quant("nf4", 4, 64))};
  if (rt == Runtime::Vllm)
    return {q(8, "--quant gptq --quant-bits 8", "gptq", parse_quant("gptq", 8)), q(4, "--quant awq", "awq", parse_quant("awq"))};
  return {q(8, "--quant q8_0", "q8_0", parse_quant("q8_0")), q(4, "--quant q4_k_m", "q4_k_m", parse_quant("q4_k_m"))};
}

std::optional<OffloadAnswer> offload_answer(const Estimate& e, const std::vector<uint64_t>& vram, uint64_t cpu_ram) {
  if (vram.empty()) return std::nullopt;
  PlanRequest r;
  r.vram = vram;
  r.cpu_ram = cpu_ram;
  r.split_experts = true;  // as plan does
  DevicePlan p;
  try {
    p = make_plan(e, r);
  } catch (const Error&) {
    return std::nullopt;
  }
  if (plan_status(p) != kFitsWithOffload) return std::nullopt;
  OffloadAnswer a;
  a.verdict = plan_verdict(p, static_cast<size_t>(std::max<int64_t>(0, e.spec.num_layers)), &e);
  for (const auto& d : p.devices) {
    a.weights += d.weights;
    if (!is_gpu(d.device)) a.off_gpu_weights += d.weights;
  }
  return a;
}

}  // namespace nunchaku
