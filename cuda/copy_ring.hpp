// Device slots for streamed weights (the GPU flavour of the streamed provider,
// src/engine/device_stream.*), behind a plain C++ header: a ring of `slots` device buffers
// filled from host memory on a copy stream while the compute stream works on other slots.
// Events order the two streams without blocking the host:
//   begin(s)   the copy stream waits until the compute stream released slot s
//   copy(s..)  host -> slot s on the copy stream (asynchronous when the host memory is pinned)
//   filled(s)  marks the copies of slot s; use(s) makes the compute stream wait for them
//   done(s)    marks the compute stream's last use of slot s (after the ops that read it)
// Built from copy_ring.cu with CUDA, else copy_ring_stub.cpp ("built without CUDA").
// Functions report failure through the return value and `err` (the CUDA call, file:line).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nunchaku::cuda {

class CopyRing {
 public:
  CopyRing() = default;
  ~CopyRing();
  CopyRing(const CopyRing&) = delete;
  CopyRing& operator=(const CopyRing&) = delete;

  // compute_stream: the backend's (Context::stream()).
  bool init(int device, void* compute_stream, int slots, uint64_t slot_bytes, std::string* err);
  int slots() const { return int(buf_.size()); }
  uint64_t slot_bytes() const { return slot_bytes_; }
  void* slot(int s) const { return buf_[size_t(s)]; }

  bool begin(int s, std::string* err);
  bool copy(int s, uint64_t offset, const void* src_host, uint64_t n, std::string* err);
  bool filled(int s, std::string* err);
  bool use(int s, std::string* err);
  bool done(int s, std::string* err);
  // Blocks the host until slot s's copies have finished (before its host source is reused).
  bool wait_filled(int s, std::string* err);
  // Pinned host->device GB/s the copies of the last filled slot reached (0 when unknown).
  double last_gb_per_s() const { return last_gbps_; }

 private:
  int device_ = -1;
  void* compute_ = nullptr;
  void* copy_ = nullptr;  // cudaStream_t
  std::vector<void*> buf_, filled_, done_, start_;  // device buffers; cudaEvent_t each
  std::vector<uint64_t> bytes_;
  uint64_t slot_bytes_ = 0;
  double last_gbps_ = 0;
};

// Page-locks existing host memory (cudaHostRegister) so copies from it are asynchronous;
// false (and err) when it cannot. unregister_host accepts what register_host accepted.
bool register_host(void* p, uint64_t n, std::string* err);
void unregister_host(void* p);

}  // namespace nunchaku::cuda
