// CUDA kernels of the engine's CUDA backend (see engine_ops.hpp). Per-element arithmetic
// comes from device_math.hpp, which the CPU-twin tests check against the CPU engine.
//
// Set NUNCHAKU_CUDA_SYNC=1 in the environment to synchronize after every op, so a fault is
// reported by the op that caused it (gpu-check's op tests do this).
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <type_traits>

#include "cuda/engine_ops.hpp"
#include "cuda/launch.cuh"
#include "cuda/no_device.cuh"

namespace nunchaku::cuda {
namespace {

bool fail(std::string* err, const std::string& what, const char* file, int line) {
  if (err) *err = what + " (" + file + ":" + std::to_string(line) + ")";
  return false;
}
bool check_cuda(cudaError_t e, const char* call, const char* file, int line, std::string* err) {
  if (e == cudaSuccess) return true;
  if (is_no_device(e)) {
    const std::string text = no_device_reason(e);
    if (err) *err = text;
    return false;
  }
  return fail(err, error_text(e, call), file, line);
}
bool check_cublas(cublasStatus_t s, const char* call, const char* file, int line, std::string* err) {
  if (s == CUBLAS_STATUS_SUCCESS) return true;
  return fail(err, std::string(call) + ": cuBLAS status " + std::to_string(int(s)), file, line);
}
#define NK_CUDA(call) \
  if (!check_cuda((call), #call, __FILE__, __LINE__, err)) return false
#define NK_CUBLAS(call) \
  if (!check_cublas((call), #call, __FILE__, __LINE__, err)) return false

// cuBLAS is opened when the first CUDA context starts (dlopen), not linked: its libraries
// cost every process ~150 MiB of resident memory at start-up, CPU runs included.
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  std::string error;
};

const CublasApi* cublas_api(std::string* err) {
  static const CublasApi api = [] {
    CublasApi a;
    void* h = nullptr;
    const std::string versioned = "libcublas.so." + std::to_string(CUDART_VERSION / 1000);
    // First beside the CUDA runtime this binary uses (the toolkit's lib directory), then
    // wherever the dynamic loader looks.
    std::string beside;
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &info) && info.dli_fname) {
      const std::string rt = info.dli_fname;
      if (const size_t slash = rt.rfind('/'); slash != std::string::npos) beside = rt.substr(0, slash + 1) + versioned;
    }
    for (const std::string& name : {beside, versioned, std::string("libcublas.so")})
      if (!name.empty() && (h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
    if (!h) {
      const char* why = dlerror();
      a.error = "cannot load cuBLAS (" + versioned + "): " + (why ? why : "not found");
      return a;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (!fn && a.error.empty()) a.error = std::string("cuBLAS lacks ") + name;
    };
    sym(a.create, "cublasCreate_v2");
    sym(a.destroy, "cublasDestroy_v2");
    sym(a.set_stream, "cublasSetStream_v2");
    sym(a.set_math_mode, "cublasSetMathMode");
    sym(a.set_workspace, "cublasSetWorkspace_v2");
    sym(a.sgemm, "cublasSgemm_v2");
    return a;
  }();
  if (!api.error.empty()) {
    if (err) *err = api.error;
    return nullptr;
  }
  return &api;
}

bool sync_each_op() {
  static const bool on = [] {
    const char* v = std::getenv("NUNCHAKU_CUDA_SYNC");
    return v && *v && *v != '0';
  }();
  return on;
}

// After a launch: the launch error, and with NUNCHAKU_CUDA_SYNC the execution error.
bool launched(Context& c, const char* kernel, const char* file, int line, std::string* err) {
  if (!check_cuda(cudaGetLastError(), kernel, file, line, err)) return false;
  if (sync_each_op())
    return check_cuda(cudaStreamSynchronize(cudaStream_t(c.stream())), kernel, file, line, err);
  return true;
}
#define NK_LAUNCHED(name) launched(c, name, __FILE__, __LINE__, err)

cudaStream_t st(const Context& c) { return cudaStream_t(c.stream()); }

__device__ __forceinline__ float vec_at(const DVec& w, int64_t i) {
  const uint8_t* p = static_cast<const uint8_t*>(w.data);
  switch (w.type) {
    case WType::F16: return half_bits_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
    case WType::BF16: return bf16_bits_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
    default: return reinterpret_cast<const float*>(p)[i];
  }
}

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum of a double over the block (blockDim.x a multiple of 32, <= 1024); all threads get it.
__device__ double block_sum(double v) {
  __shared__ double part[32];
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();  // `part` may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  double s = 0;
  for (int w = 0; w < warps; ++w) s += part[w];
  return s;
}

// ---- row-wise ops ----------------------------------------------------------------

__global__ void embed_kernel(DMatrix table, const int32_t* ids, float scale, float* x) {
  const int64_t t = blockIdx.x;
  const uint8_t* row = static_cast<const uint8_t*>(table.data) + uint64_t(ids[t]) * table.row_bytes;
  for (int64_t i = threadIdx.x; i < table.cols; i += blockDim.x) {
    const float v = dequant_at(row, table.type, i);
    x[t * table.cols + i] = scale == 1.0f ? v : v * scale;
  }
}

// The norm's weight i: w, 1 + w (computed in fp32, as the CPU backend and HF do), or 1 (unit weights).
__device__ __forceinline__ float norm_w(const DNorm& n, int64_t i) {
  if (!n.w.data) return 1.0f;
  const float w = vec_at(n.w, i);
  return n.kind == NormType::RmsOnePlus ? 1.0f + w : w;
}

// One block per (row, group of n.w.n values of the first `width`); rows `ld` floats apart.
// Row r reads in[rows[r]] (rows given) or in[r], adding delta[r] first when given.
__global__ void norm_kernel(float* in, const float* delta, const int64_t* rows, float* out, int64_t width, int64_t ld,
                            DNorm nw, float eps) {
  const int64_t n = nw.w.n, groups = width / n;
  const int64_t r = blockIdx.x / groups, g = blockIdx.x % groups;
  float* x = in + (rows ? rows[r] : r) * ld + g * n;
  float* o = out + r * ld + g * n;
  double ss = 0, sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float v = x[i];
    if (delta) x[i] = v = v + delta[r * ld + g * n + i];
    ss += double(v) * v;
    sum += v;
  }
  if (nw.kind != NormType::Layer) {
    const float inv = rms_inv(block_sum(ss), n, eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) o[i] = norm_w(nw, i) * (x[i] * inv);
    return;
  }
  const double mean = block_sum(sum) / double(n);
  double dev = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dev += (double(x[i]) - mean) * (double(x[i]) - mean);
  const float inv = rms_inv(block_sum(dev), n, eps), m = float(mean);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    o[i] = vec_at(nw.w, i) * ((x[i] - m) * inv) + (nw.bias.data ? vec_at(nw.bias, i) : 0.0f);
}

__global__ void add_kernel(float* x, const float* d, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) x[i] += d[i];
}
__global__ void act_mul_kernel(float* g, const float* u, int64_t n, int act) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    g[i] = act == 0 ? silu_times(g[i], u[i]) : gelu_tanh_times(g[i], u[i]);
}
__global__ void scale_kernel(float* x, int64_t n, float s) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) x[i] *= s;
}
__global__ void softcap_kernel(float* x, int64_t n, float cap) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = softcap_of(x[i], cap);
}
__global__ void bias_kernel(float* y, int64_t ldy, int64_t rows, int64_t B, DVec bias) {
  const int64_t n = rows * B;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[(i / rows) * ldy + i % rows] += vec_at(bias, i % rows);
}

