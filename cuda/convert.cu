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

// The source element as f32 bits, widened as src/io/convert.cpp does: exact for numbers, and
// a NaN keeps its sign and payload (the CUDA intrinsics would canonicalise it).
__device__ __forceinline__ uint32_t load_bits(const void* src, uint64_t i, ConvType t) {
  switch (t) {
    case ConvType::F32: return static_cast<const uint32_t*>(src)[i];
    case ConvType::F16: {
      const uint16_t h = static_cast<const uint16_t*>(src)[i];
      if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu))
        return (uint32_t(h & 0x8000u) << 16) | 0x7f800000u | (uint32_t(h & 0x3ffu) << 13);
      return __float_as_uint(__half2float(static_cast<const __half*>(src)[i]));
    }
    default: return uint32_t(static_cast<const uint16_t*>(src)[i]) << 16;
  }
}

// Sources and destinations may be only 2-byte aligned (file layouts), so scalar accesses.
// Numbers round to nearest even through the intrinsics; a NaN becomes the quiet NaN with the
// same sign and top payload bits that the CPU conversion (f32_to_f16 / f32_to_bf16) writes,
// so `load --dtype ... --verify` compares the same bytes whatever the file holds.
__global__ void convert_kernel(ConvType from, ConvType to, void* dst, const void* src, uint64_t n) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x) {
    const uint32_t x = load_bits(src, i, from), ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) {  // NaN
      static_cast<uint16_t*>(dst)[i] = to == ConvType::F16
                                           ? uint16_t(((x >> 16) & 0x8000u) | 0x7e00u | ((ax >> 13) & 0x3ffu))
                                           : uint16_t((x >> 16) | 0x40u);
    } else if (to == ConvType::F16) {
      static_cast<__half*>(dst)[i] = __float2half_rn(__uint_as_float(x));
    } else {
      static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(__uint_as_float(x));
    }
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
