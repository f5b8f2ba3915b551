// The compute backend of a Transformer, chosen once when the model is built. The CPU
// backend is always available; a CUDA backend (and streamed offload, which feeds a
// backend one layer's weights at a time) implements the same three operations.
//
// Buffers are plain float arrays the Transformer owns (host memory for the CPU backend);
// weights are WeightMatrix views in their stored dtype.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>

#include "engine/kernels.hpp"

namespace nunchaku::engine {

// y[b*ldy + r] = W[r] . x[b*ldx ...] for every row r of W and b < B.
struct MatmulJob {
  const WeightMatrix* w = nullptr;
  float* y = nullptr;
  int64_t ldy = 0;
};

// Causal grouped-query attention of T query tokens against a KV cache.
// Token t belongs to cache slot slot[t] at position pos[t]; it attends to that slot's
// positions [max(0, pos - window + 1) if window > 0 else 0, pos], which must already be
// written. K/V rows: kv_heads*head_dim values at cache + ((slot*max_context + p)*kv_dim).
struct AttentionJob {
  int64_t tokens = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t max_context = 0;
  int64_t window = 0;
  float scale = 1;
  const float* q = nullptr;      // [tokens][heads*head_dim]
  float* out = nullptr;          // [tokens][heads*head_dim]
  const int32_t* slot = nullptr; // [tokens]
  const int64_t* pos = nullptr;  // [tokens]
  const void* k = nullptr;       // this layer's cache, [slots][max_context][kv_heads*head_dim]
  const void* v = nullptr;
  bool f16 = false;              // cache element: IEEE half (else f32)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string describe() const = 0;  // e.g. "cpu avx2, 2 threads"
  virtual int threads() const = 0;
  // All jobs share the input x: [B][ldx]. One dispatch for q/k/v (or gate/up) together.
  virtual void matmul(std::span<const MatmulJob> jobs, const float* x, int64_t ldx, int64_t B) = 0;
  virtual void attention(const AttentionJob& job) = 0;
  // fn(task, thread) for task in [0, n), thread in [0, threads()); for row-wise work.
  template <class F>
  void parallel_for(int64_t n, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    parallel_impl(n, [](void* c, int64_t t, int th) { (*static_cast<Fn*>(c))(t, th); }, &fn);
  }

 protected:
  virtual void parallel_impl(int64_t n, void (*call)(void*, int64_t, int), void* ctx) = 0;
};

// threads <= 0: all hardware threads. max_context sizes the attention scratch.
std::unique_ptr<Backend> make_cpu_backend(int threads, int64_t max_context);

}  // namespace nunchaku::engine