unsigned grid_for(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}

// ---- matmul: GEMV for few tokens --------------------------------------------------
// One warp per weight row, 4 warps per block. The row is cut into chunks of 32 elements:
// a quantized block (32) or K-quant sub-block (32 of 256), dequantized by one lane into
// registers and dotted with up to kTok tokens at once; float rows are read lane-interleaved
// (element j*32 + lane of a 1024-wide tile) so each load instruction is coalesced.
constexpr int kTok = 8;
constexpr int kWarps = 4;

// matmul_heads: blockIdx.y is the head; its matrix, input and output start these many bytes
// (w) and floats (x, y) further per head (all 0 for one matrix).
struct HeadStep {
  int64_t w = 0, x = 0, y = 0;
};
// The block's head (blockIdx.y), w moved to its matrix (x and y move by h * hs.x, h * hs.y).
__device__ __forceinline__ int64_t to_head(const HeadStep& hs, DMatrix& w) {
  const int64_t h = blockIdx.y;
  w.data = static_cast<const uint8_t*>(w.data) + h * hs.w;
  return h;
}

template <WType T>
__device__ __forceinline__ void decode32(const uint8_t* row, int64_t chunk, float* v) {
  constexpr int be = T == WType::Q4_K || T == WType::Q5_K || T == WType::Q6_K ? 256 : 32;
  constexpr int bb = T == WType::Q8_0 ? 34 : T == WType::Q4_0 ? 18 : T == WType::Q4_1 ? 20 : T == WType::Q5_0 ? 22
                   : T == WType::Q5_1 ? 24 : T == WType::Q4_K ? 144 : T == WType::Q5_K ? 176 : 210;
  const int64_t first = chunk * 32;
  const uint8_t* blk = row + (first / be) * bb;
  const int off = int(first % be);
#pragma unroll
  for (int j = 0; j < 32; ++j) v[j] = dequant_in_block(blk, T, off + j);
}

template <WType T>
__global__ void gemv_quant(DMatrix w, const float* __restrict__ x, int64_t ldx, int64_t B, float* y, int64_t ldy, DVec bias,
                HeadStep hs) {
  const int64_t head = to_head(hs, w);
  x += head * hs.x;
  y += head * hs.y;
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (r >= w.rows) return;
  const uint8_t* row = static_cast<const uint8_t*>(w.data) + uint64_t(r) * w.row_bytes;
  const int64_t chunks = w.cols / 32;
  for (int64_t b0 = 0; b0 < B; b0 += kTok) {
    const int nb = int(B - b0 < kTok ? B - b0 : kTok);
    float acc[kTok] = {};
    for (int64_t c = lane; c < chunks; c += 32) {
      float v[32];
      decode32<T>(row, c, v);
      for (int b = 0; b < nb; ++b) {
        const float* xb = x + (b0 + b) * ldx + c * 32;
        float s = 0;
#pragma unroll
        for (int j = 0; j < 32; ++j) s += v[j] * xb[j];
        acc[b] += s;
      }
    }
    for (int b = 0; b < nb; ++b) {
      const float s = warp_sum(acc[b]);
      if (lane == 0) y[(b0 + b) * ldy + r] = s + (bias.data ? vec_at(bias, r) : 0.0f);
    }
  }
}

