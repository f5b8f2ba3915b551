// The CUDA emulator: lets the unchanged cuda/*.cu sources compile as plain C++20 with the host
// compiler and run on the CPU, so the [cuda] tests execute the real kernel source on machines
// without a GPU (tests/emu/, target nunchaku_cuda_emu_tests). Not part of any shipped binary.
//
// Reached through the shim headers in cuda/emu/include/ (cuda_runtime.h, cuda_fp16.h,
// cuda_bf16.h, cublas_v2.h), which only the emulator targets put on the include path.
//
// Model (docs/engine.md, "CUDA emulator"):
// - a launch runs its grid's blocks one after another; each block's threads are fibers
//   (exec.cpp; resumed in a shuffled order between barriers, so code that needs a barrier it
//   lacks sees another thread's work undone) or OS threads, so __syncthreads() is a barrier
//   over the block, __syncwarp() a barrier over the thread's warp (32 consecutive threads) and
//   __shfl_*_sync exchange values through a per-warp slot array, one warp barrier per shuffle
//   (two alternating slot arrays);
// - `__shared__` variables are function statics: one copy, shared by the block's threads.
//   Blocks and launches never overlap (one launch at a time, process-wide), so a block sees
//   its own copy, poisoned (0xff bytes, NaN) before the block starts;
// - one device (NUNCHAKU_CUDA_EMU_DEVICES=0 emulates a host without one) with
//   NUNCHAKU_CUDA_EMU_MEM_MIB MiB of memory (default 4096): cudaMalloc beyond it fails with
//   cudaErrorMemoryAllocation; device memory is host memory (256-byte aligned, followed by a
//   guard checked after every kernel: a write past the end faults), and the
//   runtime checks what it can: copy ranges inside one allocation, copy directions, cuBLAS
//   operand extents, launch configurations (block <= 1024 threads, grid limits, dynamic
//   shared memory <= 48 KiB). A barrier nobody completes within 20 s (a __syncthreads in a
//   branch not all threads take) faults the launch (sticky cudaErrorLaunchFailure);
// - streams execute work in order, each kernel or copy at the latest or the earliest moment
//   the CUDA ordering rules allow (a seeded choice, see runtime.cpp), so a missing event or
//   synchronization shows up as stale or overwritten data;
// - cuBLAS is a plain-loop SGEMM with fp32 accumulation (cublas.cpp), reached through the
//   same dlopen/dlsym calls the engine makes (redirected to a symbol table here).
#pragma once

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- language -----------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
// `__shared__` variables are statics in one ELF section, nk_emu_shared, which the executor
// fills with 0xff bytes (NaN) before every block: a thread that reads shared memory before the
// block wrote it gets NaN, as garbage on a GPU, not the previous block's plausible values.
#define __shared__ static __attribute__((section("nk_emu_shared")))
#define __launch_bounds__(...)

#define CUDART_VERSION 13000

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};

// The built-in variables, per OS thread (set by the launcher for the thread it runs).
// constinit: no dynamic initialization, so other files read them directly instead of through
// a TLS wrapper call (whose result UBSan's null check misreports as a null dim3).
extern thread_local constinit uint3 threadIdx, blockIdx;
extern thread_local constinit dim3 blockDim, gridDim;
constexpr int warpSize = 32;

namespace nk_emu {
void syncthreads();
void syncwarp(unsigned mask);
uint64_t shfl(unsigned mask, uint64_t v, int src_lane_or_delta, int width, int mode);  // mode 0 xor, 1 down, 2 idx, 3 up
}  // namespace nk_emu

inline void __syncthreads() { nk_emu::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { nk_emu::syncwarp(mask); }

namespace nk_emu {
template <class T>
T shfl_t(unsigned mask, T v, int arg, int width, int mode) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "the emulator shuffles values of up to 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = shfl(mask, bits, arg, width, mode);
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}
}  // namespace nk_emu
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) { return nk_emu::shfl_t(mask, v, lane_mask, width, 0); }
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) { return nk_emu::shfl_t(mask, v, int(delta), width, 1); }
template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) { return nk_emu::shfl_t(mask, v, src, width, 2); }
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) { return nk_emu::shfl_t(mask, v, int(delta), width, 3); }

