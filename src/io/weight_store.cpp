#include "io/weight_store.hpp"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <sys/mman.h>

#include "core/error.hpp"
#include "core/file.hpp"
#include "core/host_memory.hpp"
#include "cuda/loader.hpp"
#include "io/memory_counters.hpp"
#include "core/units.hpp"

namespace nunchaku {

namespace {
std::atomic<int> g_fail_countdown{0};
std::atomic<int> g_live{0};
// Bytes live in pinned host memory and in device memory through allocate() (--trace).
std::atomic<uint64_t> g_pinned_bytes{0}, g_device_bytes{0};

uint64_t mem_available() { return host_memory_available().bytes; }
}  // namespace

namespace testing {
void fail_nth_allocation(int n) { g_fail_countdown = n; }
int live_allocations() { return g_live.load(); }
}  // namespace testing

uint64_t live_pinned_bytes() { return g_pinned_bytes.load(std::memory_order_relaxed); }
uint64_t live_device_bytes() { return g_device_bytes.load(std::memory_order_relaxed); }

std::string_view memory_kind_name(MemoryKind k) {
  switch (k) {
    case MemoryKind::Device: return "device";
    case MemoryKind::Pinned: return "pinned";
    case MemoryKind::Pageable: return "pageable";
    case MemoryKind::FileMap: return "mmap";
  }
  return "pageable";
}

Allocation& Allocation::operator=(Allocation&& o) noexcept {
  if (this != &o) {
    release();
    kind_ = o.kind_;
    device_ = o.device_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void Allocation::release() {
  if (!ptr_) return;
  switch (kind_) {
    case MemoryKind::Device: cuda::device_free(device_.index, ptr_); break;
    case MemoryKind::Pinned: cuda::pinned_free(ptr_); break;
    case MemoryKind::Pageable: ::munmap(ptr_, bytes_ ? bytes_ : 1); break;
    case MemoryKind::FileMap: unmap_read_only(ptr_, bytes_); break;
  }
  if (kind_ != MemoryKind::FileMap) --g_live;
  if (kind_ == MemoryKind::Pinned) g_pinned_bytes.fetch_sub(bytes_, std::memory_order_relaxed);
  if (kind_ == MemoryKind::Device) g_device_bytes.fetch_sub(bytes_, std::memory_order_relaxed);
  ptr_ = nullptr;
  bytes_ = 0;
}

uint64_t free_bytes_on(Device d) {
  if (d.kind == Device::Kind::Cuda) {
    cuda::MemInfo mi;
    std::string err;
    return cuda::mem_info(d.index, mi, &err) ? mi.free_bytes : 0;
  }
  return mem_available();
}

Allocation allocate(Device device, uint64_t bytes, bool pinned, const std::string& what) {
  auto oom = [&](const std::string& why) {
    uint64_t free_b = free_bytes_on(device);
    return Error("load.out_of_memory",
                 "cannot allocate " + format_bytes(bytes) + " (" + std::to_string(bytes) + " bytes) on " +
                     device.str() + " for " + what + ": " + format_bytes(free_b) + " free" +
                     (why.empty() ? "" : " (" + why + ")"),
                 {}, Exit::OutOfMemory);
  };
  // Test hook: the n-th allocation fails as a full device would.
  int n = g_fail_countdown.load();
  if (n > 0 && g_fail_countdown.fetch_sub(1) == 1) throw oom("injected by the test hook");

  std::string err;
  void* p = nullptr;
  MemoryKind kind;
  if (device.kind == Device::Kind::Cuda) {
    kind = MemoryKind::Device;
    p = cuda::device_alloc(device.index, bytes, &err);
  } else if (pinned) {
    kind = MemoryKind::Pinned;
    p = cuda::pinned_alloc(bytes, &err);
  } else {
    kind = MemoryKind::Pageable;
    // mmap rather than malloc: big blocks go straight back to the OS on free, and
    // transparent huge pages cut the page faults of the first write 512-fold.
    void* m = ::mmap(nullptr, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
    if (m == MAP_FAILED) {
      err = std::strerror(errno);
    } else {
      p = m;
      if (bytes >= (2u << 20)) ::madvise(m, bytes, MADV_HUGEPAGE);
    }
  }
  if (!p) throw oom(err);
  ++g_live;
  if (kind == MemoryKind::Pinned) g_pinned_bytes.fetch_add(bytes, std::memory_order_relaxed);
  if (kind == MemoryKind::Device) g_device_bytes.fetch_add(bytes, std::memory_order_relaxed);
  return Allocation(kind, device, p, bytes);
}

const TensorView* WeightStore::find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

std::map<Device, uint64_t> WeightStore::bytes_per_device() const {
  std::map<Device, uint64_t> out;
  for (const auto& t : tensors_) out[t.device] += t.nbytes;
  return out;
}

std::map<MemoryKind, uint64_t> WeightStore::allocated_per_kind() const {
  std::map<MemoryKind, uint64_t> out;
  for (const auto& m : modules_)
    if (m.bytes) out[m.memory] += m.bytes;
  return out;
}

void WeightStore::add_module(ModuleBlock m, Allocation a) {
  modules_.push_back(std::move(m));
  allocations_.push_back(std::move(a));
}

void WeightStore::add_tensor(TensorView v) {
  by_name_.emplace(v.name, tensors_.size());
  tensors_.push_back(std::move(v));
}

}  // namespace nunchaku
