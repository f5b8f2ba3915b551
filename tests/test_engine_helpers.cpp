// Out-of-line helpers of test_engine_helpers.hpp that need the estimator's headers (kept out
// of the header: their names would clash with the engine's in files using both namespaces).
#include "tests/test_engine_helpers.hpp"

#include <cstring>

#include "core/error.hpp"
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

std::string engine_error_of(const std::string& src, const std::function<void(nlohmann::json&)>& edit,
                            const engine::EngineOptions& opts, std::string* tensor) {
  TempDir tmp;
  copy_with_header(src, tmp.path.string(), edit);
  try {
    load_engine_model(tmp.path.string(), opts, Device{Device::Kind::Cpu, 0}, {}, 1);
  } catch (const Error& e) {
    *tensor = e.context().tensor;
    CHECK(e.exit_code() == 2);
    return e.code();
  }
  return "";
}

void check_streamed_equals_resident(const std::string& path, const std::vector<int32_t>& prompt,
                                    const engine::EngineOptions& opts) {
  auto r = load_engine_model(path, opts, Device{Device::Kind::Cpu, 0}, {}, 2);
  engine::SeqChunk ch{0, 0, prompt, true};
  const auto a = r.tf->forward({&ch, 1});
  const std::vector<float> resident(a.begin(), a.end());
  const std::vector<int32_t> ids = greedy(*r.tf, prompt, 8);
  for (bool pieces : {false, true}) {
    INFO("expert pieces " << pieces);
    engine::StreamOptions so;
    so.expert_pieces = pieces;
    auto s = load_engine_model(path, opts, Device{Device::Kind::Disk, 0}, so, 2);
    size_t moe = 0;  // the first layer with routed experts (DeepSeek's first layers are dense)
    auto routed = [](const Module& m) { return std::any_of(m.roles.begin(), m.roles.end(), is_expert_role); };
    while (moe < s.layout.modules.size() && !routed(s.layout.modules[moe])) ++moe;
    REQUIRE(moe < s.layout.modules.size());
    CHECK(s.tf->weights().pieces_streamed(moe) == pieces);
    const auto b = s.tf->forward({&ch, 1});
    CHECK(std::equal(resident.begin(), resident.end(), b.begin(), b.end()));
    CHECK(greedy(*s.tf, prompt, 8) == ids);
    CHECK(s.tf->state_bytes() + s.tf->weights().pool_bytes() == s.tf->predicted().allocated());
    if (pieces) CHECK(all_on_disk_plan(s).devices.at(0).staging == s.tf->weights().pool_bytes());
  }
}

uint64_t check_state_is_estimate(const EngineModel& m, int64_t batch, int64_t context, int threads, std::optional<DType> kv) {
  Workload w;
  w.batch = batch;
  w.context = context;
  w.threads = threads;
  w.target = Target::Cpu;
  w.runtime = Runtime::Nunchaku;
  w.kv_dtype = kv;
  const Estimate e = estimate(m.ck, m.layout, w);
  CHECK(e.component("kv_cache") + e.component("activations") + e.component("logits") + e.component("scratch") ==
        m.tf->state_bytes());
  return e.component("kv_cache");
}

}  // namespace nunchaku::test
