// The dtype conversion kernel for `load --dtype`: GPU twin of src/io/convert.cpp.
// Written with the CUDA intrinsics (not the CPU twin's bit code) so the twin test
// in tests/test_cuda.cpp compares two independent implementations.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "cuda/launch.cuh"
#include "cuda/loader.hpp"

namespace nunchaku::cuda {
namespace {

__device__ __forceinline__ float load_f(const void* src, uint64_t i, ConvType t) {
  switch (t) {
    case ConvType::F32: return static_cast<const float*>(src)[i];
    case ConvType::F16: return __half2float(static_cast<const __half*>(src)[i]);
    default: return __bfloat162float(static_cast<const __nv_bfloat16*>(src)[i]);
  }
}

// Sources and destinations may be only 2-byte aligned (file layouts), so scalar accesses.
__global__ void convert_kernel(ConvType from, ConvType to, void* dst, const void* src, uint64_t n) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x) {
    const float v = load_f(src, i, from);  // exact for every supported source
    if (to == ConvType::F16)
      static_cast<__half*>(dst)[i] = __float2half_rn(v);
    else
      static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(v);
  }
}

}  // namespace

bool launch_convert(ConvType from, ConvType to, void* dst, const void* src, uint64_t n, cudaStream_t s,
                    std::string* err) {
  if (to == ConvType::F32) {
    if (err) *err = "conversion to F32 is not supported";
    return false;
  }
  if (n == 0) return true;
  const int threads = 256;
  uint64_t blocks = (n + threads - 1) / threads;
  if (blocks > 65535u * 16u) blocks = 65535u * 16u;  // grid-stride loop covers the rest
  NK_LAUNCH(convert_kernel, static_cast<unsigned>(blocks), threads, 0, s, from, to, dst, src, n);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    if (err) *err = std::string("convert kernel launch: ") + cudaGetErrorString(e);
    return false;
  }
  return true;
}

}  // namespace nunchaku::cuda
