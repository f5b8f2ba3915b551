// Out-of-line helpers of test_engine_helpers.hpp that need the estimator's headers (kept out
// of the header: their names would clash with the engine's in files using both namespaces).
#include "tests/test_engine_helpers.hpp"

#include <cstring>

#include "memory/estimate.hpp"
#include "memory/plan.hpp"
#include "tests/helpers.hpp"

namespace nunchaku::test {

void copy_with_header(const std::string& src, const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  write_file(dir + "/config.json", read_text(src + "/config.json"));
  const std::string bytes = read_text(src + "/model.safetensors");
  REQUIRE(bytes.size() > 8);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, size_t(n)));
  edit(header);
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t len = h.size();
  std::memcpy(out.data(), &len, 8);
  write_file(dir + "/model.safetensors", out + h + bytes.substr(8 + size_t(n)));
}

void rename_tensor(nlohmann::json& header, const std::string& from, const std::string& to) {
  header[to] = header.at(from);
  header.erase(from);
}

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