template <class T>
inline T __ldg(const T* p) { return *p; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
// Round-to-nearest products and sums: the host compiler rounds every operation on its own
// (the emulator targets are built with -ffp-contract=off).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }

// ---- half and bfloat16 (IEEE binary16 / bfloat16, round to nearest even) ------------------
namespace nk_emu {
uint16_t float_to_half_rn(float f);
float half_to_float(uint16_t h);
uint16_t float_to_bf16_rn(float f);
inline float bf16_to_float(uint16_t b) { return __uint_as_float(unsigned(b) << 16); }
}  // namespace nk_emu
struct __half {
  uint16_t __x = 0;
};
struct __nv_bfloat16 {
  uint16_t __x = 0;
};
inline float __half2float(__half h) { return nk_emu::half_to_float(h.__x); }
inline __half __float2half_rn(float f) { return {nk_emu::float_to_half_rn(f)}; }
inline __half __float2half(float f) { return __float2half_rn(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return nk_emu::bf16_to_float(b.__x); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {nk_emu::float_to_bf16_rn(f)}; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }

// ---- runtime API ------------------------------------------------------------------------
enum cudaError_t : int {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorHostMemoryAlreadyRegistered = 712,
  cudaErrorHostMemoryNotRegistered = 713,
  cudaErrorLaunchFailure = 719,
};
enum cudaMemcpyKind : int {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
struct CUstream_st;
struct CUevent_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;
constexpr unsigned cudaStreamDefault = 0, cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDefault = 0, cudaEventBlockingSync = 1, cudaEventDisableTiming = 2;
constexpr unsigned cudaHostAllocDefault = 0, cudaHostAllocPortable = 1;
constexpr unsigned cudaHostRegisterDefault = 0, cudaHostRegisterPortable = 1;

struct cudaDeviceProp {
  char name[256] = {};
  size_t totalGlobalMem = 0;
  size_t sharedMemPerBlock = 0;
  int warpSize = 32;
  int maxThreadsPerBlock = 0;
  int maxThreadsDim[3] = {};
  int maxGridSize[3] = {};
  int major = 0, minor = 0;
  int multiProcessorCount = 0;
};

cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaDriverGetVersion(int* v);
cudaError_t cudaRuntimeGetVersion(int* v);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t e);
const char* cudaGetErrorName(cudaError_t e);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaMalloc(void** p, size_t n);
template <class T>
cudaError_t cudaMalloc(T** p, size_t n) { return cudaMalloc(reinterpret_cast<void**>(p), n); }
cudaError_t cudaFree(void* p);
cudaError_t cudaHostAlloc(void** p, size_t n, unsigned flags);
cudaError_t cudaMallocHost(void** p, size_t n);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaHostRegister(void* p, size_t n, unsigned flags);
cudaError_t cudaHostUnregister(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t s = nullptr);
cudaError_t cudaMemset(void* dst, int value, size_t n);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t n, cudaStream_t s = nullptr);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDeviceReset();
cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

// ---- kernel launches ------------------------------------------------------------------------
namespace nk_emu {
// Checks the configuration (the launch error, as cudaGetLastError reports it) and enqueues
// `block_body` (one CUDA thread's work) for every thread of every block on `s`.
// `pointers`: the kernel's pointer parameters (index, value), checked to be device or pinned
// memory (a host pointer would fault on a GPU).
struct PointerArg {
  int index;
  const void* p;
};
void launch(const char* name, dim3 grid, dim3 block, size_t smem, cudaStream_t s, const PointerArg* pointers,
            int n_pointers, std::function<void()> thread_body);

template <class... P, class... A>
void launch_kernel(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                   A&&... args) {
  // Parameters are copied once, converted to the kernel's parameter types, as a launch does.
  auto params = std::make_shared<std::tuple<std::decay_t<P>...>>(std::forward<A>(args)...);
  PointerArg ptrs[sizeof...(P) + 1] = {};
  int n = 0;
  std::apply(
      [&](const auto&... v) {
        int i = 0;
        auto note = [&](const auto& x) {
          if constexpr (std::is_pointer_v<std::decay_t<decltype(x)>>) ptrs[n++] = {i, static_cast<const void*>(x)};
          ++i;
        };
        (note(v), ...);
      },
      *params);
  launch(name, grid, block, smem, s, ptrs, n, [kernel, params] { std::apply(kernel, *params); });
}

// For the emulator's own tests: the device memory limit (bytes; 0 restores the environment's)
// and the bytes allocated now.
void set_memory_limit(uint64_t bytes);
uint64_t allocated_bytes();
// How long a barrier waits for the rest of its threads before the launch faults (20 s).
void set_barrier_timeout_ms(int ms);
// When work runs: "mixed", "lazy", "eager", "kernels-first" or "copies-first" (runtime.cpp);
// nullptr restores the environment's NUNCHAKU_CUDA_EMU_SCHEDULE.
void set_schedule(const char* schedule);
// The text of the last kernel fault (empty when none); clears the sticky error it left.
std::string take_fault();
}  // namespace nk_emu

// ---- dlopen of cuBLAS ---------------------------------------------------------------------
// cublas.cpp answers dlopen("...libcublas.so...") with its own table of the cuBLAS functions;
// any other library name goes to the real dlopen.
namespace nk_emu {
void* dl_open(const char* name, int flags);
void* dl_sym(void* handle, const char* name);
char* dl_error();
}  // namespace nk_emu
#define dlopen(name, flags) ::nk_emu::dl_open(name, flags)
#define dlsym(handle, name) ::nk_emu::dl_sym(handle, name)
#define dlerror() ::nk_emu::dl_error()

// ---- cuBLAS (the functions engine_ops.cu calls) ---------------------------------------------
struct cublasContext;
using cublasHandle_t = cublasContext*;
enum cublasStatus_t : int {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
};
enum cublasOperation_t : int { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
enum cublasMath_t : int { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TF32_TENSOR_OP_MATH = 3 };
extern "C" {
cublasStatus_t cublasCreate_v2(cublasHandle_t* h);
cublasStatus_t cublasDestroy_v2(cublasHandle_t h);
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode);
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void* workspace, size_t bytes);
cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const float* alpha, const float* a, int lda, const float* b, int ldb, const float* beta,
                              float* c, int ldc);
}
