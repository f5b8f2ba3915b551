// Out-of-line helpers of test_engine_helpers.hpp that need the estimator's headers (kept out
// of the header: their names would clash with the engine's in files using both namespaces).
#include "tests/test_engine_helpers.hpp"

#include "memory/estimate.hpp"
#include "memory/plan.hpp"

namespace nunchaku::test {

DevicePlan all_on_disk_plan(const EngineModel& m) {
  Workload w;
  w.runtime = Runtime::Nunchaku;
  w.target = Target::Cpu;
  const Estimate e = estimate(m.ck, m.layout, w);
  PlanRequest r;
  r.cpu_ram = 1ull << 40;
  r.allow_disk = true;
  return charge_plan(e, r, std::vector<Device>(e.modules.size(), Device{Device::Kind::Disk, 0}));
}

}  // namespace nunchaku::test
