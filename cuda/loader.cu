// CUDA implementation of cuda/loader.hpp: allocations, pinned staging, one copy stream.
#include "cuda/loader.hpp"

#include <cuda_runtime.h>

#include "cuda/no_device.cuh"

#include <chrono>
#include <string>

namespace nunchaku::cuda {

// Defined in convert.cu.
bool launch_convert(ConvType from, ConvType to, void* dst, const void* src, uint64_t n, cudaStream_t s,
                    std::string* err);

namespace {
bool ok(cudaError_t e, const char* what, std::string* err) {
  if (e == cudaSuccess) return true;
  const std::string text = error_text(e, what);  // also clears the error, so later calls are not poisoned
  if (err) *err = text;
  return false;
}
uint32_t size_of(ConvType t) { return t == ConvType::F32 ? 4 : 2; }
}  // namespace

bool loader_available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    const std::string reason = no_device_reason(e);
    if (why) *why = reason;
    return false;
  }
  if (n == 0) {
    if (why) *why = kNoGpu;
    return false;
  }
  return true;
}

bool mem_info(int device, MemInfo& out, std::string* err) {
  if (!ok(cudaSetDevice(device), "cudaSetDevice", err)) return false;
  size_t f = 0, t = 0;
  if (!ok(cudaMemGetInfo(&f, &t), "cudaMemGetInfo", err)) return false;
  out.free_bytes = f;
  out.total_bytes = t;
  return true;
}

void* device_alloc(int device, uint64_t bytes, std::string* err) {
  if (!ok(cudaSetDevice(device), "cudaSetDevice", err)) return nullptr;
  void* p = nullptr;
  if (!ok(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc", err)) return nullptr;
  return p;
}

void device_free(int device, void* p) {
  if (!p) return;
  cudaSetDevice(device);
  cudaFree(p);
}

void* pinned_alloc(uint64_t bytes, std::string* err) {
  void* p = nullptr;
  if (!ok(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable), "cudaHostAlloc", err)) return nullptr;
  return p;
}

void pinned_free(void* p) {
  if (p) cudaFreeHost(p);
}

CopyStream::~CopyStream() { reset(); }

void CopyStream::reset() {
  if (device_ < 0) return;
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  for (int i = 0; i < slots_; ++i)
    if (events_ && events_[i]) cudaEventDestroy(static_cast<cudaEvent_t>(events_[i]));
  delete[] events_;
  events_ = nullptr;
  slots_ = 0;
  if (scratch_) cudaFree(scratch_);
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  stream_ = nullptr;
  device_ = -1;
}

bool CopyStream::init(int device, int slots, uint64_t scratch_bytes, std::string* err) {
  reset();
  if (!ok(cudaSetDevice(device), "cudaSetDevice", err)) return false;
  device_ = device;
  cudaStream_t s;
  if (!ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate", err)) return false;
  stream_ = s;
  events_ = new void*[slots]();
  slots_ = slots;
  for (int i = 0; i < slots; ++i) {
    cudaEvent_t e;
    if (!ok(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate", err)) return false;
    events_[i] = e;
  }
  if (scratch_bytes > 0) {
    if (!ok(cudaMalloc(&scratch_, scratch_bytes), "cudaMalloc (conversion scratch)", err)) return false;
    scratch_bytes_ = scratch_bytes;
  }
  return true;
}

bool CopyStream::h2d(void* dst, const void* src, uint64_t n, std::string* err) {
  return ok(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream_)),
            "cudaMemcpyAsync", err);
}

bool CopyStream::h2d_convert(void* dst, const void* src, uint64_t n, ConvType from, ConvType to, std::string* err) {
  const uint64_t in_bytes = n * size_of(from);
  if (in_bytes > scratch_bytes_) {
    if (err) *err = "conversion chunk larger than the device scratch buffer";
    return false;
  }
  auto s = static_cast<cudaStream_t>(stream_);
  if (!ok(cudaMemcpyAsync(scratch_, src, in_bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync", err)) return false;
  return launch_convert(from, to, dst, scratch_, n, s, err);
}

bool CopyStream::record(int slot, std::string* err) {
  return ok(cudaEventRecord(static_cast<cudaEvent_t>(events_[slot]), static_cast<cudaStream_t>(stream_)),
            "cudaEventRecord", err);
}

bool CopyStream::wait(int slot, std::string* err) {
  return ok(cudaEventSynchronize(static_cast<cudaEvent_t>(events_[slot])), "cudaEventSynchronize", err);
}

bool CopyStream::synchronize(std::string* err) {
  return ok(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "cudaStreamSynchronize", err);
}

bool d2h(int device, void* dst, const void* src, uint64_t n, std::string* err) {
  if (!ok(cudaSetDevice(device), "cudaSetDevice", err)) return false;
  // Work on non-blocking streams (the engine's copy ring) is not ordered before a plain
  // cudaMemcpy: wait for the whole device first.
  if (!ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize", err)) return false;
  return ok(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), "cudaMemcpy D2H", err);
}

bool convert_on_device(int device, ConvType from, ConvType to, const void* src, void* dst, uint64_t n,
                       std::string* err) {
  if (!ok(cudaSetDevice(device), "cudaSetDevice", err)) return false;
  void *din = nullptr, *dout = nullptr;
  bool good = ok(cudaMalloc(&din, n * size_of(from) + 1), "cudaMalloc", err) &&
              ok(cudaMalloc(&dout, n * size_of(to) + 1), "cudaMalloc", err) &&
              ok(cudaMemcpy(din, src, n * size_of(from), cudaMemcpyHostToDevice), "cudaMemcpy", err) &&
              launch_convert(from, to, dout, din, n, nullptr, err) &&
              ok(cudaDeviceSynchronize(), "kernel", err) &&
              ok(cudaMemcpy(dst, dout, n * size_of(to), cudaMemcpyDeviceToHost), "cudaMemcpy", err);
  cudaFree(din);
  cudaFree(dout);
  return good;
}

double measure_h2d_peak(int device, uint64_t bytes, int reps, std::string* err) {
  if (!ok(cudaSetDevice(device), "cudaSetDevice", err)) return 0;
  void* h = pinned_alloc(bytes, err);
  if (!h) return 0;
  void* d = device_alloc(device, bytes, err);
  if (!d) {
    pinned_free(h);
    return 0;
  }
  double best = 0;
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);  // warm-up
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a);
    cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice);
    cudaEventRecord(b);
    if (!ok(cudaEventSynchronize(b), "cudaEventSynchronize", err)) break;
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (ms > 0) best = std::max(best, double(bytes) / (ms / 1e3));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  device_free(device, d);
  pinned_free(h);
  return best;
}

}  // namespace nunchaku::cuda
