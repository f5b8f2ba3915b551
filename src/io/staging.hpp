// The bounded ring of staging buffers between the reader threads and the consumer
// (the thread that copies to the device or converts). A buffer cycles
//   free --acquire()--> reader fills it --push_filled()--> consumer --release()--> free
// so at most `count` buffers of `bytes` each are ever in flight: memory stays bounded
// while reads overlap copies. Buffers are pinned when `pinned` (H2D copies can then be
// asynchronous) and aligned to 4096 (O_DIRECT). Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "io/weight_store.hpp"

namespace nunchaku {

struct StagingSlot {
  int id = 0;                  // 0..count-1, stable (the CUDA event slot)
  uint8_t* data = nullptr;     // capacity() bytes, 4096-aligned
  uint64_t capacity = 0;
  // Set by the reader for the consumer:
  size_t chunk = 0;            // which chunk of the load plan it holds
  const uint8_t* payload = nullptr;  // where the chunk's bytes start inside data
  uint64_t length = 0;
};

class StagingRing {
 public:
  // Allocates `count` buffers of `bytes` (+8 KiB so an aligned O_DIRECT read of any
  // `bytes` range fits). Throws Error("load.out_of_memory") like allocate().
  StagingRing(int count, uint64_t bytes, bool pinned);
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  int count() const { return static_cast<int>(slots_.size()); }
  uint64_t bytes_allocated() const;

  // Blocks until a buffer is free; nullptr once close() was called.
  StagingSlot* acquire();
  void push_filled(StagingSlot* s);
  // Blocks up to `timeout_ms` for a filled buffer; nullptr on timeout or after close().
  StagingSlot* pop_filled(int timeout_ms);
  void release(StagingSlot* s);
  // Wakes every waiter; acquire/pop return nullptr from now on (used on errors and SIGINT).
  void close();

 private:
  std::vector<Allocation> memory_;
  std::vector<StagingSlot> slots_;
  std::mutex mu_;
  std::condition_variable cv_free_, cv_filled_;
  std::deque<StagingSlot*> free_, filled_;
  bool closed_ = false;
};

}  // namespace nunchaku