template <WType T>
__global__ void gemv_float(DMatrix w, const float* __restrict__ x, int64_t ldx, int64_t B, float* y, int64_t ldy, DVec bias,
                HeadStep hs) {
  const int64_t head = to_head(hs, w);
  x += head * hs.x;
  y += head * hs.y;
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (r >= w.rows) return;
  const uint8_t* row = static_cast<const uint8_t*>(w.data) + uint64_t(r) * w.row_bytes;
  for (int64_t b0 = 0; b0 < B; b0 += kTok) {
    const int nb = int(B - b0 < kTok ? B - b0 : kTok);
    float acc[kTok] = {};
    for (int64_t i = lane; i < w.cols; i += 32) {
      const float v = T == WType::F32   ? reinterpret_cast<const float*>(row)[i]
                      : T == WType::F16 ? half_bits_to_float(reinterpret_cast<const uint16_t*>(row)[i])
                                        : bf16_bits_to_float(reinterpret_cast<const uint16_t*>(row)[i]);
      for (int b = 0; b < nb; ++b) acc[b] += v * x[(b0 + b) * ldx + i];
    }
    for (int b = 0; b < nb; ++b) {
      const float s = warp_sum(acc[b]);
      if (lane == 0) y[(b0 + b) * ldy + r] = s + (bias.data ? vec_at(bias, r) : 0.0f);
    }
  }
}

// F16/BF16 rows read 16 bytes (8 values) per lane per load, x as two float4 per token:
// the decode path of the 16-bit types when rows and x are 16-byte aligned.
template <WType T>
__global__ void gemv_half8(DMatrix w, const float* __restrict__ x, int64_t ldx, int64_t B, float* y, int64_t ldy, DVec bias,
                HeadStep hs) {
  const int64_t head = to_head(hs, w);
  x += head * hs.x;
  y += head * hs.y;
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (r >= w.rows) return;
  const uint4* row = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(w.data) + uint64_t(r) * w.row_bytes);
  const int64_t n8 = w.cols / 8;
  for (int64_t b0 = 0; b0 < B; b0 += kTok) {
    const int nb = int(B - b0 < kTok ? B - b0 : kTok);
    float acc[kTok] = {};
    for (int64_t i = lane; i < n8; i += 32) {
      const uint4 u = __ldg(row + i);
      const uint32_t words[4] = {u.x, u.y, u.z, u.w};
      float v[8];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint16_t lo = uint16_t(words[k] & 0xffffu), hi = uint16_t(words[k] >> 16);
        v[2 * k] = T == WType::F16 ? half_bits_to_float(lo) : bf16_bits_to_float(lo);
        v[2 * k + 1] = T == WType::F16 ? half_bits_to_float(hi) : bf16_bits_to_float(hi);
      }
      for (int b = 0; b < nb; ++b) {
        const float4* xb = reinterpret_cast<const float4*>(x + (b0 + b) * ldx) + 2 * i;
        const float4 a = xb[0], c = xb[1];
        acc[b] += v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * c.x + v[5] * c.y + v[6] * c.z + v[7] * c.w;
      }
    }
    for (int b = 0; b < nb; ++b) {
      const float s = warp_sum(acc[b]);
      if (lane == 0) y[(b0 + b) * ldy + r] = s + (bias.data ? vec_at(bias, r) : 0.0f);
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Rows [r0, r0 + n) of w dequantized to fp32 into panel[n][cols].
__global__ void dequant_panel(DMatrix w, int64_t r0, int64_t n, float* panel) {
  const int64_t total = n * w.cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / w.cols, col = i % w.cols;
    panel[i] = dequant_at(static_cast<const uint8_t*>(w.data) + uint64_t(r0 + r) * w.row_bytes, w.type, col);
  }
}

// `heads` matrices (matmul_heads; 1: matmul) a step `hs` apart, one grid row each.
bool launch_gemv(Context& c, const DMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy,
                 const DVec& bias, std::string* err, int64_t heads = 1, HeadStep hs = {}) {
  const dim3 grid(unsigned((w.rows + kWarps - 1) / kWarps), unsigned(heads));
  const dim3 block(32 * kWarps);
  cudaStream_t s = st(c);
  const bool wide = (w.type == WType::F16 || w.type == WType::BF16) && aligned16(w.data) && w.row_bytes % 16 == 0 &&
                    w.cols % 8 == 0 && aligned16(x) && ldx % 4 == 0 && hs.w % 16 == 0 && hs.x % 4 == 0;
  if (wide) {
    if (w.type == WType::F16) NK_LAUNCH(gemv_half8<WType::F16>, grid, block, 0, s, w, x, ldx, B, y, ldy, bias, hs);
    else NK_LAUNCH(gemv_half8<WType::BF16>, grid, block, 0, s, w, x, ldx, B, y, ldy, bias, hs);
    return NK_LAUNCHED("gemv_half8");
  }
  switch (w.type) {
#define NK_GEMV(T, K) \
  case T: NK_LAUNCH(K<T>, grid, block, 0, s, w, x, ldx, B, y, ldy, bias, hs); break;
    NK_GEMV(WType::F32, gemv_float)
    NK_GEMV(WType::F16, gemv_float)
    NK_GEMV(WType::BF16, gemv_float)
    NK_GEMV(WType::Q8_0, gemv_quant)
    NK_GEMV(WType::Q4_0, gemv_quant)
    NK_GEMV(WType::Q4_1, gemv_quant)
    NK_GEMV(WType::Q5_0, gemv_quant)
    NK_GEMV(WType::Q5_1, gemv_quant)
    NK_GEMV(WType::Q4_K, gemv_quant)
    NK_GEMV(WType::Q5_K, gemv_quant)
    NK_GEMV(WType::Q6_K, gemv_quant)
#undef NK_GEMV
  }
  return NK_LAUNCHED("gemv");
}

