#include "io/staging.hpp"

#include <chrono>

namespace nunchaku {

StagingRing::StagingRing(int count, uint64_t bytes, bool pinned) {
  const uint64_t cap = bytes + 8192;
  slots_.resize(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    // mmap'd and cudaHostAlloc'd memory are page-aligned already.
    memory_.push_back(allocate(Device{Device::Kind::Cpu, 0}, cap, pinned, "staging buffer " + std::to_string(i)));
    slots_[i].id = i;
    slots_[i].data = memory_.back().bytes_ptr();
    slots_[i].capacity = cap;
    free_.push_back(&slots_[i]);
  }
}

uint64_t StagingRing::bytes_allocated() const {
  uint64_t n = 0;
  for (const auto& m : memory_) n += m.size();
  return n;
}

StagingSlot* StagingRing::acquire() {
  std::unique_lock lk(mu_);
  cv_free_.wait(lk, [&] { return closed_ || !free_.empty(); });
  if (closed_) return nullptr;
  StagingSlot* s = free_.front();
  free_.pop_front();
  return s;
}

void StagingRing::push_filled(StagingSlot* s) {
  {
    std::lock_guard lk(mu_);
    filled_.push_back(s);
  }
  cv_filled_.notify_one();
}

StagingSlot* StagingRing::pop_filled(int timeout_ms) {
  std::unique_lock lk(mu_);
  cv_filled_.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] { return closed_ || !filled_.empty(); });
  if (closed_ || filled_.empty()) return nullptr;
  StagingSlot* s = filled_.front();
  filled_.pop_front();
  return s;
}

void StagingRing::release(StagingSlot* s) {
  {
    std::lock_guard lk(mu_);
    free_.push_back(s);
  }
  cv_free_.notify_one();
}

void StagingRing::close() {
  {
    std::lock_guard lk(mu_);
    closed_ = true;
  }
  cv_free_.notify_all();
  cv_filled_.notify_all();
}

}  // namespace nunchaku
