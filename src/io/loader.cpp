#include "io/loader.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sys/mman.h>
#include <sys/resource.h>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/trace.hpp"
#include "core/file.hpp"
#include "core/log.hpp"
#include "core/units.hpp"
#include "cuda/loader.hpp"
#include "io/convert.hpp"
#include "io/load_sinks.hpp"
#include "io/load_stages.hpp"

namespace nunchaku {
namespace load {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

TensorAt namer(const Checkpoint& ck, const Unit& u) {
  return [&ck, &u](uint64_t at) { return tensor_at(ck, u, at); };
}

void check_options(const LoadOptions& o) {
  if (o.dtype && *o.dtype != DType::F16 && *o.dtype != DType::BF16)
    throw Error("load.unsupported_conversion", "--dtype must be fp16 or bf16, not " + std::string(dtype_name(*o.dtype)));
  if (o.staging_buffers < 1 || o.staging_buffers > 1024)
    throw Error("usage.staging", "--staging-buffers must be between 1 and 1024");
  if (o.staging_bytes < kIoPage || o.staging_bytes > (16ull << 30))
    throw Error("usage.staging", "--staging-size must be between 4 KiB and 16 GiB");
}

// The CUDA devices the placement uses, checked available, with their memory use before the load.
std::map<int, uint64_t> open_cuda_devices(const Placement& placement) {
  std::map<int, uint64_t> used_before;
  for (const auto& [_, d] : placement.modules)
    if (d.kind == Device::Kind::Cuda && !used_before.count(d.index)) {
      std::string why;
      if (!cuda::loader_available(&why))
        throw Error("load.no_cuda", "the placement puts modules on " + d.str() + " but CUDA is unavailable: " + why,
                    {.hint = "use --device cpu, or a plan without cuda devices"});
      cuda::MemInfo mi;
      if (!cuda::mem_info(d.index, mi, &why))
        throw Error("load.no_cuda", "cannot query " + d.str() + ": " + why, {.hint = "is the device index right?"});
      used_before[d.index] = mi.total_bytes - mi.free_bytes;
    }
  return used_before;
}

// A populated read-only mapping of a mapped CPU module's file range.
void* map_module(const Checkpoint& ck, const Module& m, const MapRange& r) {
  const auto& fi = ck.files[r.file];
  File f = File::open_read_only(fi.path);
  if (r.off + r.len > f.size())  // truncated since it was indexed: mapping past EOF would SIGBUS
    throw Error("load.short_read", "file ended at byte " + std::to_string(f.size()) + " before the module's tensor data",
                {.file = fi.path, .tensor = ck.tensors[m.tensors.front()].name, .offset = f.size(),
                 .hint = "the file was truncated or changed after it was indexed"});
  void* p = map_read_only(f, r.off, r.len, /*populate=*/true, ck.tensors[m.tensors.front()].name);  // ENOMEM: exit 3
  ::madvise(p, r.len, MADV_WILLNEED);
  return p;
}

// Files the chunks read: a buffered descriptor always, an O_DIRECT one on request.
std::vector<std::unique_ptr<ReadFile>> open_files(const Checkpoint& ck, const UnitPlan& p, bool direct, LoadReport& rep) {
  std::vector<std::unique_ptr<ReadFile>> files(ck.files.size());
  for (const auto& u : p.units) {
    if (files[u.file]) continue;
    try {
      files[u.file] = std::make_unique<ReadFile>(ck.files[u.file].path, direct);
    } catch (const Error& e) {
      throw e.with_defaults({.tensor = ck.tensors[u.tensors.front()].name, .offset = u.off});
    }
    if (direct && files[u.file]->direct_fd < 0)
      rep.notes.push_back("O_DIRECT refused for " + ck.files[u.file].path + "; buffered reads");
  }
  rep.direct_io = direct;
  return files;
}

// A tensor of a disk module: a view into a read-only mapping of its whole file (one per file).
uint8_t* disk_data(const Checkpoint& ck, const TensorInfo& t, Device dev, WeightStore& store,
                         std::map<uint32_t, std::pair<uint8_t*, uint64_t>>& file_maps) {
  auto it = file_maps.find(t.file);
  if (it == file_maps.end()) {
    const auto& fi = ck.files[t.file];
    File f = File::open_read_only(fi.path);
    if (f.size() == 0) throw Error("load.short_read", "file is empty", {.file = fi.path, .tensor = t.name});
    void* p = map_read_only(f, 0, f.size(), /*populate=*/false, t.name);
    store.add_mapping(Allocation(MemoryKind::FileMap, dev, p, f.size()));
    it = file_maps.emplace(t.file, std::pair{static_cast<uint8_t*>(p), f.size()}).first;
  }
  const uint64_t size = it->second.second;
  if (t.offset + t.nbytes > size)
    throw Error("load.short_read", "tensor data past the end of the file",
                {.file = ck.files[t.file].path, .tensor = t.name, .offset = size});
  return it->second.first + t.offset;
}

// Checksums of one tensor as in the file (converted by the CPU twin when it was) and as
// landed (copied back from the GPU), in steps of the buffers' size.
std::pair<uint64_t, uint64_t> tensor_checksums(const Checkpoint& ck, const TensorView& v, const ReadFile& file,
                                               std::vector<uint8_t>& fbuf, std::vector<uint8_t>& cbuf,
                                               std::vector<uint8_t>& dbuf) {
  const TensorInfo& t = ck.tensors[v.tensor];
  const uint64_t step = fbuf.size();
  const uint32_t in_es = v.converted() ? convert_elem_bytes(v.file_dtype) : 1;
  const uint32_t out_es = v.converted() ? convert_elem_bytes(v.dtype) : 1;
  Unit u{.tensors = {v.tensor}};
  uint64_t hf = 0, hl = 0;
  for (uint64_t at = 0; at < t.nbytes; at += step) {
    const uint64_t n = std::min(step, t.nbytes - at);
    read_exact(file, t.offset + at, fbuf.data(), n, namer(ck, u));
    const uint8_t* expect = fbuf.data();
    uint64_t m = n;
    if (v.converted()) {  // the CPU twin's output is the reference for a converted tensor
      m = n / in_es * out_es;
      convert_cpu(v.file_dtype, v.dtype, fbuf.data(), cbuf.data(), n / in_es);
      expect = cbuf.data();
    }
    const uint8_t* landed = static_cast<const uint8_t*>(v.data) + at / in_es * out_es;
    if (v.device.kind == Device::Kind::Cuda) {
      dbuf.resize(m);
      std::string err;
      cuda_check(ck, cuda::d2h(v.device.index, dbuf.data(), landed, m, &err), err, "copy back for --verify");
      landed = dbuf.data();
    }
    hf = checksum64(expect, m, hf);
    hl = checksum64(landed, m, hl);
  }
  return {hf, hl};
}

}  // namespace

Exit interrupted_exit() { return static_cast<Exit>(130); }

std::vector<uint8_t*> allocate_modules(const Checkpoint& ck, const ModelLayout& layout, const UnitPlan& p, bool pin,
                                       WeightStore& store, LoadReport& rep) {
  std::vector<uint8_t*> base(layout.modules.size(), nullptr);
  for (size_t mi = 0; mi < layout.modules.size(); ++mi) {
    const Module& m = layout.modules[mi];
    const Device dev = p.module_dev[mi];
    ModuleBlock blk{.name = m.name, .device = dev};
    if (dev.kind == Device::Kind::Disk) {
      blk.memory = MemoryKind::FileMap;
      store.add_module(std::move(blk), Allocation{});
      continue;
    }
    if (p.mapped[mi].on) {
      const MapRange& r = p.mapped[mi];
      void* ptr = map_module(ck, m, r);
      Allocation a(MemoryKind::FileMap, dev, ptr, r.len);
      blk.memory = MemoryKind::FileMap;
      blk.base = ptr;
      blk.bytes = r.len;
      base[mi] = static_cast<uint8_t*>(ptr);
      rep.host_peak_bytes += r.len;
      rep.mapped_modules++;
      rep.bytes_mapped += r.len;
      for (size_t ti : m.tensors) rep.total_bytes += ck.tensors[ti].nbytes;
      store.add_module(std::move(blk), std::move(a));
      continue;
    }
    Allocation a;
    try {
      a = allocate(dev, p.module_bytes[mi], pin && dev.kind == Device::Kind::Cpu, "module '" + m.name + "'");
    } catch (const Error& e) {
      throw Error(e.code(), e.message(),
                  {.file = ck.path,
                   .hint = "make a plan that fits: nunchaku plan " + ck.path + " --vram <GPU budget> --cpu-ram <RAM budget>"
                           " --format json > plan.json; nunchaku load " + ck.path + " --plan plan.json"},
                  Exit::OutOfMemory);
    }
    blk.memory = a.kind();
    blk.base = a.data();
    blk.bytes = a.size();
    base[mi] = a.bytes_ptr();
    if (dev.kind == Device::Kind::Cpu) rep.host_peak_bytes += a.size();
    store.add_module(std::move(blk), std::move(a));
  }
  return base;
}

void build_views(const Checkpoint& ck, const ModelLayout& layout, const UnitPlan& p,
                 const std::vector<uint8_t*>& module_base, WeightStore& store, LoadReport& rep) {
  std::map<uint32_t, std::pair<uint8_t*, uint64_t>> file_maps;  // file -> whole-file mapping, size
  for (size_t mi = 0; mi < layout.modules.size(); ++mi) {
    const Device dev = p.module_dev[mi];
    for (size_t ti : layout.modules[mi].tensors) {
      const TensorInfo& t = ck.tensors[ti];
      TensorView v{.name = t.name, .tensor = ti, .module = mi, .device = dev, .nbytes = t.nbytes,
                   .dtype = t.dtype, .file_dtype = t.dtype, .shape = t.shape, .strides = t.strides};
      if (dev.kind == Device::Kind::Disk) {
        v.data = disk_data(ck, t, dev, store, file_maps);
        ++rep.disk_tensors;
      } else if (p.mapped[mi].on) {
        v.data = module_base[mi] + (t.offset - p.mapped[mi].off);
      } else {
        v.data = module_base[mi] + p.slot_of[ti].off;
        v.dtype = p.slot_of[ti].dtype;
        v.nbytes = p.slot_of[ti].nbytes;
      }
      store.add_tensor(std::move(v));
    }
  }
  rep.tensors = store.tensors().size();
  rep.bytes_per_device = store.bytes_per_device();
  for (const auto& [k, b] : store.allocated_per_kind()) rep.allocated[std::string(memory_kind_name(k))] = b;
}

void verify_store(const Checkpoint& ck, const WeightStore& store, std::vector<std::unique_ptr<ReadFile>>& files,
                  uint64_t step_cap, const LoadOptions& o, LoadReport& rep) {
  const auto t0 = Clock::now();
  uint64_t largest = 1;
  for (const auto& t : ck.tensors) largest = std::max(largest, t.nbytes);
  const uint64_t step = std::min({step_cap, uint64_t(16) << 20, align_up(largest, 8)});
  std::vector<uint8_t> fbuf(step), cbuf(step), dbuf;
  for (const TensorView& v : store.tensors()) {
    if (o.cancel && o.cancel->load())
      throw Error("load.interrupted", "interrupted during --verify", {.file = ck.path}, interrupted_exit());
    const TensorInfo& t = ck.tensors[v.tensor];
    if (!files[t.file])  // a file only disk-offloaded modules live in
      files[t.file] = std::make_unique<ReadFile>(ck.files[t.file].path, false);
    const auto [hf, hl] = tensor_checksums(ck, v, *files[t.file], fbuf, cbuf, dbuf);
    if (hf != hl)
      throw Error("load.verify_mismatch",
                  "tensor bytes on " + v.device.str() + " differ from the file" +
                      (v.converted() ? " (after conversion)" : "") +
                      fmt::format(": checksum {:016x} vs {:016x}", hl, hf),
                  {.file = ck.files[t.file].path, .tensor = t.name, .offset = t.offset}, Exit::Internal);
    ++rep.verified_tensors;
  }
  rep.verify_s = since(t0);
}

}  // namespace load