// Prefill: y^T (rows x B, column-major with ldy) = W (rows x cols) . x^T, panel by panel.
bool launch_gemm(Context& c, const DMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy,
                 const DVec& bias, std::string* err) {
  cublasHandle_t h = cublasHandle_t(c.cublas());
  const float one = 1.0f, zero = 0.0f;
  const bool direct = w.type == WType::F32 && w.row_bytes % 4 == 0;
  const int64_t per_panel = direct ? w.rows : int64_t(c.panel_bytes() / (uint64_t(w.cols) * 4));
  if (per_panel < 1) return fail(err, "dequantization panel smaller than one row of " + std::to_string(w.cols), __FILE__, __LINE__);
  for (int64_t r0 = 0; r0 < w.rows; r0 += per_panel) {
    const int64_t n = w.rows - r0 < per_panel ? w.rows - r0 : per_panel;
    const float* a;
    int64_t lda;
    if (direct) {
      a = static_cast<const float*>(w.data);
      lda = int64_t(w.row_bytes / 4);
    } else {
      NK_LAUNCH(dequant_panel, grid_for(n * w.cols, 256), 256, 0, st(c), w, r0, n, static_cast<float*>(c.panel()));
      if (!NK_LAUNCHED("dequant_panel")) return false;
      a = static_cast<const float*>(c.panel());
      lda = w.cols;
    }
    NK_CUBLAS(cublas_api(nullptr)->sgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(B), int(w.cols), &one, a, int(lda), x, int(ldx), &zero,
                          y + r0, int(ldy)));
  }
  if (bias.data) {
    NK_LAUNCH(bias_kernel, grid_for(w.rows * B, 256), 256, 0, st(c), y, ldy, w.rows, B, bias);
    return NK_LAUNCHED("bias");
  }
  return true;
}

// Input-major matrices (stored [cols][rows]: MLA's absorbed kv_b_proj as HF stores it), every
// batch: one thread per output r, summing x[i] * W[i][r] over i in order (as the CPU does); a
// block's threads read consecutive values of each stored row. blockIdx.y is the head.
constexpr int kInputMajorThreads = 128;

template <WType T>
__global__ void gemv_input_major(DMatrix w, const float* __restrict__ x, int64_t ldx, int64_t B, float* y, int64_t ldy,
                                 HeadStep hs) {
  const int64_t head = to_head(hs, w);
  x += head * hs.x;
  y += head * hs.y;
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= w.rows) return;
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  for (int64_t b0 = 0; b0 < B; b0 += kTok) {
    const int nb = int(B - b0 < kTok ? B - b0 : kTok);
    float acc[kTok] = {};
    for (int64_t i = 0; i < w.cols; ++i) {
      const uint8_t* row = base + uint64_t(i) * w.row_bytes;
      const float v = T == WType::F32   ? reinterpret_cast<const float*>(row)[r]
                      : T == WType::F16 ? half_bits_to_float(reinterpret_cast<const uint16_t*>(row)[r])
                                        : bf16_bits_to_float(reinterpret_cast<const uint16_t*>(row)[r]);
      for (int b = 0; b < nb; ++b) acc[b] += x[(b0 + b) * ldx + i] * v;
    }
    for (int b = 0; b < nb; ++b) y[(b0 + b) * ldy + r] = acc[b];
  }
}

// ---- attention ----------------------------------------------------------------------

// Head dims per lane: 8 (head_dim <= 256) or, for MLA's latent rows (512 + 64), 20 (<= 640).
constexpr int kMaxHdPerLane = 8;
constexpr int kMaxHdPerLaneWide = 20;

__device__ __forceinline__ float cache_at(const void* c, bool f16, uint64_t i) {
  return f16 ? __half2float(static_cast<const __half*>(c)[i]) : static_cast<const float*>(c)[i];
}

__device__ __forceinline__ int64_t rot_of(const AttnShape& s) { return s.rot_dims > 0 ? s.rot_dims : s.head_dim; }

// The head at p (head_dim values) rotated at position `pos` (the lanes of one warp): its
// rot_dims values from rot_off.
__device__ void rope_head(const AttnShape& s, float* p, int64_t pos, const float* inv_freq, int lane) {
  const int64_t rot = rot_of(s);
  p += s.rot_off;
  for (int64_t i = lane; i < rot / 2; i += 32) {
    int64_t a, b;
    rope_pair(s.neox, rot, i, a, b);
    const float xa = p[a], xb = p[b];
    float c, sn;
    rope_cs(pos, inv_freq[i], c, sn);
    if (s.mscale != 1.0f) c *= s.mscale, sn *= s.mscale;
    p[a] = xa * c - xb * sn;
    p[b] = xb * c + xa * sn;
  }
}

// Head kh of token t's k and v into the caches at (slot, pos mod positions); k only when vc is null.
__device__ void store_head(const AttnShape& s, const float* kh, const float* vh, int32_t slot, int64_t pos, int64_t head,
                           void* kc, void* vc, int lane) {
  const int64_t hd = s.head_dim, kv_dim = s.kv_heads * hd;
  const uint64_t off = (uint64_t(slot) * uint64_t(s.positions) + uint64_t(pos % s.positions)) * uint64_t(kv_dim) + uint64_t(head * hd);
  for (int64_t e = lane; e < hd; e += 32) {
    if (s.f16_cache) {
      static_cast<__half*>(kc)[off + e] = __float2half_rn(kh[e]);
      if (vc) static_cast<__half*>(vc)[off + e] = __float2half_rn(vh[e]);
    } else {
      static_cast<float*>(kc)[off + e] = kh[e];
      if (vc) static_cast<float*>(vc)[off + e] = vh[e];
    }
  }
}

