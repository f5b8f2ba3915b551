// Shared by fuzz_config and fuzz_estimate: estimate and plan a described model under a few
// workloads and budgets (tiny, ordinary and huge), then serialize both documents. Hostile
// dimensions must end in nunchaku::Error, never in a crash, a sanitizer report (overflow
// is UB-checked) or a plan that places a module twice or not at all when it says it fits.
#pragma once

#include <cstdint>

#include "core/error.hpp"
#include "core/text.hpp"
#include "memory/estimate.hpp"
#include "memory/plan.hpp"
#include "model/model.hpp"

namespace nunchaku::fuzz {

inline void estimate_and_plan(const Checkpoint& ck, const ModelLayout& layout, uint8_t knobs) {
  if (!layout.spec) return;
  static const int64_t kContexts[] = {0, 1, 4096, int64_t(1) << 40};
  static const int64_t kBatches[] = {1, 7, int64_t(1) << 30, 3};
  Workload w;
  w.context = kContexts[knobs & 3];
  w.batch = kBatches[(knobs >> 2) & 3];
  w.target = (knobs & 0x10) ? Target::Cpu : Target::Cuda;
  try {
    Estimate e = estimate(ck, layout, w);
    (void)dump_json(to_json(e));
    PlanRequest r;
    r.vram = (knobs & 0x20) ? std::vector<uint64_t>{uint64_t(1) << 30, uint64_t(24) << 30} : std::vector<uint64_t>{};
    r.cpu_ram = (knobs & 0x40) ? UINT64_MAX / 2 : uint64_t(8) << 30;
    r.allow_disk = knobs & 0x80;
    DevicePlan p = make_plan(e, r);
    if (p.module_device.size() != e.modules.size()) __builtin_trap();
    (void)dump_json(to_json(p, e));
  } catch (const Error&) {
  }
}

}  // namespace nunchaku::fuzz