uint64_t checksum64(const void* data, uint64_t n, uint64_t seed) {
  // Four independent multiply-xorshift lanes over 8-byte words, then a tail: fast
  // enough (several GB/s) that --verify costs about one more read of the data.
  constexpr uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full;
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h[4] = {seed + P1, seed ^ P2, seed - P1, ~seed};
  uint64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int l = 0; l < 4; ++l) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * l, 8);
      h[l] = (h[l] ^ (w * P2)) * P1;
      h[l] ^= h[l] >> 29;
    }
  uint64_t r = n * P1;
  for (int l = 0; l < 4; ++l) r = (r ^ h[l]) * P2 + (r >> 31);
  for (; i < n; ++i) r = (r ^ p[i]) * P1;
  return r ^ (r >> 33);
}

LoadResult load_checkpoint(const Checkpoint& ck, const ModelLayout& layout_in, const LoadOptions& o) {
  using namespace load;
  const auto t_start = Clock::now();
  LoadResult res;
  LoadReport& rep = res.report;

  // 0. the placement, completed; options; the CUDA devices it uses
  const Placed placed = complete_placement(ck, layout_in, o.placement);
  rep.notes = placed.notes;
  check_options(o);
  const uint64_t chunk_cap = o.staging_bytes / kIoPage * kIoPage;  // multiple of every element size
  const std::map<int, uint64_t> gpu_used_before = open_cuda_devices(placed.placement);
  const bool use_cuda = !gpu_used_before.empty();

  // 1. units: where each tensor goes, what is read
  const UnitPlan plan = plan_units(ck, placed, o.dtype, o.map_host && !(use_cuda && o.pin_host), o.map_host);
  rep.converted_tensors = plan.converted_tensors;

  // 2. allocations, in module order, before any read
  bool pin = use_cuda && o.pin_host;
  if (pin && plan.host_module_bytes > free_bytes_on(Device{Device::Kind::Cpu, 0}) / 2) {
    pin = false;
    rep.notes.push_back("host modules are pageable: pinning " + format_bytes(plan.host_module_bytes) +
                        " would take more than half the free RAM");
  }
  const auto t_alloc = Clock::now();
  const std::vector<uint8_t*> module_base = [&] {
    trace::Span span("alloc", "load");
    return allocate_modules(ck, placed.layout, plan, pin, res.store, rep);
  }();
  rep.alloc_s = since(t_alloc);

  // 3. chunks in file order through readers and sinks
  const std::vector<Chunk> chunks = cut_chunks(plan, chunk_cap);
  std::vector<std::unique_ptr<ReadFile>> files = open_files(ck, plan, o.direct_io, rep);
  run_pipeline(ck, plan, chunks, module_base, files, gpu_used_before, chunk_cap, o, t_start, rep);

  // 4. views; 5. verify
  build_views(ck, placed.layout, plan, module_base, res.store, rep);
  if (o.verify) {
    trace::Span span("verify", "load");
    verify_store(ck, res.store, files, chunk_cap, o, rep);
  }

  rusage ru{};
  if (::getrusage(RUSAGE_SELF, &ru) == 0) rep.max_rss_bytes = static_cast<uint64_t>(ru.ru_maxrss) * 1024;
  rep.wall_s = since(t_start) - rep.verify_s;
  log::info("load: {} in {:.3f} s: alloc {:.3f} s, read {:.3f} s ({}), copy {:.3f} s, convert {:.3f} s, verify {:.3f} s",
            format_bytes(rep.total_bytes), rep.wall_s, rep.alloc_s, rep.read_s, plural(rep.reader_threads, "reader thread"),
            rep.copy_s, rep.convert_s, rep.verify_s);
  return res;
}

}  // namespace nunchaku
