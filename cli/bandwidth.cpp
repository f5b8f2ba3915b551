#include "cli/bandwidth.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/help.hpp"
#include "cli/workload_options.hpp"
#include "core/error.hpp"
#include "core/units.hpp"

namespace nunchaku::cli {
namespace {
std::string rate(double bytes_per_s) { return fmt::format("{:.0f} GB/s", bytes_per_s / 1e9); }
}  // namespace

// --bandwidth "gpu=1TB,pcie=25GB,host=60GB,disk=3GB" (each optional, bytes per second, the
// size parser's units; "b"/"bit" suffixes are bits): the places a decode step reads from.
Bandwidths parse_bandwidths(const std::string& text) {
  Bandwidths bw;
  for (const std::string& item : split(text, ',')) {
    const auto eq = item.find('=');
    const std::string key = item.substr(0, eq);
    double* to = key == "gpu" ? &bw.gpu : key == "pcie" ? &bw.pcie : key == "host" ? &bw.host : key == "disk" ? &bw.disk : nullptr;
    if (eq == std::string::npos || !to)
      throw Error("usage.bandwidth", fmt::format("--bandwidth: '{}' is not PLACE=RATE with PLACE gpu, pcie, host or disk", item),
                  {.hint = "--bandwidth gpu=1TB,pcie=25GB,host=60GB,disk=3GB"});
    const uint64_t v = parse_bandwidth(item.substr(eq + 1), "--bandwidth");
    if (v == 0) throw Error("usage.bandwidth", fmt::format("--bandwidth {}: a rate of 0 reads nothing", item));
    *to = double(v);
  }
  return bw;
}

// "decode at batch B: at most X tok/s (...)": the plan's bytes per step by place over the rates.
std::string decode_line(const DecodeBound& d, const Bandwidths& bw) {
  std::vector<std::string> parts;
  if (d.gpu_bytes) parts.push_back(fmt::format("{} from GPU memory at {}", format_bytes(d.gpu_bytes), rate(bw.gpu)));
  if (d.host_bytes)
    parts.push_back(d.host_over_pcie ? fmt::format("{} from host memory over PCIe at {}", format_bytes(d.host_bytes), rate(std::min(bw.pcie, bw.host)))
                                     : fmt::format("{} from host memory at {}", format_bytes(d.host_bytes), rate(bw.host)));
  if (d.cpu_moe_bytes)
    parts.push_back(fmt::format("{} of experts by the CPU from host memory at {}", format_bytes(d.cpu_moe_bytes), rate(bw.host)));
  if (d.cpu_moe_disk_bytes)
    parts.push_back(fmt::format("{} of experts by the CPU from disk at {} (mapped beyond --cpu-ram)", format_bytes(d.cpu_moe_disk_bytes),
                                rate(bw.disk)));
  if (d.disk_bytes) parts.push_back(fmt::format("{} from disk at {}", format_bytes(d.disk_bytes), rate(d.host_over_pcie ? std::min(bw.disk, bw.pcie) : bw.disk)));
  return fmt::format("decode at batch {}: at most {:.1f} tok/s, reading {} per step (weights, routed experts as a batch "
                     "reaches them, KV at full context); rates assumed, --bandwidth gives yours",
                     d.batch, d.tokens_per_s, fmt::join(parts, " + "));
}

void add_bandwidth_option(CLI::App* cmd, std::string& to) {
  cmd->add_option("--bandwidth", to, "Read rates for the decode bound: gpu=,pcie=,host=,disk= (bytes/s, 25GB = 25e9; "
                  "default gpu=1TB,pcie=25GB,host=60GB,disk=3GB)")->group(kHardware);
}

nlohmann::json decode_json(const DecodeBound& d, const Bandwidths& bw) {
  return {{"batch", d.batch}, {"tokens_per_s", d.tokens_per_s}, {"seconds_per_step", d.seconds},
          {"bytes_per_step", {{"gpu", d.gpu_bytes}, {"host", d.host_bytes}, {"disk", d.disk_bytes}, {"cpu_moe", d.cpu_moe_bytes},
                              {"cpu_moe_disk", d.cpu_moe_disk_bytes}}},
          {"host_over_pcie", d.host_over_pcie},
          {"bandwidth_bytes_per_s", {{"gpu", bw.gpu}, {"pcie", bw.pcie}, {"host", bw.host}, {"disk", bw.disk}}}};
}

}  // namespace nunchaku::cli