// One warp per (token, head) of q (h < heads) or k (h >= heads): optional norm of the head
// (unit weights when its data is null), RoPE (none without inv_freq), then k and v into the cache.
__global__ void rope_cache_kernel(AttnShape s, float* q, float* k, const float* v, int64_t T, const int32_t* slot,
                                  const int64_t* pos, const float* inv_freq, DNorm qn, DNorm kn, float eps, void* kc,
                                  void* vc) {
  const int lane = threadIdx.x & 31;
  const int64_t item = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int64_t per_t = s.heads + s.kv_heads;
  if (item >= T * per_t) return;
  const int64_t t = item / per_t, h = item % per_t, hd = s.head_dim, kv_dim = s.kv_heads * hd;
  const bool is_q = h < s.heads;
  const int64_t kh = is_q ? 0 : h - s.heads;
  float* p = is_q ? q + t * s.heads * hd + h * hd : k + t * kv_dim + kh * hd;
  const DNorm& nw = is_q ? qn : kn;
  if (nw.w.n > 0) {
    double ss = 0;
    for (int64_t e = lane; e < hd; e += 32) ss += double(p[e]) * p[e];
    const float inv = rms_inv(warp_sum(ss), hd, eps);
    __syncwarp();
    for (int64_t e = lane; e < hd; e += 32) p[e] = norm_w(nw, e) * (p[e] * inv);
  }
  __syncwarp();
  if (inv_freq) rope_head(s, p, pos[t], inv_freq, lane);
  __syncwarp();
  if (!is_q) store_head(s, p, v + t * kv_dim + kh * hd, slot[t], pos[t], kh, kc, vc, lane);
}

// One warp per (token, head) of x.
__global__ void rope_kernel(AttnShape s, float* x, int64_t heads, int64_t T, const int64_t* pos, const float* inv_freq) {
  const int64_t item = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (item >= T * heads) return;
  rope_head(s, x + item * s.head_dim, pos[item / heads], inv_freq, threadIdx.x & 31);
}

// One warp per (token, kv head).
__global__ void store_kv_kernel(AttnShape s, const float* k, const float* v, int64_t T, const int32_t* slot,
                                const int64_t* pos, void* kc, void* vc) {
  const int64_t item = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (item >= T * s.kv_heads) return;
  const int64_t t = item / s.kv_heads, h = item % s.kv_heads, off = item * s.head_dim;
  store_head(s, k + off, v + off, slot[t], pos[t], h, kc, vc, threadIdx.x & 31);
}

// The score scale of a token at `pos`: the layer's (1/sqrt(head_dim) when 0), times Llama 4's
// query temperature on its NoPE layers (as the CPU backend folds it in).
__device__ __forceinline__ float attn_scale(const AttnOpts& o, int64_t hd, int64_t pos) {
  const float scale = o.scale > 0 ? o.scale : 1.0f / sqrtf(float(hd));
  if (o.temp_floor <= 0) return scale;
  return scale * (log1pf(floorf(float(pos + 1) / float(o.temp_floor))) * o.temp_scale + 1.0f);
}

// The first position a token at p1 attends to: 0, the window's first, or its chunk's first.
__device__ __forceinline__ int64_t attn_first(const AttnOpts& o, int64_t p1) {
  const int64_t window = o.window;
  if (window > 0 && o.chunked) return p1 - p1 % window;
  const int64_t lo = window > 0 ? (p1 - window + 1 > 0 ? p1 - window + 1 : 0) : 0;
  return lo;
}

// One block of kWarps warps per (token, head); warps take positions round robin with an
// online softmax each, merged at the end. kPerLane: head values per lane (head_dim <= 32 x it).
template <int kPerLane>
__global__ void attention_kernel(AttnShape s, const float* q, const int32_t* slot, const int64_t* pos, AttnOpts opt,
                                 const void* kc, const void* vc, float* out) {
  __shared__ float sm[kWarps], sl[kWarps], so[kWarps][kPerLane * 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t = blockIdx.x / s.heads, h = blockIdx.x % s.heads, hd = s.head_dim;
  const int64_t g = h / (s.heads / s.kv_heads), kv_dim = s.kv_heads * hd;
  const int64_t vd = s.v_dims > 0 ? s.v_dims : hd;  // values per row (MLA: the latent's rank)
  const int64_t p1 = pos[t], lo = attn_first(opt, p1);
  const float scale = attn_scale(opt, hd, p1);
  const float* qh = q + t * s.heads * hd + h * hd;
  float qv[kPerLane], o[kPerLane];
  for (int j = 0; j < kPerLane; ++j) {
    const int64_t e = lane + 32 * j;
    qv[j] = e < hd ? qh[e] : 0.0f;
    o[j] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const uint64_t base = uint64_t(slot[t]) * uint64_t(s.positions);
  for (int64_t p = lo + warp; p <= p1; p += kWarps) {
    const uint64_t row = (base + uint64_t(p % s.positions)) * uint64_t(kv_dim) + uint64_t(g * hd);
    float part = 0.0f;
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t e = lane + 32 * j;
      if (e < hd) part += qv[j] * cache_at(kc, s.f16_cache, row + e);
    }
    float sc = scale * warp_sum(part);
    if (opt.softcap > 0) sc = softcap_of(sc, opt.softcap);
    const float mn = fmaxf(m, sc), corr = expf(m - mn), wgt = expf(sc - mn);
    l = l * corr + wgt;
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t e = lane + 32 * j;
      o[j] = o[j] * corr + (e < vd ? wgt * cache_at(vc, s.f16_cache, row + e) : 0.0f);
    }
    m = mn;
  }
  if (lane == 0) {
    sm[warp] = m;
    sl[warp] = l;
  }
  for (int j = 0; j < kPerLane; ++j) so[warp][lane + 32 * j] = o[j];
  __syncthreads();
  const float sink = opt.sinks.data ? vec_at(opt.sinks, h) : -INFINITY;
  float M = sink;
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm[w]);
  float L = opt.sinks.data ? expf(sink - M) : 0.0f;
  for (int w = 0; w < kWarps; ++w) L += sm[w] == -INFINITY ? 0.0f : sl[w] * expf(sm[w] - M);
  for (int64_t e = threadIdx.x; e < vd; e += blockDim.x) {
    float acc = 0.0f;
    for (int w = 0; w < kWarps; ++w)
      if (sm[w] != -INFINITY) acc += so[w][e] * expf(sm[w] - M);
    out[t * s.heads * hd + h * hd + e] = acc / L;
  }
}

