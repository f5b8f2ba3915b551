// The emulator's CUDA runtime API (cuda/emu/cuda_emu.hpp) over host memory.
//
// Streams are queues: work runs at the latest moment CUDA's ordering rules allow, i.e. when
// the host synchronizes (cudaStreamSynchronize, cudaEventSynchronize/Query,
// cudaDeviceSynchronize, cudaFree, a synchronous cudaMemcpy for the legacy default stream and
// the blocking streams, a copy into pageable host memory for its stream), when a stream that
// waits on an event needs it, or when the legacy default stream and a blocking stream order
// against each other. So a kernel that reads a slot before the copy filling it was made to wait
// reads stale bytes, as it might on a GPU, instead of passing because the emulator ran
// everything at once. Copies from pageable host memory take a snapshot when enqueued (the
// runtime stages them); copies from pinned memory read it when they run.
//
// That is the `lazy` schedule. A GPU may as well run work the moment its stream's earlier work
// and the events it waits for are done, so NUNCHAKU_CUDA_EMU_SCHEDULE picks, per kernel or
// copy (cudaMemcpyAsync, cudaMemsetAsync), between the latest and the earliest moment:
//   mixed (default)  a seeded coin (NUNCHAKU_CUDA_EMU_SEED) per kernel and per copy;
//   lazy / eager     always the latest / always the earliest (NUNCHAKU_CUDA_EMU_EAGER=1 too);
//   kernels-first    kernels at once, copies late: a kernel that reads a buffer before waiting
//                    for the copy filling it reads stale bytes;
//   copies-first     copies at once, kernels late: a refill that does not wait for the kernels
//                    still reading the buffer overwrites it under them.
// mixed shows both over a run's many operations; every choice is a legal CUDA execution.
//
// Fresh device memory is filled with 0xff bytes (NaN as floats), so a kernel reading what
// nobody wrote produces NaN instead of a plausible zero. Each allocation is followed by a
// guard of kGuard such bytes (a read past the end is NaN too), checked after every kernel: a
// kernel that wrote past the end of an allocation faults (cudaErrorIllegalAddress). Under
// ASan there is no guard: allocations are exact, and ASan reports any access past them.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/emu/emu_internal.hpp"
#include "cuda/emu/exec.hpp"

struct CUstream_st {
  bool blocking = true;  // synchronizes with the legacy default stream
  bool destroyed = false;
  std::deque<std::function<void()>> q;
  uint64_t enqueued = 0, done = 0;
};
struct CUevent_st {
  bool timing = true;
  bool recorded = false;
  CUstream_st* s = nullptr;
  uint64_t seq = 0;  // complete once s->done >= seq
  double ms = 0;     // host time when it ran
};

namespace nk_emu {
namespace {

constexpr uint64_t kDefaultMiB = 4096;
#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kGuard = 0;
#else
constexpr size_t kGuard = 256;
#endif
constexpr size_t kMaxDynamicShared = 48 << 10;

struct Alloc {
  size_t n = 0;
  enum Kind { Device, HostAlloc, Registered } kind = Device;
  int device = 0;
};

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v, &end, 10);
  if (*end) {
    std::fprintf(stderr, "cuda emulator: %s=%s is not a whole number, using %llu\n", name, v, (unsigned long long)fallback);
    return fallback;
  }
  return x;
}

bool valid_schedule(const char* s) {
  for (const char* v : {"mixed", "lazy", "eager", "kernels-first", "copies-first"})
    if (std::strcmp(s, v) == 0) return true;
  return false;
}

