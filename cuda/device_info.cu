#include "cuda/device_info.hpp"

#include <cuda_runtime.h>

#include "cuda/no_device.cuh"

namespace nunchaku::cuda {

bool compiled_in() { return true; }

std::vector<DeviceInfo> list_devices(std::string* why_none) {
  std::vector<DeviceInfo> out;
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    const std::string reason = no_device_reason(err);
    if (why_none) *why_none = reason;
    return out;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    DeviceInfo d;
    d.index = i;
    d.name = p.name;
    d.cc_major = p.major;
    d.cc_minor = p.minor;
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
      d.free_bytes = free_b;
      d.total_bytes = total_b;
    } else {
      d.total_bytes = p.totalGlobalMem;
    }
    out.push_back(d);
  }
  if (out.empty() && why_none) *why_none = kNoGpu;
  return out;
}

}  // namespace nunchaku::cuda
