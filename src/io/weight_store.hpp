// The result of `load`: every tensor's bytes somewhere, and a view of each. This is
// the library API `run` builds on.
//
// Memory: one allocation per module (layer, embedding, head, ...) on its device; the
// module's tensors are views into it. Disk-offloaded modules are views into a read-only
// mmap of the checkpoint file, touched only when used. Everything is released when the
// WeightStore is destroyed (also when a load fails half way).
// Thread-safety: read-only after load; concurrent readers are fine.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "format/dtype.hpp"
#include "io/placement.hpp"

namespace nunchaku {

// How a block of memory was obtained; decides how it is freed.
enum class MemoryKind { Device, Pinned, Pageable, FileMap };
std::string_view memory_kind_name(MemoryKind k);  // "device", "pinned", "pageable", "mmap"

// One owned block: a device allocation, host memory, or a read-only file mapping.
// Move-only; frees itself.
class Allocation {
 public:
  Allocation() = default;
  Allocation(MemoryKind kind, Device device, void* ptr, uint64_t bytes) : kind_(kind), device_(device), ptr_(ptr), bytes_(bytes) {}
  Allocation(Allocation&& o) noexcept { *this = std::move(o); }
  Allocation& operator=(Allocation&& o) noexcept;
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;
  ~Allocation() { release(); }
  void release();

  MemoryKind kind() const { return kind_; }
  Device device() const { return device_; }
  void* data() const { return ptr_; }
  uint8_t* bytes_ptr() const { return static_cast<uint8_t*>(ptr_); }
  uint64_t size() const { return bytes_; }

 private:
  MemoryKind kind_ = MemoryKind::Pageable;
  Device device_;
  void* ptr_ = nullptr;
  uint64_t bytes_ = 0;
};

// Allocates `bytes` on `device` (Cuda: device memory; Cpu: pinned when `pinned`, else
// pageable with transparent huge pages). Throws Error("load.out_of_memory", exit 3)
// naming `what`, the bytes wanted and the bytes free. Counted by the test hooks below.
Allocation allocate(Device device, uint64_t bytes, bool pinned, const std::string& what);
// Free bytes on a device now (cudaMemGetInfo; MemAvailable for the CPU); 0 if unknown.
uint64_t free_bytes_on(Device device);

struct TensorView {
  std::string name;
  size_t tensor = 0;            // index into the Checkpoint's tensors
  size_t module = 0;            // index into WeightStore::modules()
  Device device;                // where the bytes are (Disk: a file mapping in host memory)
  void* data = nullptr;         // device pointer for Cuda, host pointer otherwise
  uint64_t nbytes = 0;
  DType dtype = DType::F32;     // dtype of the bytes at `data` (after --dtype conversion)
  DType file_dtype = DType::F32;
  std::vector<int64_t> shape;   // PyTorch order
  std::vector<int64_t> strides; // elements; empty when contiguous
  bool converted() const { return dtype != file_dtype; }
};

struct ModuleBlock {
  std::string name;
  Device device;
  MemoryKind memory = MemoryKind::Pageable;
  void* base = nullptr;         // start of the module's allocation (file base for Disk)
  uint64_t bytes = 0;           // bytes allocated (0 for Disk: nothing is copied)
  uint64_t tensor_bytes = 0;    // sum of its tensors' nbytes as stored here
};

class WeightStore {
 public:
  WeightStore() = default;
  WeightStore(WeightStore&&) = default;
  WeightStore& operator=(WeightStore&&) = default;

  const std::vector<TensorView>& tensors() const { return tensors_; }
  const std::vector<ModuleBlock>& modules() const { return modules_; }
  const TensorView* find(std::string_view name) const;  // nullptr when absent
  // Tensor bytes held per device (Disk = bytes left in the file mapping).
  std::map<Device, uint64_t> bytes_per_device() const;
  // Bytes allocated for modules per memory kind (the padding between runs included).
  std::map<MemoryKind, uint64_t> allocated_per_kind() const;

  // Used by the loader while building the store.
  void add_module(ModuleBlock m, Allocation a);
  void add_tensor(TensorView v);
  void add_mapping(Allocation a) { mappings_.push_back(std::move(a)); }

 private:
  std::vector<Allocation> allocations_;  // parallel to modules_ (empty Allocation for Disk)
  std::vector<Allocation> mappings_;     // file mappings shared by disk modules
  std::vector<ModuleBlock> modules_;
  std::vector<TensorView> tensors_;
  std::unordered_map<std::string, size_t> by_name_;
};

namespace testing {
// Makes the n-th call of allocate() from now on (1-based) fail as if the device were
// full; 0 disables. Also counts allocations alive, so a test can check nothing leaked.
void fail_nth_allocation(int n);
int live_allocations();
}  // namespace testing

}  // namespace nunchaku
