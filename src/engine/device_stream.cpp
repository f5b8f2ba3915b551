#include "engine/device_stream.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/trace.hpp"
#include "core/units.hpp"

namespace nunchaku::engine {
namespace {
constexpr uint64_t kAlign = 256;  // tensor offsets in a slot (cudaMalloc's alignment)
}

DeviceStreamProvider::DeviceStreamProvider(std::unique_ptr<WeightProvider> host, int device, void* compute_stream,
                                           int slots, const std::vector<size_t>& host_read,
                                           const std::vector<std::vector<char>>& host_tensors)
    : host_(std::move(host)), device_{Device::Kind::Cuda, device} {
  const size_t n = host_->modules();
  info_.resize(n);
  offsets_.resize(n);
  in_place_.resize(n);
  offloaded_.assign(n, false);
  slot_of_.assign(n, -1);
  host_held_.assign(n, false);
  uint64_t slot_bytes = 0;
  for (size_t m = 0; m < n; ++m) {
    auto views = host_->info(m);
    info_[m].assign(views.begin(), views.end());
    in_place_[m].assign(views.size(), 0);
    if (m < host_tensors.size() && host_tensors[m].size() == views.size()) in_place_[m] = host_tensors[m];
    bool off = false;
    for (size_t i = 0; i < views.size(); ++i)  // another GPU's: read there
      off |= views[i].device.kind != Device::Kind::Cuda && !in_place_[m][i];
    if (std::find(host_read.begin(), host_read.end(), m) != host_read.end()) off = false;
    offloaded_[m] = off;
    if (!off) continue;
    uint64_t at = 0;
    for (size_t i = 0; i < info_[m].size(); ++i) {
      TensorView& v = info_[m][i];
      offsets_[m].push_back(at);
      if (in_place_[m][i]) continue;  // its view is the host's, set by acquire
      at += (v.nbytes + kAlign - 1) / kAlign * kAlign;
      v.device = device_;
      v.data = nullptr;
    }
    slot_bytes = std::max(slot_bytes, at);
  }
  if (slot_bytes == 0) slots = 0;
  if (slots > 0 && !compute_stream)
    throw Error("engine.cuda", "streamed layers need the CUDA backend's compute stream (none given)", {}, Exit::Internal);
  module_in_.assign(size_t(std::max(slots, 0)), -1);
  if (slots > 0 && !ring_.init(device, compute_stream, slots, slot_bytes, &err_)) {
    if (err_.find("cudaMalloc") != std::string::npos)
      throw Error("engine.out_of_memory",
                  fmt::format("cannot allocate {} of {} for streamed layers on {}: {}", plural(uint64_t(slots), "device slot"),
                              format_bytes(slot_bytes), device_.str(), err_),
                  {.hint = "give the resident weights less VRAM (--vram), or lower --context / --batch-size"},
                  Exit::OutOfMemory);
    check(false, "set up the device slots");
  }
}

void DeviceStreamProvider::check(bool good, const char* what) {
  if (!good)
    throw Error("engine.cuda", fmt::format("{} on {}: {}", what, device_.str(), err_),
                {.hint = "rerun with NUNCHAKU_CUDA_SYNC=1 to stop at the failing call"}, Exit::Internal);
}

int DeviceStreamProvider::start_copy(size_t m) {
  auto free_slot = std::find(module_in_.begin(), module_in_.end(), -1);
  if (free_slot == module_in_.end()) return -1;
  const int s = int(free_slot - module_in_.begin());
  trace::Span span("copy", "run");
  auto src = host_->acquire(m);  // blocks while a disk module is read
  host_held_[m] = true;
  check(ring_.begin(s, &err_), "wait for a free device slot");
  for (size_t i = 0; i < src.size(); ++i) {
    if (in_place_[m][i]) {
      info_[m][i].data = src[i].data;  // valid until release(m) releases the host module
      continue;
    }
    check(ring_.copy(s, offsets_[m][i], src[i].data, src[i].nbytes, &err_), "copy a layer to the GPU");
  }
  check(ring_.filled(s, &err_), "mark a layer copied");
  module_in_[size_t(s)] = int(m);
  slot_of_[m] = s;
  return s;
}

std::span<const TensorView> DeviceStreamProvider::acquire(size_t m) {
  if (!offloaded_[m]) return host_->acquire(m);
  int s = slot_of_[m];
  if (s < 0 && (s = start_copy(m)) < 0)
    throw Error("engine.cuda", fmt::format("no free device slot for module {} ({} slots all held)", m, module_in_.size()),
                {}, Exit::Internal);
  check(ring_.use(s, &err_), "order compute after the copy");
  auto* base = static_cast<uint8_t*>(ring_.slot(s));
  for (size_t i = 0; i < info_[m].size(); ++i)
    if (!in_place_[m][i]) info_[m][i].data = base + offsets_[m][i];
  return info_[m];
}

void DeviceStreamProvider::release(size_t m) {
  if (!offloaded_[m]) {
    host_->release(m);
    return;
  }
  const int s = slot_of_[m];
  if (s < 0) return;
  check(ring_.done(s, &err_), "mark a layer used");
  if (host_held_[m]) {
    // The host bytes (a pool slot of a disk stream) may be reused once the copy is done,
    // which it is by now: compute waited for it.
    check(ring_.wait_filled(s, &err_), "finish a layer copy");
    host_->release(m);
    host_held_[m] = false;
  }
  for (TensorView& v : info_[m]) v.data = nullptr;  // in-place views too: their host module is released
  module_in_[size_t(s)] = -1;
  slot_of_[m] = -1;
}

void DeviceStreamProvider::prefetch(size_t m) {
  host_->prefetch(m);
  if (!offloaded_[m] || slot_of_[m] >= 0 || host_->streamed(m)) return;
  start_copy(m);  // no free slot: acquire copies it
}

std::string DeviceStreamProvider::describe() const {
  size_t n = 0;
  for (bool o : offloaded_) n += o;
  if (n == 0) return host_->describe();
  return fmt::format("streamed to {}: {} of {} through {} of {} ({})", device_.str(), n,
                     plural(offloaded_.size(), "module"), plural(uint64_t(ring_.slots()), "device slot"),
                     format_bytes(ring_.slot_bytes()), host_->describe());
}

}  // namespace nunchaku::engine