struct State {
  std::recursive_mutex m;
  int devices = int(env_u64("NUNCHAKU_CUDA_EMU_DEVICES", 1));
  uint64_t env_limit = env_u64("NUNCHAKU_CUDA_EMU_MEM_MIB", kDefaultMiB) << 20;
  uint64_t limit = env_limit;
  std::string env_schedule = [] {
    if (env_u64("NUNCHAKU_CUDA_EMU_EAGER", 0) != 0) return std::string("eager");
    const char* v = std::getenv("NUNCHAKU_CUDA_EMU_SCHEDULE");
    const std::string c = v && *v ? v : "mixed";
    if (valid_schedule(c.c_str())) return c;
    std::fprintf(stderr, "cuda emulator: NUNCHAKU_CUDA_EMU_SCHEDULE=%s is not mixed, lazy, eager, kernels-first or "
                 "copies-first; using mixed\n", v);
    return std::string("mixed");
  }();
  std::string schedule = env_schedule;
  uint64_t coin = emu_seed();
  std::map<uintptr_t, Alloc> allocs;
  std::vector<uint64_t> used = std::vector<uint64_t>(8, 0);
  cudaError_t sticky = cudaSuccess;
  std::string sticky_what;
  CUstream_st legacy;
  std::vector<std::unique_ptr<CUstream_st>> streams;  // kept after destroy: events may name them
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
};
State& st() {
  static State* s = new State;  // never destroyed: other statics' destructors may still call in
  return *s;
}

thread_local int t_device = 0;
thread_local cudaError_t t_last = cudaSuccess;

cudaError_t err(cudaError_t e) {
  if (e != cudaSuccess) t_last = e;
  return e;
}
// Complaints a GPU would not word, printed so a failing test says what the emulator saw.
cudaError_t complain(cudaError_t e, const std::string& what) {
  std::fprintf(stderr, "cuda emulator: %s\n", what.c_str());
  return err(e);
}

#define NK_ENTER                       \
  std::lock_guard lock_(st().m);       \
  if (st().sticky != cudaSuccess) return err(st().sticky)
#define NK_NEED_DEVICE \
  if (st().devices <= 0) return err(cudaErrorNoDevice)

// The allocation holding p (any kind), or end().
std::map<uintptr_t, Alloc>::iterator holder(const void* p) {
  auto& a = st().allocs;
  const auto x = reinterpret_cast<uintptr_t>(p);
  auto it = a.upper_bound(x);
  if (it == a.begin()) return a.end();
  --it;
  return x < it->first + std::max<size_t>(it->second.n, 1) ? it : a.end();
}
bool inside(const void* p, size_t n, bool device) {
  auto it = holder(p);
  if (it == st().allocs.end() || (it->second.kind == Alloc::Device) != device) return false;
  return reinterpret_cast<uintptr_t>(p) + n <= it->first + it->second.n;
}
bool touches_device(const void* p, size_t n) {
  const auto x = reinterpret_cast<uintptr_t>(p);
  for (const auto& [base, a] : st().allocs)
    if (a.kind == Alloc::Device && x < base + a.n && base < x + std::max<size_t>(n, 1)) return true;
  return false;
}
bool pinned(const void* p, size_t n) { return inside(p, n, false); }

void drain(CUstream_st* s, uint64_t upto) {
  while (s->done < upto && !s->q.empty()) {
    std::function<void()> op = std::move(s->q.front());
    s->q.pop_front();
    ++s->done;
    if (st().sticky == cudaSuccess) op();  // after a fault, a GPU runs nothing more
  }
}
void drain_all(CUstream_st* s) { drain(s, s->enqueued); }
void drain_device() {
  drain_all(&st().legacy);
  for (auto& s : st().streams) drain_all(s.get());
}
// Legacy default stream semantics: it waits for the blocking streams, and they wait for it.
void order_legacy(CUstream_st* s) {
  if (s == &st().legacy) {
    for (auto& b : st().streams)
      if (b->blocking) drain_all(b.get());
  } else if (s->blocking) {
    drain_all(&st().legacy);
  }
}
CUstream_st* resolve(cudaStream_t s) { return s ? s : &st().legacy; }

