#include "memory/decode_bound.hpp"

#include <algorithm>
#include <cmath>

namespace nunchaku {

double routed_fraction(int64_t experts, int64_t top_k, int64_t batch) {
  if (experts <= 0 || top_k <= 0) return 1.0;
  const double k = double(std::min(top_k, experts)) / double(experts);
  return 1.0 - std::pow(1.0 - k, double(std::max<int64_t>(batch, 1)));
}

namespace {

// The fraction of the host-mapped mixtures of experts (ModuleCost::cpu_moe_bytes) that the
// CPU's budget, less what the plan charges it, cannot hold: pages the kernel reads from the
// file again when tokens route to them.
double cpu_moe_spill(const Estimate& e, const DevicePlan& p) {
  double moe = 0;
  for (const ModuleCost& m : e.modules) moe += double(m.cpu_moe_bytes);
  const auto cpu = std::find_if(p.devices.begin(), p.devices.end(), [](const DeviceCharge& c) { return c.device.kind == Device::Kind::Cpu; });
  if (moe <= 0 || cpu == p.devices.end()) return 0;
  const double left = cpu->budget > cpu->total() ? double(cpu->budget - cpu->total()) : 0;
  return moe > left ? (moe - left) / moe : 0;
}

}  // namespace

DecodeBound decode_bound(const Estimate& e, const DevicePlan& p, int64_t batch, const Bandwidths& bw) {
  DecodeBound d;
  d.batch = std::max<int64_t>(batch, 1);
  const double routed = routed_fraction(e.spec.num_experts, e.spec.num_experts_per_tok, d.batch);
  const bool has_head = std::any_of(e.modules.begin(), e.modules.end(), [](const ModuleCost& m) { return m.kind == ModuleKind::Head; });
  const int64_t vocab = std::max<int64_t>(e.spec.vocab_size, 1);
  double gpu = 0, host = 0, disk = 0, cpu_moe = 0;
  auto add = [&](Device where, double bytes) {
    (where.kind == Device::Kind::Cuda ? gpu : where.kind == Device::Kind::Disk ? disk : host) += bytes;
  };
  bool gpus = false;
  for (size_t i = 0; i < e.modules.size() && i < p.module_device.size(); ++i) {
    const ModuleCost& m = e.modules[i];
    const Device at = p.module_device[i];
    gpus = gpus || at.kind == Device::Kind::Cuda;
    double bytes = double(m.weight_bytes);
    if (m.kind == ModuleKind::Embedding && has_head)  // a lookup: B rows of the table
      bytes = bytes * double(std::min<int64_t>(d.batch, vocab)) / double(vocab);
    const double experts = double(std::min(m.expert_bytes, m.weight_bytes));
    if (experts > 0) {
      bytes -= experts;
      add(i < p.expert_device.size() ? p.expert_device[i] : at, experts * routed);
    }
    add(at, bytes + double(m.kv_bytes));
    cpu_moe += double(m.cpu_moe_bytes - m.cpu_moe_expert_bytes) + double(m.cpu_moe_expert_bytes) * routed;
  }
  const double spill = cpu_moe_spill(e, p);
  d.cpu_moe_disk_bytes = uint64_t(cpu_moe * spill);
  d.cpu_moe_bytes = uint64_t(cpu_moe) - d.cpu_moe_disk_bytes;
  d.gpu_bytes = uint64_t(gpu);
  d.host_bytes = uint64_t(host);
  d.disk_bytes = uint64_t(disk);
  d.host_over_pcie = gpus && p.offload_exec == OffloadExec::Gpu;
  const double host_rate = d.host_over_pcie ? std::min(bw.pcie, bw.host) : bw.host;
  const double disk_rate = d.host_over_pcie ? std::min(bw.disk, bw.pcie) : bw.disk;
  d.seconds = gpu / bw.gpu + host / host_rate + disk / disk_rate + double(d.cpu_moe_bytes) / bw.host +
              double(d.cpu_moe_disk_bytes) / bw.disk;
  d.tokens_per_s = d.seconds > 0 ? double(d.batch) / d.seconds : 0;
  return d;
}

}  // namespace nunchaku
