#include "core/host_memory.hpp"

#include <sys/resource.h>

#include <charconv>
#include <fstream>
#include <sstream>

namespace nunchaku {
namespace {

std::string read_small(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<uint64_t> parse_number(std::string_view t) {
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.remove_suffix(1);
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || end != t.data() + t.size() || t.empty()) return std::nullopt;
  return v;
}

void take(HostMemory& m, uint64_t bytes, std::string why) {
  if (m.bytes == 0 || bytes < m.bytes) m = {bytes, std::move(why)};
}

// The cgroup (v2 "0::/path", v1 "N:...memory...:/path") of this process, and its limits.
void apply_cgroups(HostMemory& m) {
  std::istringstream lines(read_small("/proc/self/cgroup"));
  for (std::string line; std::getline(lines, line);) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    const bool v2 = line.compare(0, a, "0") == 0 && controllers.empty();
    const bool v1 = controllers.find("memory") != std::string::npos;
    if (!v2 && !v1) continue;
    const std::string root = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
    // This cgroup and each ancestor: the tightest limit binds.
    for (std::string p = path;; p = p.substr(0, p.rfind('/'))) {
      const std::string dir = root + (p == "/" ? "" : p);
      const auto limit = parse_cgroup_limit(read_small(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes")));
      const auto used = parse_number(read_small(dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes")));
      if (limit) take(m, left_under(*limit, used.value_or(0)), (v2 ? "cgroup memory.max " : "cgroup memory.limit_in_bytes ") + dir);
      if (p.empty() || p == "/") break;
    }
  }
}

}  // namespace

uint64_t left_under(uint64_t limit, uint64_t used) { return used >= limit ? 0 : limit - used; }

std::optional<uint64_t> parse_cgroup_limit(std::string_view text) {
  auto v = parse_number(text);
  if (!v || *v >= (uint64_t(1) << 62)) return std::nullopt;  // "max", or v1's "no limit" (2^63 - a page)
  return v;
}

std::optional<uint64_t> parse_kb_field(std::string_view text, std::string_view key) {
  for (size_t at = 0; at < text.size();) {
    size_t nl = text.find('\n', at);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(at, nl - at);
    at = nl + 1;
    if (line.substr(0, key.size()) != key) continue;
    line.remove_prefix(key.size());
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    const size_t sp = line.find(' ');
    if (auto kb = parse_number(line.substr(0, sp))) return *kb * 1024;
    return std::nullopt;
  }
  return std::nullopt;
}

HostMemory host_memory_available() {
  HostMemory m;
  if (auto avail = parse_kb_field(read_small("/proc/meminfo"), "MemAvailable:")) m.bytes = *avail;
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const auto vm = parse_kb_field(read_small("/proc/self/status"), "VmSize:");
    take(m, left_under(uint64_t(rl.rlim_cur), vm.value_or(0)), "ulimit -v");
  }
  apply_cgroups(m);
  return m;
}

}  // namespace nunchaku