// After a kernel: a guard byte that is no longer 0xff was written past an allocation's end.
void check_guards(const std::string& kernel) {
  if (!kGuard) return;
  static const std::vector<uint8_t> clean(kGuard, 0xff);
  for (const auto& [base, a] : st().allocs) {
    if (a.kind != Alloc::Device) continue;
    uint8_t* g = reinterpret_cast<uint8_t*>(base) + a.n;
    if (std::memcmp(g, clean.data(), kGuard) == 0) continue;
    size_t at = 0;
    while (g[at] == 0xff) ++at;
    std::memset(g, 0xff, kGuard);
    fault(cudaErrorIllegalAddress, "kernel " + kernel + " wrote past the end of a device allocation of " +
                                       std::to_string(a.n) + " bytes (at byte " + std::to_string(a.n + at) + ")");
    return;
  }
}

// Whether work of kind w runs as soon as it is enqueued (the schedule, above).
bool run_now(Work w) {
  const std::string& s = st().schedule;
  if (s == "eager") return true;
  if (w == Work::Marker || s == "lazy") return false;
  if (s == "mixed") return (splitmix64(st().coin) & 1) != 0;
  return s == (w == Work::Kernel ? "kernels-first" : "copies-first");
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - st().t0).count();
}

}  // namespace

std::recursive_mutex& api_lock() { return st().m; }
bool in_device(const void* p, size_t bytes) {
  std::lock_guard lk(st().m);
  return inside(p, bytes, true);
}
cudaError_t sticky() { return st().sticky; }

void enqueue(cudaStream_t stream, std::function<void()> op, Work w) {
  std::lock_guard lk(st().m);
  CUstream_st* s = resolve(stream);
  order_legacy(s);
  s->q.push_back(std::move(op));
  ++s->enqueued;
  if (run_now(w)) drain_all(s);
}

void fault(cudaError_t e, const std::string& what) {
  std::lock_guard lk(st().m);
  std::fprintf(stderr, "cuda emulator: fault (%s): %s\n", cudaGetErrorName(e), what.c_str());
  if (st().sticky == cudaSuccess) {
    st().sticky = e;
    st().sticky_what = what;
  }
}

std::string take_fault() {
  std::lock_guard lk(st().m);
  std::string w = st().sticky_what;
  st().sticky = cudaSuccess;
  st().sticky_what.clear();
  t_last = cudaSuccess;
  return w;
}

void set_schedule(const char* schedule) {
  std::lock_guard lk(st().m);
  st().schedule = schedule && valid_schedule(schedule) ? schedule : st().env_schedule;
}

void set_memory_limit(uint64_t bytes) {
  std::lock_guard lk(st().m);
  st().limit = bytes ? bytes : st().env_limit;
}
uint64_t allocated_bytes() {
  std::lock_guard lk(st().m);
  return st().used[size_t(t_device)];
}

void launch(const char* name, dim3 grid, dim3 block, size_t smem, cudaStream_t s, const PointerArg* pointers,
            int n_pointers, std::function<void()> body) {
  std::lock_guard lk(st().m);
  if (st().sticky != cudaSuccess) return void(err(st().sticky));
  if (st().devices <= 0) return void(err(cudaErrorNoDevice));
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (!block.x || !block.y || !block.z || block.x > 1024 || block.y > 1024 || block.z > 64 || threads > 1024 || !grid.x ||
      !grid.y || !grid.z || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) {
    complain(cudaErrorInvalidConfiguration,
             std::string(name) + ": launch of grid (" + std::to_string(grid.x) + "," + std::to_string(grid.y) + "," +
                 std::to_string(grid.z) + ") x block (" + std::to_string(block.x) + "," + std::to_string(block.y) +
                 "," + std::to_string(block.z) + ")");
    return;
  }
  if (smem > kMaxDynamicShared) {
    complain(cudaErrorInvalidValue, std::string(name) + ": " + std::to_string(smem) + " bytes of dynamic shared memory");
    return;
  }
  for (int i = 0; i < n_pointers; ++i) {
    const void* p = pointers[i].p;
    if (!p) continue;
    auto it = holder(p);
    // One past the end of an allocation is a valid pointer value too.
    if (it == st().allocs.end()) it = holder(static_cast<const char*>(p) - 1);
    if (it == st().allocs.end()) {
      fault(cudaErrorIllegalAddress, std::string(name) + ": argument " + std::to_string(pointers[i].index) +
                                         " is neither device memory nor pinned host memory");
      return;
    }
  }
  const std::string kernel = name;
  enqueue(s, [kernel, grid, block, body = std::move(body)] {
    const std::string f = run_grid(grid, block, body);
    if (!f.empty()) fault(cudaErrorLaunchFailure, "kernel " + kernel + ": " + f);
    else check_guards(kernel);
  }, Work::Kernel);
}

}  // namespace nk_emu

