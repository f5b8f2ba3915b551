// Streamed weights, GPU flavour: modules that are not in the CUDA backend's device memory
// (on the CPU, in pinned host memory as the loader left them, or on disk, read by the host
// StreamedProvider) are copied into a ring of device slots (cuda/copy_ring.hpp) on a copy
// stream while the compute stream runs earlier layers; events order copy and compute, so
// the host never waits on the GPU. Modules already on the device are served as loaded.
//
// Per module m of a forward pass (the Transformer's prefetch / acquire / release):
//   prefetch(m)  host modules: claim a free slot and enqueue m's copies now; disk modules:
//                only the host read ahead (their copy starts when acquire has the bytes)
//   acquire(m)   enqueue the copies if not done yet; the compute stream waits for them
//   release(m)   the slot is free once the compute stream passes this point
// Every streamed layer crosses PCIe once per forward pass, whatever the batch: the batch
// size is what hides the copies (throughput grows with it until compute-bound).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cuda/copy_ring.hpp"
#include "engine/weights.hpp"

namespace nunchaku::engine {

class DeviceStreamProvider final : public WeightProvider {
 public:
  // `host` serves every module (in host memory, or already on cuda:`device`);
  // compute_stream is the CUDA backend's (Backend::native_stream()). Throws Error
  // engine.out_of_memory (exit 3) when the slots cannot be allocated, engine.cuda otherwise.
  // `host_read`: modules handed out where they are (host memory), not copied: the untied
  // embedding, which the Transformer gathers on the host (only the batch's rows cross).
  // `host_tensors` [module][tensor] (empty, or one flag per tensor of a module): tensors
  // likewise read where they are while the rest of their module is copied: the mixture of
  // experts a CPU part runs beside the GPU (SplitLayout::moe_part).
  DeviceStreamProvider(std::unique_ptr<WeightProvider> host, int device, void* compute_stream, int slots,
                       const std::vector<size_t>& host_read = {},
                       const std::vector<std::vector<char>>& host_tensors = {});

  size_t modules() const override { return info_.size(); }
  std::span<const TensorView> info(size_t m) const override { return info_[m]; }
  std::span<const TensorView> acquire(size_t m) override;
  void release(size_t m) override;
  void prefetch(size_t m) override;
  bool streamed(size_t m) const override { return offloaded_[m]; }
  uint64_t pool_bytes() const override { return ring_.slot_bytes() * uint64_t(ring_.slots()) + host_->pool_bytes(); }
  int pool_slots() const override { return ring_.slots(); }
  uint64_t slot_bytes() const override { return ring_.slot_bytes(); }
  std::string describe() const override;
  // Host -> device GB/s of the last completed module copy (0 before the first).
  double copy_gb_per_s() const { return ring_.last_gb_per_s(); }

 private:
  int start_copy(size_t m);  // returns the slot
  void check(bool good, const char* what);

  std::unique_ptr<WeightProvider> host_;
  Device device_;
  cuda::CopyRing ring_;
  std::vector<std::vector<TensorView>> info_;     // device-tagged, data set while acquired
  std::vector<std::vector<uint64_t>> offsets_;    // [module][tensor] byte offset in a slot
  std::vector<std::vector<char>> in_place_;       // [module][tensor] read on the host, never copied
  std::vector<bool> offloaded_;
  std::vector<int> slot_of_;                      // [module] slot holding it, -1 none
  std::vector<int> module_in_;                    // [slot] module, -1 free
  std::vector<bool> host_held_;                   // [module] host_->acquire'd, not released
  std::string err_;
};

}  // namespace nunchaku::engine
