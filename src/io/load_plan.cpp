// Stages 0, 1 and 3a of the loader (load_stages.hpp): what goes where, before any memory
// is allocated or byte read.
#include <algorithm>

#include "core/error.hpp"
#include "io/convert.hpp"
#include "io/load_stages.hpp"

namespace nunchaku::load {
namespace {

constexpr uint64_t kPage = kIoPage;

const TensorInfo& tensor_of(const Checkpoint& ck, size_t ti) {
  if (ti >= ck.tensors.size()) throw Error("load.bad_layout", "module refers to a missing tensor", {}, Exit::Internal);
  return ck.tensors[ti];
}

// The page-aligned file range covering a CPU module's tensors, when they lie in one file,
// none needs conversion and the range holds little else (on = false otherwise: the module
// is copied). A module whose tensors are spread over the file (a writer that puts every
// layer's norms at the end, say) would map, and fault in, bytes of other modules: 16 layers
// of a 1 GB GGUF written so mapped 8 GiB between them.
MapRange map_range(const Checkpoint& ck, const Module& m, std::optional<DType> dtype) {
  MapRange r{true, UINT32_MAX, UINT64_MAX, 0};
  uint64_t end = 0, bytes = 0;
  for (size_t ti : m.tensors) {
    const TensorInfo& t = tensor_of(ck, ti);
    const bool conv = dtype && t.dtype != *dtype && conversion_supported(t.dtype, *dtype);
    if (conv || (r.file != UINT32_MAX && t.file != r.file) || t.file >= ck.files.size()) r.on = false;
    r.file = t.file;
    r.off = std::min(r.off, t.offset);
    end = std::max(end, t.offset + t.nbytes);
    bytes += t.nbytes;
  }
  if (!r.on || end <= r.off) return MapRange{};
  // Alignment padding between tensors (GGUF: 32 B; safetensors: none) and a page at each end.
  if (end - r.off > bytes + uint64_t(m.tensors.size()) * 256 + 2 * kPage) return MapRange{};
  r.off &= ~(kPage - 1);
  r.len = end - r.off;
  return r;
}

// Units of one copied module: runs of unconverted tensors (each starting at an offset
// congruent to its file offset mod 4096, so it reads straight into place), then each
// converted tensor in a 256-aligned slot. Returns the module's allocation size.
uint64_t module_units(const Checkpoint& ck, const Module& m, size_t mi, std::optional<DType> dtype, UnitPlan& p) {
  std::vector<size_t> plain, conv;
  for (size_t ti : m.tensors) {
    const TensorInfo& t = tensor_of(ck, ti);
    if (t.file >= ck.files.size())
      throw Error("load.bad_layout", "tensor refers to a missing file", {.tensor = t.name}, Exit::Internal);
    const uint32_t es = convert_elem_bytes(t.dtype);
    bool c = dtype && t.dtype != *dtype && conversion_supported(t.dtype, *dtype) && es && t.nbytes % es == 0;
    (c ? conv : plain).push_back(ti);
  }
  std::sort(plain.begin(), plain.end(), [&](size_t a, size_t b) {
    const auto &x = ck.tensors[a], &y = ck.tensors[b];
    return x.file != y.file ? x.file < y.file : x.offset < y.offset;
  });
  uint64_t cursor = 0;
  for (size_t k = 0; k < plain.size();) {
    Unit u;
    const TensorInfo& first = ck.tensors[plain[k]];
    u.file = first.file;
    u.off = first.offset;
    uint64_t end = first.offset + first.nbytes;
    u.tensors.push_back(plain[k]);
    for (++k; k < plain.size(); ++k) {
      const TensorInfo& t = ck.tensors[plain[k]];
      if (t.file != u.file || t.offset > end + kRunGap) break;
      end = std::max(end, t.offset + t.nbytes);
      u.tensors.push_back(plain[k]);
    }
    u.len = end - u.off;
    u.module = mi;
    u.dst_off = cursor + ((u.off - cursor) & (kPage - 1));  // congruent to the file offset mod 4096
    cursor = u.dst_off + u.len;
    for (size_t ti : u.tensors) {
      const TensorInfo& t = ck.tensors[ti];
      p.slot_of[ti] = {u.dst_off + (t.offset - u.off), t.dtype, t.nbytes};
    }
    if (u.len) p.units.push_back(std::move(u));
  }
  for (size_t ti : conv) {
    const TensorInfo& t = ck.tensors[ti];
    Unit u;
    u.file = t.file;
    u.off = t.offset;
    u.len = t.nbytes;
    u.module = mi;
    u.convert = true;
    u.from = t.dtype;
    u.to = *dtype;
    u.tensors = {ti};
    u.dst_off = align_up(cursor, 256);
    const uint64_t out = t.nbytes / convert_elem_bytes(t.dtype) * convert_elem_bytes(*dtype);
    cursor = u.dst_off + out;
    p.slot_of[ti] = {u.dst_off, *dtype, out};
    ++p.converted_tensors;
    if (u.len) p.units.push_back(std::move(u));
  }
  return cursor;
}

// An expert_map entry apart from its layer's device: the layer's routed-expert tensors (its
// whole mixture of experts with Placement::moe_on_host) become a module of their own,
// "<layer> (routed experts)" ("(mixture of experts)"), placed there and appended after every
// module of the layout, so the layout's module indices (the engine's) are unchanged.
void split_experts(const Checkpoint& ck, Placed& r) {
  const size_t n = r.layout.modules.size();
  const bool whole = r.placement.moe_on_host;
  for (size_t mi = 0; mi < n; ++mi) {
    const auto at = r.placement.experts.find(r.layout.modules[mi].name);
    if (at == r.placement.experts.end() || at->second == r.placement.device_of(at->first)) continue;
    Module experts{.name = at->first + (whole ? " (mixture of experts)" : " (routed experts)"), .kind = ModuleKind::Other,
                   .layer = r.layout.modules[mi].layer};
    Module& m = r.layout.modules[mi];
    Module rest = m;
    rest.tensors.clear(), rest.roles.clear(), rest.bytes = 0;
    for (size_t k = 0; k < m.tensors.size(); ++k) {
      const bool routed = k < m.roles.size() && (whole ? is_expert_part_role(m.roles[k]) : is_expert_role(m.roles[k]));
      Module& to = routed ? experts : rest;
      to.tensors.push_back(m.tensors[k]);
      to.bytes += tensor_of(ck, m.tensors[k]).nbytes;
      if (k < m.roles.size()) to.roles.push_back(m.roles[k]);
    }
    m = std::move(rest);
    r.placement.modules[experts.name] = at->second;
    if (whole) r.cpu_read.push_back(r.layout.modules.size());
    r.layout.modules.push_back(std::move(experts));
  }
}

}  // namespace

Placed complete_placement(const Checkpoint& ck, const ModelLayout& layout, const Placement& placement) {
  Placed r{layout, placement, {}};
  std::vector<char> covered(ck.tensors.size(), 0);
  for (const auto& m : r.layout.modules)
    for (size_t i : m.tensors)
      if (i < covered.size()) covered[i] = 1;
  Module extra{.name = "(ungrouped)", .kind = ModuleKind::Other};
  for (size_t i = 0; i < covered.size(); ++i)
    if (!covered[i]) {
      extra.tensors.push_back(i);
      extra.bytes += ck.tensors[i].nbytes;
    }
  if (!extra.tensors.empty()) {
    r.layout.modules.push_back(extra);
    if (!r.placement.modules.count(extra.name)) r.placement.modules[extra.name] = Device{Device::Kind::Cpu, 0};
    r.notes.push_back(std::to_string(extra.tensors.size()) + " tensors in no module were loaded to cpu as '(ungrouped)'");
  }
  check_placement(r.placement, r.layout);
  split_experts(ck, r);
  return r;
}

UnitPlan plan_units(const Checkpoint& ck, const Placed& placed, std::optional<DType> dtype, bool map_host,
                    bool map_cpu_read) {
  const ModelLayout& layout = placed.layout;
  UnitPlan p;
  p.slot_of.resize(ck.tensors.size());
  p.module_bytes.assign(layout.modules.size(), 0);
  p.module_dev.resize(layout.modules.size());
  p.mapped.resize(layout.modules.size());
  for (size_t mi = 0; mi < layout.modules.size(); ++mi) {
    const Module& m = layout.modules[mi];
    const Device dev = placed.placement.device_of(m.name);
    p.module_dev[mi] = dev;
    if (dev.kind == Device::Kind::Disk) continue;
    const bool cpu_read = std::find(placed.cpu_read.begin(), placed.cpu_read.end(), mi) != placed.cpu_read.end();
    if (dev.kind == Device::Kind::Cpu && (map_host || (cpu_read && map_cpu_read)) && !m.tensors.empty()) {
      p.mapped[mi] = map_range(ck, m, dtype);
      if (p.mapped[mi].on) continue;
    }
    p.module_bytes[mi] = module_units(ck, m, mi, dtype, p);
    if (dev.kind == Device::Kind::Cpu) p.host_module_bytes += p.module_bytes[mi];
  }
  std::sort(p.units.begin(), p.units.end(), [](const Unit& a, const Unit& b) {
    return a.file != b.file ? a.file < b.file : a.off < b.off;
  });
  return p;
}

SinkKind sink_kind(const Unit& u, Device module_device) {
  if (module_device.kind == Device::Kind::Cuda) return SinkKind::Cuda;
  return u.convert ? SinkKind::CpuConvert : SinkKind::Host;
}

std::vector<Chunk> cut_chunks(const UnitPlan& p, uint64_t cap) {
  std::vector<Chunk> chunks;
  for (size_t ui = 0; ui < p.units.size(); ++ui) {
    const Unit& u = p.units[ui];
    const SinkKind sink = sink_kind(u, p.module_dev[u.module]);
    for (uint64_t at = u.off; at < u.off + u.len; at += cap) chunks.push_back({ui, at, std::min(cap, u.off + u.len - at), sink});
  }
  return chunks;
}

std::string tensor_at(const Checkpoint& ck, const Unit& u, uint64_t at) {
  for (size_t i : u.tensors) {
    const auto& t = ck.tensors[i];
    if (at >= t.offset && at < t.offset + std::max<uint64_t>(t.nbytes, 1)) return t.name;
  }
  return u.tensors.empty() ? "" : ck.tensors[u.tensors.front()].name;
}

}  // namespace nunchaku::load