using namespace nk_emu;

// ---- errors and devices ---------------------------------------------------------------------

cudaError_t cudaGetLastError() {
  std::lock_guard lk(st().m);
  if (st().sticky != cudaSuccess) return st().sticky;
  const cudaError_t e = t_last;
  t_last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() {
  std::lock_guard lk(st().m);
  return st().sticky != cudaSuccess ? st().sticky : t_last;
}
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorHostMemoryAlreadyRegistered: return "cudaErrorHostMemoryAlreadyRegistered";
    case cudaErrorHostMemoryNotRegistered: return "cudaErrorHostMemoryNotRegistered";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorHostMemoryAlreadyRegistered: return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unknown error";
}

cudaError_t cudaGetDeviceCount(int* n) {
  std::lock_guard lk(st().m);
  *n = std::max(st().devices, 0);
  return st().devices > 0 ? cudaSuccess : err(cudaErrorNoDevice);
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = st().devices > 0 ? CUDART_VERSION : 0;  // 0: no driver installed
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  NK_ENTER;
  NK_NEED_DEVICE;
  if (d < 0 || d >= st().devices || d >= 8) return err(cudaErrorInvalidDevice);
  t_device = d;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  NK_ENTER;
  NK_NEED_DEVICE;
  *d = t_device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  NK_ENTER;
  NK_NEED_DEVICE;
  if (d < 0 || d >= st().devices) return err(cudaErrorInvalidDevice);
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof p->name, "nunchaku CUDA emulator (CPU)");
  p->totalGlobalMem = st().limit;
  p->sharedMemPerBlock = kMaxDynamicShared;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7fffffff;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->major = 9;
  p->multiProcessorCount = 1;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  NK_ENTER;
  NK_NEED_DEVICE;
  const uint64_t used = st().used[size_t(t_device)];
  *total_bytes = st().limit;
  *free_bytes = used < st().limit ? st().limit - used : 0;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  NK_ENTER;
  NK_NEED_DEVICE;
  drain_device();
  return err(st().sticky);
}
cudaError_t cudaDeviceReset() {
  std::lock_guard lk(st().m);
  drain_device();
  auto& a = st().allocs;
  for (auto it = a.begin(); it != a.end();) {
    if (it->second.kind == Alloc::Device && it->second.device == t_device) {
      std::free(reinterpret_cast<void*>(it->first));
      it = a.erase(it);
    } else {
      ++it;
    }
  }
  st().used[size_t(t_device)] = 0;
  st().sticky = cudaSuccess;
  st().sticky_what.clear();
  return cudaSuccess;
}

// ---- memory -----------------------------------------------------------------------------------

// What an allocation of n bytes takes from the emulated device (CUDA's 256-byte granularity).
static uint64_t charged_bytes(size_t n) { return (uint64_t(n) + 255) & ~uint64_t(255); }

