#include "io/loader.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <fcntl.h>
#include <mutex>
#include <sys/mman.h>
#include <sys/resource.h>
#include <thread>
#include <unistd.h>

#include <fmt/format.h>

#include "core/error.hpp"
#include "cuda/loader.hpp"
#include "io/convert.hpp"
#include "core/file.hpp"
#include "io/staging.hpp"
#include "io/tensor_reader.hpp"
#include "core/units.hpp"

namespace nunchaku {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr uint64_t kPage = kIoPage;
constexpr uint64_t kRunGap = 4096;  // tensors closer than this in a file share one run (padding is read too)


// A contiguous file range with one destination: a run of unconverted tensors, or one
// converted tensor.
struct Unit {
  uint32_t file = 0;
  uint64_t off = 0, len = 0;       // file range
  size_t module = 0;
  uint64_t dst_off = 0;            // offset in the module's allocation
  bool convert = false;
  DType from = DType::F32, to = DType::F32;
  std::vector<size_t> tensors;     // checkpoint tensor indices in this range
};

struct Chunk {
  size_t unit = 0;
  uint64_t off = 0, len = 0;       // file range (inside the unit's)
  bool staged = false;
};

cuda::ConvType conv_type(DType t) {
  return t == DType::F32 ? cuda::ConvType::F32 : t == DType::F16 ? cuda::ConvType::F16 : cuda::ConvType::BF16;
}

Exit interrupted_exit() { return static_cast<Exit>(130); }  // the shell's 128 + SIGINT

// The tensor of `u` covering file offset `at` (for error messages).
std::string tensor_at(const Checkpoint& ck, const Unit& u, uint64_t at) {
  for (size_t i : u.tensors) {
    const auto& t = ck.tensors[i];
    if (at >= t.offset && at < t.offset + std::max<uint64_t>(t.nbytes, 1)) return t.name;
  }
  return u.tensors.empty() ? "" : ck.tensors[u.tensors.front()].name;
}

TensorAt namer(const Checkpoint& ck, const Unit& u) {
  return [&ck, &u](uint64_t at) { return tensor_at(ck, u, at); };
}

struct Shared {
  std::atomic<size_t> next{0};
  std::atomic<bool> abort{false};
  std::atomic<uint64_t> done_bytes{0}, bytes_read{0}, read_ns{0};
  std::atomic<int> readers_left{0};
  std::mutex mu;
  std::condition_variable cv;  // readers finished
  std::exception_ptr error;
  void fail(std::exception_ptr e) {
    {
      std::lock_guard lk(mu);
      if (!error) error = e;
    }
    abort = true;
    cv.notify_all();
  }
};

}  // namespace

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
  const auto t_start = Clock::now();
  LoadResult res;
  LoadReport& rep = res.report;
  WeightStore& store = res.store;

  // Tensors the grouping left out become one extra module on the CPU, so nothing is dropped.
  ModelLayout layout = layout_in;
  Placement placement = o.placement;
  {
    std::vector<char> covered(ck.tensors.size(), 0);
    for (const auto& m : layout.modules)
      for (size_t i : m.tensors)
        if (i < covered.size()) covered[i] = 1;
    Module extra{.name = "(ungrouped)", .kind = ModuleKind::Other};
    for (size_t i = 0; i < covered.size(); ++i)
      if (!covered[i]) {
        extra.tensors.push_back(i);
        extra.bytes += ck.tensors[i].nbytes;
      }
    if (!extra.tensors.empty()) {
      layout.modules.push_back(extra);
      if (!placement.modules.count(extra.name)) placement.modules[extra.name] = Device{Device::Kind::Cpu, 0};
      rep.notes.push_back(std::to_string(extra.tensors.size()) + " tensors in no module were loaded to cpu as '(ungrouped)'");
    }
  }
  check_placement(placement, layout);

  if (o.dtype && *o.dtype != DType::F16 && *o.dtype != DType::BF16)
    throw Error("load.unsupported_conversion", "--dtype must be fp16 or bf16, not " + std::string(dtype_name(*o.dtype)));
  if (o.staging_buffers < 1 || o.staging_buffers > 1024)
    throw Error("usage.staging", "--staging-buffers must be between 1 and 1024");
  if (o.staging_bytes < kPage || o.staging_bytes > (16ull << 30))
    throw Error("usage.staging", "--staging-size must be between 4 KiB and 16 GiB");
  const uint64_t chunk_cap = o.staging_bytes / kPage * kPage;  // multiple of every element size

  // CUDA devices used: available, and their memory use before we start.
  std::map<int, uint64_t> gpu_used_before;
  for (const auto& [_, d] : placement.modules)
    if (d.kind == Device::Kind::Cuda && !gpu_used_before.count(d.index)) {
      std::string why;
      if (!cuda::loader_available(&why))
        throw Error("load.no_cuda", "the placement puts modules on " + d.str() + " but CUDA is unavailable: " + why,
                    {.hint = "use --device cpu, or a plan without cuda devices"});
      cuda::MemInfo mi;
      if (!cuda::mem_info(d.index, mi, &why))
        throw Error("load.no_cuda", "cannot query " + d.str() + ": " + why, {.hint = "is the device index right?"});
      gpu_used_before[d.index] = mi.total_bytes - mi.free_bytes;
    }
  const bool use_cuda = !gpu_used_before.empty();

  // ---- 1. layout: units per module ----------------------------------------------------
  struct Slot {
    uint64_t off = 0;     // in the module allocation
    DType dtype;
    uint64_t nbytes = 0;
  };
  std::vector<Slot> slot_of(ck.tensors.size());
  std::vector<Unit> units;
  std::vector<uint64_t> module_bytes(layout.modules.size(), 0);
  std::vector<Device> module_dev(layout.modules.size());
  uint64_t host_module_bytes = 0;
  // Mapped CPU modules: the page-aligned file range covering their tensors.
  struct MapRange {
    bool on = false;
    uint32_t file = 0;
    uint64_t off = 0, len = 0;
  };
  std::vector<MapRange> mapped(layout.modules.size());
  const bool pin_possible = use_cuda && o.pin_host;
  for (size_t mi = 0; mi < layout.modules.size(); ++mi) {
    const Module& m = layout.modules[mi];
    const Device dev = placement.device_of(m.name);
    module_dev[mi] = dev;
    if (dev.kind == Device::Kind::Disk) continue;
    if (dev.kind == Device::Kind::Cpu && o.map_host && !pin_possible && !m.tensors.empty()) {
      MapRange r{true, UINT32_MAX, UINT64_MAX, 0};
      uint64_t end = 0;
      for (size_t ti : m.tensors) {
        if (ti >= ck.tensors.size()) throw Error("load.bad_layout", "module refers to a missing tensor", {}, Exit::Internal);
        const TensorInfo& t = ck.tensors[ti];
        const bool conv = o.dtype && t.dtype != *o.dtype && conversion_supported(t.dtype, *o.dtype);
        if (conv || (r.file != UINT32_MAX && t.file != r.file) || t.file >= ck.files.size()) r.on = false;
        r.file = t.file;
        r.off = std::min(r.off, t.offset);
        end = std::max(end, t.offset + t.nbytes);
      }
      if (r.on && end > r.off) {
        r.off &= ~(kPage - 1);
        r.len = end - r.off;
        mapped[mi] = r;
        continue;
      }
    }
    std::vector<size_t> plain, conv;
    for (size_t ti : m.tensors) {
      if (ti >= ck.tensors.size()) throw Error("load.bad_layout", "module refers to a missing tensor", {}, Exit::Internal);
      const TensorInfo& t = ck.tensors[ti];
      if (t.file >= ck.files.size())
        throw Error("load.bad_layout", "tensor refers to a missing file", {.tensor = t.name}, Exit::Internal);
      const uint32_t es = convert_elem_bytes(t.dtype);
      bool c = o.dtype && t.dtype != *o.dtype && conversion_supported(t.dtype, *o.dtype) && es && t.nbytes % es == 0;
      (c ? conv : plain).push_back(ti);
    }
    auto by_pos = [&](size_t a, size_t b) {
      const auto &x = ck.tensors[a], &y = ck.tensors[b];
      return x.file != y.file ? x.file < y.file : x.offset < y.offset;
    };
    std::sort(plain.begin(), plain.end(), by_pos);
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
        slot_of[ti] = {u.dst_off + (t.offset - u.off), t.dtype, t.nbytes};
      }
      if (u.len) units.push_back(std::move(u));
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
      u.to = *o.dtype;
      u.tensors = {ti};
      u.dst_off = align_up(cursor, 256);
      const uint64_t out = t.nbytes / convert_elem_bytes(t.dtype) * convert_elem_bytes(*o.dtype);
      cursor = u.dst_off + out;
      slot_of[ti] = {u.dst_off, *o.dtype, out};
      ++rep.converted_tensors;
      if (u.len) units.push_back(std::move(u));
    }
    module_bytes[mi] = cursor;
    if (dev.kind == Device::Kind::Cpu) host_module_bytes += cursor;
  }

  // ---- 2. allocations, in module order --------------------------------------------------
  bool pin = use_cuda && o.pin_host;
  if (pin && host_module_bytes > free_bytes_on(Device{Device::Kind::Cpu, 0}) / 2) {
    pin = false;
    rep.notes.push_back("host modules are pageable: pinning " + format_bytes(host_module_bytes) +
                        " would take more than half the free RAM");
  }
  const auto t_alloc = Clock::now();
  std::vector<uint8_t*> module_base(layout.modules.size(), nullptr);
  std::map<uint32_t, uint8_t*> file_maps;
  std::map<uint32_t, uint64_t> map_size;
  for (size_t mi = 0; mi < layout.modules.size(); ++mi) {
    const Module& m = layout.modules[mi];
    const Device dev = module_dev[mi];
    ModuleBlock blk{.name = m.name, .device = dev};
    if (dev.kind == Device::Kind::Disk) {
      blk.memory = MemoryKind::FileMap;
      store.add_module(std::move(blk), Allocation{});
      continue;
    }
    if (mapped[mi].on) {
      const MapRange& r = mapped[mi];
      const auto& fi = ck.files[r.file];
      File f = File::open_read_only(fi.path);
      if (r.off + r.len > f.size())  // truncated since it was indexed: mapping past EOF would SIGBUS
        throw Error("load.short_read", "file ended at byte " + std::to_string(f.size()) + " before the module's tensor data",
                    {.file = fi.path, .tensor = ck.tensors[m.tensors.front()].name, .offset = f.size(),
                     .hint = "the file was truncated or changed after it was indexed"});
      void* p = map_read_only(f, r.off, r.len, /*populate=*/true, ck.tensors[m.tensors.front()].name);  // ENOMEM: exit 3
      ::madvise(p, r.len, MADV_WILLNEED);
      Allocation a(MemoryKind::FileMap, dev, p, r.len);
      blk.memory = MemoryKind::FileMap;
      blk.base = p;
      blk.bytes = r.len;
      module_base[mi] = static_cast<uint8_t*>(p);
      rep.host_peak_bytes += r.len;
      rep.mapped_modules++;
      rep.bytes_mapped += r.len;
      for (size_t ti : m.tensors) rep.total_bytes += ck.tensors[ti].nbytes;
      store.add_module(std::move(blk), std::move(a));
      continue;
    }
    Allocation a;
    try {
      a = allocate(dev, module_bytes[mi], pin && dev.kind == Device::Kind::Cpu, "module '" + m.name + "'");
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
    module_base[mi] = a.bytes_ptr();
    if (dev.kind == Device::Kind::Cpu) rep.host_peak_bytes += a.size();
    store.add_module(std::move(blk), std::move(a));
  }
  rep.alloc_s = since(t_alloc);

  // ---- 3. chunks in file order ----------------------------------------------------------
  std::sort(units.begin(), units.end(), [](const Unit& a, const Unit& b) {
    return a.file != b.file ? a.file < b.file : a.off < b.off;
  });
  std::vector<Chunk> chunks;
  size_t staged_total = 0;
  std::map<int, bool> gpu_converts;  // device -> needs a conversion scratch
  for (size_t ui = 0; ui < units.size(); ++ui) {
    const Unit& u = units[ui];
    const Device dev = module_dev[u.module];
    const bool staged = dev.kind == Device::Kind::Cuda || u.convert;
    if (dev.kind == Device::Kind::Cuda && u.convert) gpu_converts[dev.index] = true;
    for (uint64_t at = u.off; at < u.off + u.len; at += chunk_cap) {
      chunks.push_back({ui, at, std::min(chunk_cap, u.off + u.len - at), staged});
      rep.total_bytes += chunks.back().len;
      staged_total += staged;
      (staged ? rep.bytes_staged : rep.bytes_direct) += chunks.back().len;
    }
  }
  rep.chunks = chunks.size();

  // Files: buffered descriptor always, O_DIRECT one on request.
  std::vector<std::unique_ptr<ReadFile>> files(ck.files.size());
  for (const auto& u : units) {
    if (files[u.file]) continue;
    try {
      files[u.file] = std::make_unique<ReadFile>(ck.files[u.file].path, o.direct_io);
    } catch (const Error& e) {
      throw e.with_defaults({.tensor = ck.tensors[u.tensors.front()].name, .offset = u.off});
    }
    if (o.direct_io && files[u.file]->direct_fd < 0)
      rep.notes.push_back("O_DIRECT refused for " + ck.files[u.file].path + "; buffered reads");
  }
  rep.direct_io = o.direct_io;

  std::unique_ptr<StagingRing> ring;
  if (staged_total) {
    int n = static_cast<int>(std::min<size_t>(o.staging_buffers, staged_total));
    ring = std::make_unique<StagingRing>(n, chunk_cap, use_cuda);
    rep.staging_buffers = n;
    rep.staging_bytes = chunk_cap;
    rep.host_peak_bytes += ring->bytes_allocated();
  }
  std::map<int, std::unique_ptr<cuda::CopyStream>> streams;
  for (const auto& [dev, _] : gpu_used_before) {
    auto s = std::make_unique<cuda::CopyStream>();
    std::string err;
    uint64_t scratch = gpu_converts.count(dev) ? chunk_cap : 0;
    if (!s->init(dev, ring ? ring->count() : 1, scratch, &err))
      throw Error("load.out_of_memory", "cannot set up the copy stream on cuda:" + std::to_string(dev) + ": " + err,
                  {.file = ck.path}, Exit::OutOfMemory);
    rep.gpu[Device{Device::Kind::Cuda, dev}].predicted += scratch;
    streams[dev] = std::move(s);
  }
  for (size_t mi = 0; mi < layout.modules.size(); ++mi)
    if (module_dev[mi].kind == Device::Kind::Cuda) rep.gpu[module_dev[mi]].predicted += store.modules()[mi].bytes;

  // ---- 4. readers + consumer --------------------------------------------------------------
  Shared sh;
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  int nthreads = o.reader_threads > 0 ? o.reader_threads : static_cast<int>(std::min(4u, hw));
  nthreads = static_cast<int>(std::min<size_t>(nthreads, std::max<size_t>(chunks.size(), 1)));
  rep.reader_threads = chunks.empty() ? 0 : nthreads;

  auto reader = [&] {
    try {
      for (;;) {
        if (sh.abort) break;
        const size_t ci = sh.next.fetch_add(1);
        if (ci >= chunks.size()) break;
        const Chunk& c = chunks[ci];
        const Unit& u = units[c.unit];
        const ReadFile& f = *files[u.file];
        const auto t0 = Clock::now();
        if (!c.staged) {
          uint8_t* dst = module_base[u.module] + u.dst_off + (c.off - u.off);
          uint64_t head = 0;  // bytes done with O_DIRECT (whole pages, straight into place)
          if (f.direct_fd >= 0 && c.off % kPage == 0) {
            head = c.len / kPage * kPage;
            ssize_t r = head ? ::pread(f.direct_fd, dst, head, static_cast<off_t>(c.off)) : 0;
            if (r != static_cast<ssize_t>(head)) head = 0;  // refused or short: redo buffered (reports the error)
          }
          read_exact(f, c.off + head, dst + head, c.len - head, namer(ck, u));
          sh.bytes_read += c.len;
          sh.done_bytes += c.len;
        } else {
          StagingSlot* s = ring->acquire();
          if (!s) break;
          const uint8_t* p = nullptr;
          uint64_t nread = 0;
          if (f.direct_fd >= 0) p = read_direct(f, c.off, c.len, s->data, nread, namer(ck, u));
          if (!p) {
            read_exact(f, c.off, s->data, c.len, namer(ck, u));
            p = s->data;
            nread = c.len;
          }
          sh.bytes_read += nread;
          s->chunk = ci;
          s->payload = p;
          s->length = c.len;
          ring->push_filled(s);
        }
        sh.read_ns += static_cast<uint64_t>(std::chrono::nanoseconds(Clock::now() - t0).count());
      }
    } catch (...) {
      sh.fail(std::current_exception());
      if (ring) ring->close();
    }
    if (--sh.readers_left == 0) {
      std::lock_guard lk(sh.mu);
      sh.cv.notify_all();
    }
  };

  std::vector<std::thread> threads;
  sh.readers_left = rep.reader_threads;
  struct Joiner {  // readers are joined on every exit path, exceptions included
    std::vector<std::thread>& t;
    Shared& sh;
    std::unique_ptr<StagingRing>& ring;
    ~Joiner() {
      sh.abort = true;
      if (ring) ring->close();
      for (auto& th : t)
        if (th.joinable()) th.join();
    }
  } joiner{threads, sh, ring};
  for (int i = 0; i < rep.reader_threads; ++i) threads.emplace_back(reader);

  std::deque<StagingSlot*> inflight;  // GPU copies enqueued, buffer not yet free
  auto cuda_check = [&](bool good, const std::string& err, const char* what) {
    if (!good) throw Error("load.cuda", std::string(what) + ": " + err, {.file = ck.path}, Exit::Internal);
  };
  auto retire_oldest = [&] {
    StagingSlot* s = inflight.front();
    const Unit& u = units[chunks[s->chunk].unit];
    std::string err;
    cuda_check(streams.at(module_dev[u.module].index)->wait(s->id, &err), err, "copy to the GPU");
    sh.done_bytes += s->length;
    inflight.pop_front();
    ring->release(s);
  };
  size_t staged_done = 0;
  double copy_s = 0, convert_s = 0;
  auto last_progress = Clock::now() - std::chrono::seconds(1);
  for (;;) {
    if (o.cancel && o.cancel->load()) {
      sh.abort = true;
      if (ring) ring->close();
      throw Error("load.interrupted", "interrupted; everything loaded so far was released", {.file = ck.path},
                  interrupted_exit());
    }
    if (sh.abort) break;
    if (o.progress && since(last_progress) >= 0.1) {
      last_progress = Clock::now();
      o.progress({sh.done_bytes.load(), rep.total_bytes, since(t_start)});
    }
    if (staged_done == staged_total) {
      while (!inflight.empty()) retire_oldest();
      std::unique_lock lk(sh.mu);
      if (sh.readers_left == 0) break;
      sh.cv.wait_for(lk, std::chrono::milliseconds(50));
      continue;
    }
    StagingSlot* s = ring->pop_filled(50);
    if (!s) continue;
    const Chunk& c = chunks[s->chunk];
    const Unit& u = units[c.unit];
    const Device dev = module_dev[u.module];
    uint64_t dst_off = u.dst_off + (c.off - u.off);
    uint64_t n = 0;
    if (u.convert) {
      const uint32_t in_es = convert_elem_bytes(u.from), out_es = convert_elem_bytes(u.to);
      dst_off = u.dst_off + (c.off - u.off) / in_es * out_es;
      n = c.len / in_es;
    }
    const auto t0 = Clock::now();
    if (dev.kind == Device::Kind::Cuda) {
      auto& st = *streams.at(dev.index);
      std::string err;
      bool good = u.convert ? st.h2d_convert(module_base[u.module] + dst_off, s->payload, n, conv_type(u.from),
                                             conv_type(u.to), &err)
                            : st.h2d(module_base[u.module] + dst_off, s->payload, c.len, &err);
      cuda_check(good && st.record(s->id, &err), err, "enqueue a copy to the GPU");
      inflight.push_back(s);
      // One copy in flight per consumer: the next buffer is read while this one moves.
      while (inflight.size() > 1) retire_oldest();
      copy_s += since(t0);
    } else {
      convert_cpu(u.from, u.to, s->payload, module_base[u.module] + dst_off, n);
      convert_s += since(t0);
      sh.done_bytes += s->length;
      ring->release(s);
    }
    ++staged_done;
  }
  for (auto& th : threads) th.join();
  if (sh.error) std::rethrow_exception(sh.error);
  for (auto& [dev, st] : streams) {
    std::string err;
    cuda_check(st->synchronize(&err), err, "finish the copies to the GPU");
  }
  rep.read_s = double(sh.read_ns.load()) / 1e9;
  rep.copy_s = copy_s;
  rep.convert_s = convert_s;
  rep.bytes_read = sh.bytes_read;
  if (o.progress) o.progress({rep.total_bytes, rep.total_bytes, since(t_start)});

  // GPU memory measured while the scratch buffers still exist (the peak of the load).
  for (auto& [dev, used0] : gpu_used_before) {
    cuda::MemInfo mi;
    std::string err;
    if (cuda::mem_info(dev, mi, &err)) {
      uint64_t used = mi.total_bytes - mi.free_bytes;
      rep.gpu[Device{Device::Kind::Cuda, dev}].measured = used > used0 ? used - used0 : 0;
    }
  }
  streams.clear();
  ring.reset();

  // ---- 5. views ---------------------------------------------------------------------------
  for (size_t mi = 0; mi < layout.modules.size(); ++mi) {
    const Device dev = module_dev[mi];
    for (size_t ti : layout.modules[mi].tensors) {
      const TensorInfo& t = ck.tensors[ti];
      TensorView v{.name = t.name, .tensor = ti, .module = mi, .device = dev, .nbytes = t.nbytes,
                   .dtype = t.dtype, .file_dtype = t.dtype, .shape = t.shape, .strides = t.strides};
      if (dev.kind == Device::Kind::Disk) {
        auto it = file_maps.find(t.file);
        if (it == file_maps.end()) {
          const auto& fi = ck.files[t.file];
          File f = File::open_read_only(fi.path);
          if (f.size() == 0) throw Error("load.short_read", "file is empty", {.file = fi.path, .tensor = t.name});
          void* p = map_read_only(f, 0, f.size(), /*populate=*/false, t.name);
          store.add_mapping(Allocation(MemoryKind::FileMap, dev, p, f.size()));
          it = file_maps.emplace(t.file, static_cast<uint8_t*>(p)).first;
          map_size[t.file] = f.size();
        }
        if (t.offset + t.nbytes > map_size[t.file])
          throw Error("load.short_read", "tensor data past the end of the file",
                      {.file = ck.files[t.file].path, .tensor = t.name, .offset = map_size[t.file]});
        v.data = it->second + t.offset;
        ++rep.disk_tensors;
      } else if (mapped[mi].on) {
        v.data = module_base[mi] + (t.offset - mapped[mi].off);
      } else {
        v.data = module_base[mi] + slot_of[ti].off;
        v.dtype = slot_of[ti].dtype;
        v.nbytes = slot_of[ti].nbytes;
      }
      store.add_tensor(std::move(v));
    }
  }
  rep.tensors = store.tensors().size();
  rep.bytes_per_device = store.bytes_per_device();
  for (const auto& [k, b] : store.allocated_per_kind()) rep.allocated[std::string(memory_kind_name(k))] = b;

  // ---- 6. verify ----------------------------------------------------------------------------
  if (o.verify) {
    const auto t0 = Clock::now();
    uint64_t largest = 1;
    for (const auto& t : ck.tensors) largest = std::max(largest, t.nbytes);
    const uint64_t step = std::min({chunk_cap, uint64_t(16) << 20, align_up(largest, 8)});
    std::vector<uint8_t> fbuf(step), cbuf(step), dbuf;
    for (const TensorView& v : store.tensors()) {
      if (o.cancel && o.cancel->load())
        throw Error("load.interrupted", "interrupted during --verify", {.file = ck.path}, interrupted_exit());
      const TensorInfo& t = ck.tensors[v.tensor];
      if (!files[t.file])  // a file only disk-offloaded modules live in
        files[t.file] = std::make_unique<ReadFile>(ck.files[t.file].path, false);
      const uint32_t in_es = v.converted() ? convert_elem_bytes(v.file_dtype) : 1;
      const uint32_t out_es = v.converted() ? convert_elem_bytes(v.dtype) : 1;
      uint64_t hf = 0, hl = 0;
      for (uint64_t at = 0; at < t.nbytes; at += step) {
        const uint64_t n = std::min(step, t.nbytes - at);
        Unit u{.tensors = {v.tensor}};
        read_exact(*files[t.file], t.offset + at, fbuf.data(), n, namer(ck, u));
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
          cuda_check(cuda::d2h(v.device.index, dbuf.data(), landed, m, &err), err, "copy back for --verify");
          landed = dbuf.data();
        }
        hf = checksum64(expect, m, hf);
        hl = checksum64(landed, m, hl);
      }
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

  rusage ru{};
  if (::getrusage(RUSAGE_SELF, &ru) == 0) rep.max_rss_bytes = static_cast<uint64_t>(ru.ru_maxrss) * 1024;
  rep.wall_s = since(t_start) - rep.verify_s;
  return res;
}

}  // namespace nunchaku
