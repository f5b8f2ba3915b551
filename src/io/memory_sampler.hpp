// The one sampler of `--trace`: a thread that every `period` records, as trace counters,
//   "host RSS"            resident set of this process (/proc/self/statm)
//   "pinned host memory"  bytes allocate() holds pinned (io/weight_store.hpp)
//   "file bytes read"     bytes read_range() read since the sampler started
//   "cuda:N memory"       rise of cudaMemGetInfo's used bytes (total - free) on each CUDA
//                         device given, since the sampler started (context, cuBLAS included)
//   "device memory allocated"  bytes allocate() holds on all devices (our allocator's own
//                         count, without the context), sampled once a CUDA device is watched
// A counter is written when its value changed (and always at the start and stop), so a
// flat counter costs two events. Predictions go beside them as "NAME (predicted)"
// (predicted_counter()). Peaks are kept for every counter.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/trace.hpp"

namespace nunchaku {

inline constexpr const char* kHostRssCounter = "host RSS";
inline constexpr const char* kPinnedCounter = "pinned host memory";
inline constexpr const char* kFileReadCounter = "file bytes read";
inline constexpr const char* kDeviceAllocCounter = "device memory allocated";
std::string cuda_memory_counter(int device);  // "cuda:0 memory"
std::string predicted_counter(const std::string& counter);  // "host RSS (predicted)"

// Resident bytes of this process now (0 when /proc is not there).
uint64_t current_rss_bytes();
// getrusage's max RSS of this process, bytes.
uint64_t max_rss_bytes();

class MemorySampler {
 public:
  // Starts sampling into `rec` at once (the first sample before the constructor returns).
  MemorySampler(trace::Recorder& rec, std::chrono::microseconds period, std::vector<int> cuda_devices = {});
  ~MemorySampler();  // stop()
  MemorySampler(const MemorySampler&) = delete;
  MemorySampler& operator=(const MemorySampler&) = delete;

  // Takes a last sample and joins the thread; idempotent.
  void stop();
  // Samples cudaMemGetInfo of `device` too from the next sample on (its rise from now).
  void watch_cuda(int device);
  // Names of the counters sampled so far.
  std::vector<std::string> counters() const;
  // Highest sampled value of a counter (0 when never sampled).
  uint64_t peak(const std::string& counter) const;
  size_t samples() const { return ticks_.load(); }

 private:
  void run();
  void sample(bool force);

  trace::Recorder& rec_;
  std::chrono::microseconds period_;
  std::map<int, uint64_t> used_before_;  // device -> used bytes when it was first watched
  uint64_t read_before_ = 0;
  int statm_ = -1;
  mutable std::mutex mu_;  // last_, peaks_, used_before_
  std::map<std::string, uint64_t> last_, peaks_;
  std::mutex wake_mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::atomic<size_t> ticks_{0};
  std::thread thread_;
};

}  // namespace nunchaku