cudaError_t cudaMalloc(void** p, size_t n) {
  NK_ENTER;
  NK_NEED_DEVICE;
  *p = nullptr;
  const uint64_t charged = charged_bytes(n);
  uint64_t& used = st().used[size_t(t_device)];
  if (n == 0) return err(cudaErrorInvalidValue);
  if (used + charged > st().limit) return err(cudaErrorMemoryAllocation);
  void* q = nullptr;
  if (posix_memalign(&q, 256, n + kGuard) != 0) return err(cudaErrorMemoryAllocation);
  std::memset(q, 0xff, n + kGuard);
  st().allocs[reinterpret_cast<uintptr_t>(q)] = {n, Alloc::Device, t_device};
  used += charged;
  *p = q;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  NK_ENTER;
  if (!p) return cudaSuccess;
  auto it = st().allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == st().allocs.end() || it->second.kind != Alloc::Device)
    return complain(cudaErrorInvalidValue, "cudaFree of a pointer cudaMalloc did not return");
  drain_device();  // cudaFree synchronizes with the device
  st().used[size_t(it->second.device)] -= charged_bytes(it->second.n);
  std::free(p);
  st().allocs.erase(it);
  return err(st().sticky);
}
cudaError_t cudaHostAlloc(void** p, size_t n, unsigned) {
  NK_ENTER;
  NK_NEED_DEVICE;
  *p = nullptr;
  void* q = nullptr;
  if (posix_memalign(&q, 4096, std::max<size_t>(n, 1)) != 0) return err(cudaErrorMemoryAllocation);
  st().allocs[reinterpret_cast<uintptr_t>(q)] = {std::max<size_t>(n, 1), Alloc::HostAlloc, t_device};
  *p = q;
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t n) { return cudaHostAlloc(p, n, cudaHostAllocDefault); }
cudaError_t cudaFreeHost(void* p) {
  NK_ENTER;
  if (!p) return cudaSuccess;
  auto it = st().allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == st().allocs.end() || it->second.kind != Alloc::HostAlloc)
    return complain(cudaErrorInvalidValue, "cudaFreeHost of a pointer cudaHostAlloc did not return");
  drain_device();
  std::free(p);
  st().allocs.erase(it);
  return cudaSuccess;
}
cudaError_t cudaHostRegister(void* p, size_t n, unsigned) {
  NK_ENTER;
  NK_NEED_DEVICE;
  if (!p || n == 0) return err(cudaErrorInvalidValue);
  const auto x = reinterpret_cast<uintptr_t>(p);
  for (const auto& [base, a] : st().allocs)
    if (x < base + a.n && base < x + n)
      return err(a.kind == Alloc::Device ? cudaErrorInvalidValue : cudaErrorHostMemoryAlreadyRegistered);
  st().allocs[x] = {n, Alloc::Registered, t_device};
  return cudaSuccess;
}
cudaError_t cudaHostUnregister(void* p) {
  NK_ENTER;
  auto it = st().allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == st().allocs.end() || it->second.kind != Alloc::Registered) return err(cudaErrorHostMemoryNotRegistered);
  drain_device();  // pending copies from it finish first
  st().allocs.erase(it);
  return cudaSuccess;
}

