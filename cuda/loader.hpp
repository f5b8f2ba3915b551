// The CUDA side of `nunchaku load`, behind a plain C++ header (no CUDA includes).
// Built from loader.cu + convert.cu when the CUDA component is on, otherwise from
// loader_stub.cpp, whose functions fail with "built without CUDA".
// Every function reports failure through its return value and `err` (never throws,
// never aborts), so src/io can turn it into an nunchaku::Error with context.
// This library does not link against src/; keep it self-contained.
#pragma once

#include <cstdint>
#include <string>

namespace nunchaku::cuda {

// True when built with CUDA and at least one device answers; `why` gets the reason otherwise.
bool loader_available(std::string* why = nullptr);

struct MemInfo {
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
};
bool mem_info(int device, MemInfo& out, std::string* err);

// Device memory. nullptr (and `err`) on failure. free accepts nullptr.
void* device_alloc(int device, uint64_t bytes, std::string* err);
void device_free(int device, void* p);

// Page-locked host memory (cudaHostAlloc), for staging buffers and pinned host modules.
void* pinned_alloc(uint64_t bytes, std::string* err);
void pinned_free(void* p);

// Element types the conversion kernel knows. Same contract as src/io/convert.hpp:
// round to nearest even, overflow to Inf, NaN stays NaN (payload not preserved).
enum class ConvType : int { F32 = 0, F16 = 1, BF16 = 2 };

// One copy stream on one device plus a device scratch buffer for conversions.
// Not thread-safe: one thread drives it.
class CopyStream {
 public:
  CopyStream() = default;
  ~CopyStream();
  CopyStream(const CopyStream&) = delete;
  CopyStream& operator=(const CopyStream&) = delete;

  // Creates the stream and `slots` events. scratch_bytes > 0 allocates the conversion scratch.
  bool init(int device, int slots, uint64_t scratch_bytes, std::string* err);
  int device() const { return device_; }
  uint64_t scratch_bytes() const { return scratch_bytes_; }

  // Enqueue a host->device copy (src should be pinned for the copy to be asynchronous).
  bool h2d(void* dst_dev, const void* src_host, uint64_t n, std::string* err);
  // Enqueue: copy n elements of `from` to the scratch, then convert into dst_dev as `to`.
  // n * sizeof(from) must fit the scratch.
  bool h2d_convert(void* dst_dev, const void* src_host, uint64_t n, ConvType from, ConvType to, std::string* err);
  // Mark the work enqueued so far as slot `slot`; wait() blocks until it is done.
  bool record(int slot, std::string* err);
  bool wait(int slot, std::string* err);
  bool synchronize(std::string* err);
  void reset();

 private:
  int device_ = -1;
  void* stream_ = nullptr;   // cudaStream_t
  void** events_ = nullptr;  // cudaEvent_t[slots]
  int slots_ = 0;
  void* scratch_ = nullptr;
  uint64_t scratch_bytes_ = 0;
};

// Synchronous device->host copy after everything queued on the device (used by --verify
// and for small weight vectors the engine reads on the host).
bool d2h(int device, void* dst_host, const void* src_dev, uint64_t n, std::string* err);

// Runs the conversion kernel on host data (copies in, converts, copies back): for the
// CPU-twin tests. dst receives n elements of `to`.
bool convert_on_device(int device, ConvType from, ConvType to, const void* src_host, void* dst_host, uint64_t n,
                       std::string* err);

// Pinned host->device bandwidth in bytes/s: `bytes` copied `reps` times, best rep.
// 0 on failure. For scripts/gpu-check.sh, to compare the loader against the hardware.
double measure_h2d_peak(int device, uint64_t bytes, int reps, std::string* err);

}  // namespace nunchaku::cuda