// MLA, one warp per (token, item): items h < heads move q's rotated part from qh into q after
// the head's absorbed rank values and rotate it; item `heads` rotates the latent row's last
// rope values and caches the row.
__global__ void mla_rope_cache_kernel(AttnShape s, const float* qh, int64_t nope, float* q, float* k, int64_t T,
                                      const int32_t* slot, const int64_t* pos, const float* inv_freq, void* cache) {
  const int lane = threadIdx.x & 31;
  const int64_t item = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (item >= T * (s.heads + 1)) return;
  const int64_t t = item / (s.heads + 1), h = item % (s.heads + 1), hd = s.head_dim, rope = rot_of(s);
  if (h < s.heads) {
    const float* from = qh + t * s.heads * (nope + rope) + h * (nope + rope) + nope;
    float* p = q + t * s.heads * hd + h * hd;
    for (int64_t e = lane; e < rope; e += 32) p[s.rot_off + e] = from[e];
    __syncwarp();
    rope_head(s, p, pos[t], inv_freq, lane);
    return;
  }
  float* p = k + t * hd;
  rope_head(s, p, pos[t], inv_freq, lane);
  __syncwarp();
  store_head(s, p, nullptr, slot[t], pos[t], 0, cache, nullptr, lane);
}

__global__ void dequant_row_kernel(DMatrix w, int64_t r, float* out) {
  const uint8_t* row = static_cast<const uint8_t*>(w.data) + uint64_t(r) * w.row_bytes;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < w.cols; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = dequant_at(row, w.type, i);
}

}  // namespace

// ---- Context --------------------------------------------------------------------------

Context::~Context() {
  if (device_ < 0) return;
  cudaSetDevice(device_);
  if (cublas_) cublas_api(nullptr)->destroy(cublasHandle_t(cublas_));
  if (stream_) cudaStreamSynchronize(cudaStream_t(stream_));
  if (panel_) cudaFree(panel_);
  if (workspace_) cudaFree(workspace_);
  if (stream_) cudaStreamDestroy(cudaStream_t(stream_));
}

bool Context::init(int device, std::string* err) {
  device_ = device;
  NK_CUDA(cudaSetDevice(device));
  cudaStream_t s = nullptr;
  NK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
  const CublasApi* blas = cublas_api(err);
  if (!blas) return false;
  cublasHandle_t h = nullptr;
  NK_CUBLAS(blas->create(&h));
  cublas_ = h;
  NK_CUBLAS(blas->set_stream(h, s));
  NK_CUBLAS(blas->set_math_mode(h, CUBLAS_DEFAULT_MATH));  // fp32 products, no TF32
  if (!(workspace_ = alloc(kCublasWorkspaceBytes, err))) return false;
  NK_CUBLAS(blas->set_workspace(h, workspace_, kCublasWorkspaceBytes));
  return true;
}

bool Context::alloc_panel(uint64_t panel_bytes, std::string* err) {
  if (panel_ || panel_bytes == 0) return true;
  if (!(panel_ = alloc(panel_bytes, err))) return false;
  panel_bytes_ = panel_bytes;
  return true;
}

void* Context::alloc(uint64_t bytes, std::string* err) {
  void* p = nullptr;
  if (!check_cuda(cudaSetDevice(device_), "cudaSetDevice", __FILE__, __LINE__, err)) return nullptr;
  if (!check_cuda(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc", __FILE__, __LINE__, err)) return nullptr;
  allocated_ += bytes;
  return p;
}
void Context::release(void* p) {
  if (!p) return;
  cudaSetDevice(device_);
  cudaFree(p);
}
void* Context::alloc_host(uint64_t bytes, std::string* err) {
  void* p = nullptr;
  if (!check_cuda(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable), "cudaHostAlloc", __FILE__, __LINE__, err))
    return nullptr;
  return p;
}
void Context::release_host(void* p) {
  if (p) cudaFreeHost(p);
}
bool Context::upload(void* dst, const void* src, uint64_t n, std::string* err) {
  NK_CUDA(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, cudaStream_t(stream_)));
  return true;
}
bool Context::download(void* dst, const void* src, uint64_t n, std::string* err) {
  NK_CUDA(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, cudaStream_t(stream_)));
  return true;
}
bool Context::zero(void* dst, uint64_t n, std::string* err) {
  NK_CUDA(cudaMemsetAsync(dst, 0, n, cudaStream_t(stream_)));
  return true;
}
bool Context::synchronize(std::string* err) {
  NK_CUDA(cudaStreamSynchronize(cudaStream_t(stream_)));
  return true;
}

