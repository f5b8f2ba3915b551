// Why no CUDA device can be used, from cudaGetDeviceCount's error, worded once for every
// .cu file (device_info.cu, loader.cu, copy_ring.cu, engine_ops.cu). A host without the NVIDIA driver
// makes the runtime report cudaErrorInsufficientDriver, which reads as a driver too old;
// cudaDriverGetVersion tells the two apart (it gives 0 when no driver is installed).
// Included by .cu files only; plain C++ code sees the message through their `why` strings.
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace nunchaku::cuda {

inline constexpr const char* kNoGpu = "no NVIDIA GPU/driver found";

// `e` is not cudaSuccess. Clears the runtime's sticky error.
inline std::string no_device_reason(cudaError_t e) {
  cudaGetLastError();
  int driver = 0, runtime = 0;
  if (e == cudaErrorNoDevice) return kNoGpu;
  if (e == cudaErrorInsufficientDriver) {
    if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) return kNoGpu;
    cudaRuntimeGetVersion(&runtime);
    return "the NVIDIA driver supports CUDA " + std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10) +
           ", older than this build's CUDA runtime " + std::to_string(runtime / 1000) + "." +
           std::to_string(runtime % 1000 / 10) + " (update the driver, or build nunchaku with an older CUDA toolkit)";
  }
  return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
}

// True for the errors any first CUDA call gives on a host where no device can be used.
inline bool is_no_device(cudaError_t e) { return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver; }

// The text for a failed call `call`: no_device_reason() when no device can be used (whatever
// call was first), else "call: CUDA's message". Clears the sticky error.
inline std::string error_text(cudaError_t e, const char* call) {
  if (is_no_device(e)) return no_device_reason(e);
  cudaGetLastError();
  return std::string(call) + ": " + cudaGetErrorString(e);
}

}  // namespace nunchaku::cuda
