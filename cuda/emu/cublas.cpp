// The emulator's cuBLAS: the functions engine_ops.cu looks up with dlsym, as plain CPU code
// run in stream order. SGEMM is the textbook triple loop, column-major, accumulating each
// product in fp32 in k order (not cuBLAS's blocking or its numerics: results can differ from
// a real cuBLAS in the last bits, as they differ from the CPU engine's). Operand extents are
// checked against the device allocations (a GPU would fault on an out-of-range tile).
#include <cstdio>
#include <cstring>
#include <string>

#include "cuda/emu/emu_internal.hpp"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* h) {
  if (!h) return CUBLAS_STATUS_INVALID_VALUE;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
  *h = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void* workspace, size_t bytes) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (bytes && !nk_emu::in_device(workspace, bytes)) return CUBLAS_STATUS_INVALID_VALUE;
  h->workspace = workspace;
  h->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const float* alpha, const float* a, int lda, const float* b, int ldb, const float* beta,
                              float* c, int ldc) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool at = ta != CUBLAS_OP_N, bt = tb != CUBLAS_OP_N;
  // op(A) is m x k, op(B) k x n, C m x n; stored column-major with leading dimensions.
  const int a_rows = at ? k : m, a_cols = at ? m : k, b_rows = bt ? n : k, b_cols = bt ? k : n;
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m) ||
      !alpha || !beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  auto extent = [](int rows, int cols, int ld) { return (size_t(cols - 1) * size_t(ld) + size_t(rows)) * 4; };
  auto check = [&](const void* p, int rows, int cols, int ld, const char* which) {
    if (rows == 0 || cols == 0 || nk_emu::in_device(p, extent(rows, cols, ld))) return true;
    nk_emu::fault(cudaErrorIllegalAddress, std::string("cublasSgemm: ") + which + " (" + std::to_string(rows) + " x " +
                                               std::to_string(cols) + ", ld " + std::to_string(ld) +
                                               ") is not inside one device allocation");
    return false;
  };
  if (!check(a, a_rows, a_cols, lda, "A") || !check(b, b_rows, b_cols, ldb, "B") || !check(c, m, n, ldc, "C"))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  const float al = *alpha, be = *beta;  // host pointer mode: read at the call
  nk_emu::enqueue(h->stream, [=] {
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        float s = 0.0f;
        for (int l = 0; l < k; ++l) {
          const float x = at ? a[size_t(i) * lda + l] : a[size_t(l) * lda + i];
          const float y = bt ? b[size_t(l) * ldb + j] : b[size_t(j) * ldb + l];
          s += x * y;
        }
        float& out = c[size_t(j) * ldc + i];
        out = be == 0.0f ? al * s : al * s + be * out;  // beta 0: C is not read (may hold NaN)
      }
  }, nk_emu::Work::Kernel);
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"

// ---- dlopen / dlsym for libcublas ---------------------------------------------------------------
namespace nk_emu {
namespace {
int g_cublas_handle;  // its address is the handle dl_open gives for cuBLAS
thread_local std::string t_dl_error;
thread_local bool t_dl_error_set = false;

struct Symbol {
  const char* name;
  void* fn;
};
const Symbol kCublas[] = {
    {"cublasCreate_v2", reinterpret_cast<void*>(&cublasCreate_v2)},
    {"cublasDestroy_v2", reinterpret_cast<void*>(&cublasDestroy_v2)},
    {"cublasSetStream_v2", reinterpret_cast<void*>(&cublasSetStream_v2)},
    {"cublasSetMathMode", reinterpret_cast<void*>(&cublasSetMathMode)},
    {"cublasSetWorkspace_v2", reinterpret_cast<void*>(&cublasSetWorkspace_v2)},
    {"cublasSgemm_v2", reinterpret_cast<void*>(&cublasSgemm_v2)},
};
}  // namespace

void* dl_open(const char* name, int flags) {
  if (name && std::strstr(name, "libcublas.so")) return &g_cublas_handle;
  return (dlopen)(name, flags);  // parenthesised: the real function, not the macro
}
void* dl_sym(void* handle, const char* name) {
  if (handle != &g_cublas_handle) return (dlsym)(handle, name);
  for (const Symbol& s : kCublas)
    if (std::strcmp(s.name, name) == 0) return s.fn;
  t_dl_error = std::string("emulated libcublas: undefined symbol: ") + name;
  t_dl_error_set = true;
  return nullptr;
}
char* dl_error() {
  static thread_local std::string last;
  if (t_dl_error_set) {
    t_dl_error_set = false;
    last = t_dl_error;
    return last.data();
  }
  return (dlerror)();
}

}  // namespace nk_emu