// ---- ops ------------------------------------------------------------------------------

bool blas_available(std::string* why) { return cublas_api(why) != nullptr; }

bool engine_available(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    const std::string reason = no_device_reason(e);
    if (why) *why = reason;
    return false;
  }
  if (n == 0 && why) *why = kNoGpu;
  return n > 0;
}

bool embed(Context& c, const DMatrix& table, const int32_t* ids, int64_t T, float scale, float* x, std::string* err) {
  if (T == 0) return true;
  NK_CUDA(cudaSetDevice(c.device()));
  NK_LAUNCH(embed_kernel, unsigned(T), 256, 0, st(c), table, ids, scale, x);
  return NK_LAUNCHED("embed");
}

bool norm(Context& c, float* in, const float* delta, const int64_t* rows, float* out, int64_t R, int64_t width,
          int64_t ld, const DNorm& n, float eps, std::string* err) {
  if (R == 0) return true;
  if (n.w.n <= 0 || width % n.w.n != 0 || width > ld)
    return fail(err, "norm of " + std::to_string(n.w.n) + " values over the first " + std::to_string(width) +
                         " of rows of " + std::to_string(ld), __FILE__, __LINE__);
  if (!n.w.data && n.kind != NormType::Rms) return fail(err, "a layer or (1 + w) norm without weights", __FILE__, __LINE__);
  NK_CUDA(cudaSetDevice(c.device()));
  NK_LAUNCH(norm_kernel, unsigned(R * (width / n.w.n)), 256, 0, st(c), in, delta, rows, out, width, ld, n, eps);
  return NK_LAUNCHED("norm");
}

bool add(Context& c, float* x, const float* delta, int64_t count, std::string* err) {
  if (count == 0) return true;
  NK_CUDA(cudaSetDevice(c.device()));
  NK_LAUNCH(add_kernel, grid_for(count, 256), 256, 0, st(c), x, delta, count);
  return NK_LAUNCHED("add");
}

bool act_mul(Context& c, float* gate, const float* up, int64_t count, int act, std::string* err) {
  if (count == 0) return true;
  NK_CUDA(cudaSetDevice(c.device()));
  NK_LAUNCH(act_mul_kernel, grid_for(count, 256), 256, 0, st(c), gate, up, count, act);
  return NK_LAUNCHED("act_mul");
}

bool scale(Context& c, float* x, int64_t count, float s, std::string* err) {
  if (count == 0) return true;
  NK_CUDA(cudaSetDevice(c.device()));
  NK_LAUNCH(scale_kernel, grid_for(count, 256), 256, 0, st(c), x, count, s);
  return NK_LAUNCHED("scale");
}

bool softcap(Context& c, float* x, int64_t count, float cap, std::string* err) {
  if (count == 0) return true;
  NK_CUDA(cudaSetDevice(c.device()));
  NK_LAUNCH(softcap_kernel, grid_for(count, 256), 256, 0, st(c), x, count, cap);
  return NK_LAUNCHED("softcap");
}

bool matmul(Context& c, const DMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy, const DVec& bias,
            std::string* err) {
  if (B == 0 || w.rows == 0) return true;
  if (w.type != WType::F32 && w.type != WType::F16 && w.type != WType::BF16 && w.cols % 32 != 0)
    return fail(err, "quantized matrix with " + std::to_string(w.cols) + " columns (not whole blocks)", __FILE__, __LINE__);
  NK_CUDA(cudaSetDevice(c.device()));
  if (B >= kGemmMinTokens) return launch_gemm(c, w, x, ldx, B, y, ldy, bias, err);
  return launch_gemv(c, w, x, ldx, B, y, ldy, bias, err);
}

bool matmul_heads(Context& c, const DHeads& h, const float* x, int64_t ldx, int64_t x_stride, int64_t B, float* y,
                  int64_t ldy, int64_t y_stride, std::string* err) {
  const DMatrix& w = h.w;
  if (B == 0 || w.rows == 0 || h.heads <= 0) return true;
  const bool floats = w.type == WType::F32 || w.type == WType::F16 || w.type == WType::BF16;
  if (h.input_major && !floats)
    return fail(err, "an input-major matrix must be f32, f16 or bf16", __FILE__, __LINE__);
  if (!floats && w.cols % 32 != 0)
    return fail(err, "quantized matrix with " + std::to_string(w.cols) + " columns (not whole blocks)", __FILE__, __LINE__);
  NK_CUDA(cudaSetDevice(c.device()));
  const HeadStep hs{h.stride, x_stride, y_stride};
  if (h.input_major) {
    const dim3 grid(unsigned((w.rows + kInputMajorThreads - 1) / kInputMajorThreads), unsigned(h.heads));
    cudaStream_t s = st(c);
    if (w.type == WType::F32) NK_LAUNCH(gemv_input_major<WType::F32>, grid, kInputMajorThreads, 0, s, w, x, ldx, B, y, ldy, hs);
    else if (w.type == WType::F16) NK_LAUNCH(gemv_input_major<WType::F16>, grid, kInputMajorThreads, 0, s, w, x, ldx, B, y, ldy, hs);
    else NK_LAUNCH(gemv_input_major<WType::BF16>, grid, kInputMajorThreads, 0, s, w, x, ldx, B, y, ldy, hs);
    return NK_LAUNCHED("gemv_input_major");
  }
  if (B < kGemmMinTokens) return launch_gemv(c, w, x, ldx, B, y, ldy, {}, err, h.heads, hs);
  for (int64_t i = 0; i < h.heads; ++i) {  // prefill: each head's product on cuBLAS
    DMatrix wi = w;
    wi.data = static_cast<const uint8_t*>(w.data) + i * h.stride;
    if (!launch_gemm(c, wi, x + i * x_stride, ldx, B, y + i * y_stride, ldy, {}, err)) return false;
  }
  return true;
}