namespace {
// The direction of a copy, checked against where its two ranges are.
cudaError_t check_copy(void* dst, const void* src, size_t n, cudaMemcpyKind& kind, const char* call) {
  if (kind == cudaMemcpyDefault)
    kind = inside(dst, n, true) ? (inside(src, n, true) ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                : (inside(src, n, true) ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  auto bad = [&](const char* which, bool dev) {
    return complain(cudaErrorInvalidValue, std::string(call) + ": " + std::to_string(n) + "-byte " + which + " " +
                                               (dev ? "is not inside one device allocation"
                                                    : "overlaps device memory but the copy's kind says host"));
  };
  if (dst_dev ? !inside(dst, n, true) : touches_device(dst, n)) return bad("destination", dst_dev);
  if (src_dev ? !inside(src, n, true) : touches_device(src, n)) return bad("source", src_dev);
  return cudaSuccess;
}
}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  NK_ENTER;
  NK_NEED_DEVICE;
  if (n == 0) return cudaSuccess;
  if (cudaError_t e = check_copy(dst, src, n, kind, "cudaMemcpy"); e != cudaSuccess) return e;
  // On the legacy default stream, synchronous: after its own and the blocking streams' work.
  order_legacy(&st().legacy);
  drain_all(&st().legacy);
  std::memmove(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream) {
  NK_ENTER;
  NK_NEED_DEVICE;
  if (n == 0) return cudaSuccess;
  if (cudaError_t e = check_copy(dst, src, n, kind, "cudaMemcpyAsync"); e != cudaSuccess) return e;
  CUstream_st* s = resolve(stream);
  if (kind == cudaMemcpyHostToDevice && !pinned(src, n)) {  // staged now: the caller may reuse src
    auto copy = std::make_shared<std::vector<uint8_t>>(static_cast<const uint8_t*>(src),
                                                       static_cast<const uint8_t*>(src) + n);
    enqueue(stream, [dst, copy] { std::memcpy(dst, copy->data(), copy->size()); }, Work::Copy);
    return err(st().sticky);
  }
  enqueue(stream, [dst, src, n] { std::memmove(dst, src, n); }, Work::Copy);
  if ((kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost) && !pinned(dst, n)) drain_all(s);
  return err(st().sticky);
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t n, cudaStream_t stream) {
  NK_ENTER;
  NK_NEED_DEVICE;
  if (n == 0) return cudaSuccess;
  if (!inside(dst, n, true))
    return complain(cudaErrorInvalidValue, "cudaMemsetAsync: range is not inside one device allocation");
  enqueue(stream, [dst, value, n] { std::memset(dst, value, n); }, Work::Copy);
  return err(st().sticky);
}
cudaError_t cudaMemset(void* dst, int value, size_t n) {
  if (cudaError_t e = cudaMemsetAsync(dst, value, n, nullptr); e != cudaSuccess) return e;
  NK_ENTER;
  drain_all(&st().legacy);
  return cudaSuccess;
}

// ---- streams and events -----------------------------------------------------------------------

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  NK_ENTER;
  NK_NEED_DEVICE;
  st().streams.push_back(std::make_unique<CUstream_st>());
  st().streams.back()->blocking = !(flags & cudaStreamNonBlocking);
  *s = st().streams.back().get();
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  NK_ENTER;
  if (!s || s->destroyed) return err(cudaErrorInvalidResourceHandle);
  drain_all(s);  // its work completes; the handle is gone
  s->destroyed = true;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  NK_ENTER;
  NK_NEED_DEVICE;
  if (s && s->destroyed) return err(cudaErrorInvalidResourceHandle);
  order_legacy(resolve(s));
  drain_all(resolve(s));
  return err(st().sticky);
}
cudaError_t cudaStreamQuery(cudaStream_t s) { return cudaStreamSynchronize(s); }
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t e, unsigned) {
  NK_ENTER;
  NK_NEED_DEVICE;
  if (!e) return err(cudaErrorInvalidResourceHandle);
  if (!e->recorded) return cudaSuccess;  // waiting on an event never recorded is a no-op
  CUstream_st* on = e->s;
  const uint64_t seq = e->seq;
  enqueue(stream, [on, seq] { drain(on, seq); }, Work::Marker);
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
  NK_ENTER;
  NK_NEED_DEVICE;
  *e = new CUevent_st;
  (*e)->timing = !(flags & cudaEventDisableTiming);
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  NK_ENTER;
  if (!e) return err(cudaErrorInvalidResourceHandle);
  // Freed once its last recording ran (a pending record op still writes to it).
  if (e->recorded) drain(e->s, e->seq);
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream) {
  NK_ENTER;
  NK_NEED_DEVICE;
  if (!e) return err(cudaErrorInvalidResourceHandle);
  CUstream_st* s = resolve(stream);
  enqueue(stream, [e] { e->ms = now_ms(); }, Work::Marker);
  e->recorded = true;
  e->s = s;
  e->seq = s->enqueued;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  NK_ENTER;
  if (!e) return err(cudaErrorInvalidResourceHandle);
  if (e->recorded) drain(e->s, e->seq);
  return err(st().sticky);
}
cudaError_t cudaEventQuery(cudaEvent_t e) { return cudaEventSynchronize(e); }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  NK_ENTER;
  if (!a || !b || !a->timing || !b->timing) return err(cudaErrorInvalidResourceHandle);
  if (!a->recorded || !b->recorded) return err(cudaErrorInvalidResourceHandle);
  if (a->s->done < a->seq || b->s->done < b->seq) return err(cudaErrorNotReady);
  *ms = float(b->ms - a->ms);
  return cudaSuccess;
}
