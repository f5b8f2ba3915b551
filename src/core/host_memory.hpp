// How much host memory this process may still take: the least of the kernel's MemAvailable,
// what is left under the address-space limit (RLIMIT_AS, `ulimit -v`) and what is left under
// the cgroup memory limits (v2 memory.max of this cgroup and its ancestors, v1
// memory.limit_in_bytes). Budgets that default to "the host's memory" (--cpu-ram, run's
// --batch-size auto) use it, so a limited shell or container is planned for what it can
// really allocate.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nunchaku {

struct HostMemory {
  uint64_t bytes = 0;     // available to this process; 0: unknown
  std::string limited_by;  // "" (MemAvailable), "ulimit -v" or "cgroup memory.max <path>"
};
HostMemory host_memory_available();

// The parts, for tests: what is left of `limit` with `used` taken (0 when used >= limit).
uint64_t left_under(uint64_t limit, uint64_t used);
// A cgroup v2 memory.max / v1 limit_in_bytes text: the limit, or nothing for "max" (or a
// v1 "unlimited" value of 2^63 rounded to pages, or text that is not a number).
std::optional<uint64_t> parse_cgroup_limit(std::string_view text);
// The value of `key` ("VmSize:", "MemAvailable:") in a /proc status or meminfo text, in bytes.
std::optional<uint64_t> parse_kb_field(std::string_view text, std::string_view key);

}  // namespace nunchaku
