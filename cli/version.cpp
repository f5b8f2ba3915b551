// --version (version.hpp). The build facts come from CMake: NUNCHAKU_VERSION, NUNCHAKU_BUILD_TYPE,
// NUNCHAKU_CUDA_TOOLKIT, and the git commit from the header cmake/git_commit.cmake writes at
// every build (so an incremental build does not report a stale commit).
#include "cli/version.hpp"

#include <algorithm>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/json_doc.hpp"
#include "cli/nunchaku_git_commit.hpp"  // generated: NUNCHAKU_GIT_COMMIT
#include "core/text.hpp"
#include "core/units.hpp"
#include "cuda/device_info.hpp"
#include "engine/kernels.hpp"

namespace nunchaku::cli {
namespace {

std::string compiler() {
#if defined(__clang__)
  return fmt::format("clang {}.{}.{}", __clang_major__, __clang_minor__, __clang_patchlevel__);
#elif defined(__GNUC__)
  return fmt::format("GCC {}.{}.{}", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
#else
  return "unknown";
#endif
}

}  // namespace

nlohmann::json version_json() {
  using nlohmann::json;
  json j = json_document("version");
  j["version"] = NUNCHAKU_VERSION;
  j["git_commit"] = NUNCHAKU_GIT_COMMIT[0] ? json(NUNCHAKU_GIT_COMMIT) : json(nullptr);
  j["build_type"] = NUNCHAKU_BUILD_TYPE;
  j["compiler"] = compiler();
  j["cxx_standard"] = __cplusplus;
  std::string why;
  json devices = json::array();
  for (const auto& d : cuda::list_devices(&why))
    devices.push_back({{"index", d.index},
                       {"name", d.name},
                       {"compute_capability", fmt::format("{}.{}", d.cc_major, d.cc_minor)},
                       {"total_bytes", d.total_bytes},
                       {"free_bytes", d.free_bytes}});
  j["cuda"] = {{"compiled_in", cuda::compiled_in()},
               {"toolkit_version", cuda::compiled_in() && NUNCHAKU_CUDA_TOOLKIT[0] ? json(NUNCHAKU_CUDA_TOOLKIT) : json(nullptr)},
               {"devices", devices},
               {"no_devices_reason", devices.empty() ? json(why) : json(nullptr)}};
  json isas = json::array();
  for (engine::Isa isa : engine::kAllIsas)
    if (engine::isa_available(isa)) isas.push_back(std::string(engine::isa_name(isa)));
  j["cpu"] = {{"isa", std::string(engine::isa_name(engine::active_isa()))},
              {"isas_available", isas},
              {"num_hardware_threads", std::thread::hardware_concurrency()}};
  return j;
}

void print_version(bool as_json) {
  const nlohmann::json j = version_json();
  if (as_json) {
    fmt::print("{}\n", dump_json(j, 2));
    return;
  }
  fmt::print("nunchaku {}{}\n", NUNCHAKU_VERSION, j["git_commit"].is_null() ? "" : " (git " + j["git_commit"].get<std::string>() + ")");
  fmt::print("build: {}, {}, C++{}\n", NUNCHAKU_BUILD_TYPE, j["compiler"].get<std::string>(), __cplusplus / 100 % 100);
  const auto& c = j["cuda"];
  fmt::print("CUDA: {}\n", c["compiled_in"].get<bool>()
                               ? "compiled in" + (c["toolkit_version"].is_null() ? "" : " (toolkit " + c["toolkit_version"].get<std::string>() + ")")
                               : std::string("not compiled in"));
  if (c["devices"].empty()) fmt::print("CUDA devices: none ({})\n", c["no_devices_reason"].get<std::string>());
  for (const auto& d : c["devices"]) {
    std::string sm = d["compute_capability"].get<std::string>();
    sm.erase(std::remove(sm.begin(), sm.end(), '.'), sm.end());
    fmt::print("CUDA device {}: {} (sm_{}), {} total, {} free\n", d["index"].get<int>(), printable(d["name"].get<std::string>()),
               sm, format_bytes(d["total_bytes"].get<uint64_t>()), format_bytes(d["free_bytes"].get<uint64_t>()));
  }
  const auto isas = j["cpu"]["isas_available"].get<std::vector<std::string>>();
  fmt::print("CPU engine: {} (available here: {}; NUNCHAKU_ISA=scalar|avx2|avx512 chooses), {}\n",
             j["cpu"]["isa"].get<std::string>(), fmt::join(isas, ", "),
             plural(j["cpu"]["num_hardware_threads"].get<unsigned>(), "hardware thread"));
}

}  // namespace nunchaku::cli
