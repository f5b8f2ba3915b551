// CUDA implementation of cuda/copy_ring.hpp.
#include "cuda/copy_ring.hpp"

#include <cuda_runtime.h>

#include "cuda/no_device.cuh"

namespace nunchaku::cuda {
namespace {
bool check(cudaError_t e, const char* call, int line, std::string* err) {
  if (e == cudaSuccess) return true;
  const std::string text = error_text(e, call);
  if (err) *err = is_no_device(e) ? text : text + " (cuda/copy_ring.cu:" + std::to_string(line) + ")";
  return false;
}
#define NK_CUDA(call) \
  if (!check((call), #call, __LINE__, err)) return false
cudaEvent_t ev(void* e) { return cudaEvent_t(e); }
}  // namespace

CopyRing::~CopyRing() {
  if (device_ < 0) return;
  cudaSetDevice(device_);
  if (copy_) cudaStreamSynchronize(cudaStream_t(copy_));
  for (void* b : buf_) cudaFree(b);
  for (auto* v : {&filled_, &done_, &start_})
    for (void* e : *v) cudaEventDestroy(ev(e));
  if (copy_) cudaStreamDestroy(cudaStream_t(copy_));
}

bool CopyRing::init(int device, void* compute_stream, int slots, uint64_t slot_bytes, std::string* err) {
  device_ = device;
  compute_ = compute_stream;
  slot_bytes_ = slot_bytes;
  NK_CUDA(cudaSetDevice(device));
  cudaStream_t s = nullptr;
  NK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  copy_ = s;
  for (int i = 0; i < slots; ++i) {
    void* b = nullptr;
    NK_CUDA(cudaMalloc(&b, slot_bytes ? slot_bytes : 1));
    buf_.push_back(b);
    cudaEvent_t f, d, st;
    NK_CUDA(cudaEventCreate(&f));
    filled_.push_back(f);
    NK_CUDA(cudaEventCreateWithFlags(&d, cudaEventDisableTiming));
    done_.push_back(d);
    NK_CUDA(cudaEventCreate(&st));
    start_.push_back(st);
    NK_CUDA(cudaEventRecord(d, cudaStream_t(compute_)));  // every slot starts free
  }
  bytes_.assign(size_t(slots), 0);
  return true;
}

bool CopyRing::begin(int s, std::string* err) {
  NK_CUDA(cudaSetDevice(device_));
  NK_CUDA(cudaStreamWaitEvent(cudaStream_t(copy_), ev(done_[size_t(s)]), 0));
  NK_CUDA(cudaEventRecord(ev(start_[size_t(s)]), cudaStream_t(copy_)));
  bytes_[size_t(s)] = 0;
  return true;
}

bool CopyRing::copy(int s, uint64_t offset, const void* src, uint64_t n, std::string* err) {
  if (offset + n > slot_bytes_) {
    if (err) *err = "copy past the end of a device slot (cuda/copy_ring.cu)";
    return false;
  }
  NK_CUDA(cudaMemcpyAsync(static_cast<uint8_t*>(buf_[size_t(s)]) + offset, src, n, cudaMemcpyHostToDevice,
                          cudaStream_t(copy_)));
  bytes_[size_t(s)] += n;
  return true;
}

bool CopyRing::filled(int s, std::string* err) {
  NK_CUDA(cudaEventRecord(ev(filled_[size_t(s)]), cudaStream_t(copy_)));
  return true;
}

bool CopyRing::use(int s, std::string* err) {
  NK_CUDA(cudaStreamWaitEvent(cudaStream_t(compute_), ev(filled_[size_t(s)]), 0));
  return true;
}

bool CopyRing::done(int s, std::string* err) {
  NK_CUDA(cudaEventRecord(ev(done_[size_t(s)]), cudaStream_t(compute_)));
  return true;
}

bool CopyRing::wait_filled(int s, std::string* err) {
  NK_CUDA(cudaEventSynchronize(ev(filled_[size_t(s)])));
  float ms = 0;
  // The elapsed time includes any wait for the slot to be released, so this is a lower bound.
  if (cudaEventElapsedTime(&ms, ev(start_[size_t(s)]), ev(filled_[size_t(s)])) == cudaSuccess && ms > 0)
    last_gbps_ = double(bytes_[size_t(s)]) / (double(ms) * 1e-3) / 1e9;
  cudaGetLastError();
  return true;
}

bool register_host(void* p, uint64_t n, std::string* err) {
  NK_CUDA(cudaHostRegister(p, n, cudaHostRegisterPortable));
  return true;
}
void unregister_host(void* p) {
  if (p) cudaHostUnregister(p);
}

}  // namespace nunchaku::cuda