bool rope(Context& c, const AttnShape& s, float* x, int64_t heads, int64_t T, const int64_t* pos, const float* inv_freq,
          std::string* err) {
  if (T == 0) return true;
  NK_CUDA(cudaSetDevice(c.device()));
  NK_LAUNCH(rope_kernel, unsigned((T * heads + kWarps - 1) / kWarps), 32 * kWarps, 0, st(c), s, x, heads, T, pos, inv_freq);
  return NK_LAUNCHED("rope");
}

bool store_kv(Context& c, const AttnShape& s, const float* k, const float* v, int64_t T, const int32_t* slot,
              const int64_t* pos, void* kcache, void* vcache, std::string* err) {
  if (T == 0) return true;
  NK_CUDA(cudaSetDevice(c.device()));
  NK_LAUNCH(store_kv_kernel, unsigned((T * s.kv_heads + kWarps - 1) / kWarps), 32 * kWarps, 0, st(c), s, k, v, T, slot, pos,
            kcache, vcache);
  return NK_LAUNCHED("store_kv");
}

bool rope_and_cache(Context& c, const AttnShape& s, float* q, float* k, const float* v, int64_t T, const int32_t* slot,
                    const int64_t* pos, const float* inv_freq, const DNorm& q_norm, const DNorm& k_norm, float eps,
                    void* kcache, void* vcache, std::string* err) {
  if (T == 0) return true;
  NK_CUDA(cudaSetDevice(c.device()));
  const int64_t items = T * (s.heads + s.kv_heads);
  NK_LAUNCH(rope_cache_kernel, unsigned((items + kWarps - 1) / kWarps), 32 * kWarps, 0, st(c),
      s, q, k, v, T, slot, pos, inv_freq, q_norm, k_norm, eps, kcache, vcache);
  return NK_LAUNCHED("rope_and_cache");
}

bool attention(Context& c, const AttnShape& s, const float* q, int64_t T, const int32_t* slot, const int64_t* pos,
               const AttnOpts& o, const void* kcache, const void* vcache, float* out, std::string* err) {
  if (T == 0) return true;
  if (s.head_dim > 32 * kMaxHdPerLaneWide)
    return fail(err, "head_dim " + std::to_string(s.head_dim) + " above the kernel's " + std::to_string(32 * kMaxHdPerLaneWide),
                __FILE__, __LINE__);
  if (o.chunked && o.window <= 0) return fail(err, "chunked attention without a chunk size", __FILE__, __LINE__);
  NK_CUDA(cudaSetDevice(c.device()));
  if (s.head_dim <= 32 * kMaxHdPerLane)
    NK_LAUNCH(attention_kernel<kMaxHdPerLane>, unsigned(T * s.heads), 32 * kWarps, 0, st(c), s, q, slot, pos, o, kcache, vcache, out);
  else
    NK_LAUNCH(attention_kernel<kMaxHdPerLaneWide>, unsigned(T * s.heads), 32 * kWarps, 0, st(c), s, q, slot, pos, o, kcache, vcache,
              out);
  return NK_LAUNCHED("attention");
}

bool mla_rope_cache(Context& c, const AttnShape& s, const float* qh, int64_t nope, float* q, float* k, int64_t T,
                    const int32_t* slot, const int64_t* pos, const float* inv_freq, void* cache, std::string* err) {
  if (T == 0) return true;
  if (s.kv_heads != 1 || s.rot_off + s.rot_dims != s.head_dim || s.rot_dims <= 0)
    return fail(err, "MLA rows of " + std::to_string(s.head_dim) + " with " + std::to_string(s.kv_heads) + " kv heads and " +
                         std::to_string(s.rot_dims) + " rotated values from " + std::to_string(s.rot_off), __FILE__, __LINE__);
  NK_CUDA(cudaSetDevice(c.device()));
  const int64_t items = T * (s.heads + 1);
  NK_LAUNCH(mla_rope_cache_kernel, unsigned((items + kWarps - 1) / kWarps), 32 * kWarps, 0, st(c), s, qh, nope, q, k, T, slot,
            pos, inv_freq, cache);
  return NK_LAUNCHED("mla_rope_cache");
}

bool dequant_row_on_device(Context& c, const DMatrix& w, int64_t r, float* out_host, std::string* err) {
  NK_CUDA(cudaSetDevice(c.device()));
  float* d = static_cast<float*>(c.alloc(uint64_t(w.cols) * 4, err));
  if (!d) return false;
  NK_LAUNCH(dequant_row_kernel, grid_for(w.cols, 256), 256, 0, st(c), w, r, d);
  bool good = NK_LAUNCHED("dequant_row") && c.download(out_host, d, uint64_t(w.cols) * 4, err) && c.synchronize(err);
  c.release(d);
  return good;
}

}  // namespace nunchaku::cuda
