// How fast a plan can decode at best: the bytes one decode step reads from each place the
// plan puts them (GPU memory, host memory, disk) over the bandwidth each is read at. A
// routed expert is read when a token of the batch routes to it: at batch B a layer reads
// 1 - (1 - k/E)^B of its E experts (top-k routing, spread evenly); the KV cache is read
// whole (every sequence at its full context); the embedding reads B rows. An upper bound:
// compute, launches and overlap are left out. nunchaku's mixtures of experts beside a GPU
// (ModuleCost::cpu_moe_bytes) are read by the CPU in host memory, at the host rate.
#pragma once

#include <cstdint>

#include "memory/estimate.hpp"
#include "memory/plan.hpp"

namespace nunchaku {

// Bytes per second each place is read at (decimal: 25 GB/s = 25e9). The defaults are
// assumptions, printed beside every bound: a consumer GPU's memory, PCIe 4.0 x16,
// dual-channel DDR5, an NVMe SSD.
struct Bandwidths {
  double gpu = 1.0e12, pcie = 25e9, host = 60e9, disk = 3e9;
};

struct DecodeBound {
  int64_t batch = 1;
  uint64_t gpu_bytes = 0, host_bytes = 0, disk_bytes = 0;  // read per decode step
  uint64_t cpu_moe_bytes = 0;   // mixtures of experts the CPU runs beside a GPU, read in host memory (nunchaku)
  // ... and the share of them read from disk again: mapped from the file, they outgrow what
  // the plan leaves of the CPU's budget by that fraction, read as often as the rest.
  uint64_t cpu_moe_disk_bytes = 0;
  bool host_over_pcie = false;  // host-memory modules streamed to the GPU (offload_exec gpu), not run on the CPU
  double seconds = 0;           // per step
  double tokens_per_s = 0;      // batch / seconds
};

// Fraction of a layer's routed experts one step of `batch` sequences reads (1 when dense).
double routed_fraction(int64_t experts, int64_t top_k, int64_t batch);

DecodeBound decode_bound(const Estimate& e, const DevicePlan& p, int64_t batch, const Bandwidths& bw);

}  // namespace nunchaku
