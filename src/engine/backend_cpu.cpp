#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/backend.hpp"
#include "engine/thread_pool.hpp"

namespace nunchaku::engine {
namespace {

// Most weight rows in one decode task (prefill tasks match the GEMM's 64-row blocks).
constexpr int64_t kDecodeRows = 256;

class CpuBackend final : public Backend {
 public:
  CpuBackend(int threads, int64_t max_context)
      : pool_(threads), scores_(size_t(pool_.size()) * size_t(std::max<int64_t>(1, max_context))),
        max_context_(std::max<int64_t>(1, max_context)) {}

  std::string describe() const override {
    return "cpu " + std::string(isa_name(active_isa())) + ", " + std::to_string(pool_.size()) + " threads";
  }
  int threads() const override { return pool_.size(); }

  void matmul(std::span<const MatmulJob> jobs, const float* x, int64_t ldx, int64_t B) override {
    // Tasks: (chunk of weight rows) x (chunk of activation rows). Small batches (decode):
    // a chunk of kBatch activation rows stays in L2 while the task's weight rows stream
    // past it once. Large ones (prefill): a task takes all activation rows, so each weight
    // row comes from memory once per forward; the kernel blocks for the caches.
    const bool gemm = B >= kMatmulGemmBatch;
    const int64_t kBatch = gemm ? B : 32;
    int64_t total_rows = 0;
    for (const auto& j : jobs) total_rows += j.w->rows;
    const int64_t bchunks = (B + kBatch - 1) / kBatch;
    const int64_t want_tasks = int64_t(pool_.size()) * (gemm ? 8 : 4);
    int64_t rows_per = std::max<int64_t>(1, (total_rows * bchunks + want_tasks - 1) / want_tasks);
    // Multiples of 8 (decode tiles take 8 rows, the others 2). Decode prefetches 2 tiles
    // ahead within a task, so its tasks are longer; prefill tasks match the GEMM blocks.
    rows_per = std::min<int64_t>((rows_per + 7) / 8 * 8, gemm ? 64 : kDecodeRows);
    const int64_t row_tasks = (total_rows + rows_per - 1) / rows_per;
    pool_.run(row_tasks * bchunks, [&](int64_t task, int) {
      int64_t bc = task / row_tasks, rt = task % row_tasks;
      int64_t b0 = bc * kBatch, nb = std::min(kBatch, B - b0);
      int64_t r0 = rt * rows_per, r1 = std::min(total_rows, r0 + rows_per);
      int64_t base = 0;
      for (const auto& j : jobs) {  // the global row range may span jobs
        int64_t lo = std::max(r0, base), hi = std::min(r1, base + j.w->rows);
        if (lo < hi) matmul_rows(*j.w, x + b0 * ldx, ldx, nb, j.y + b0 * j.ldy, j.ldy, lo - base, hi - base);
        base += j.w->rows;
      }
    });
  }

  void attention(const AttentionJob& a) override {
    const int64_t kv_dim = a.kv_heads * a.head_dim, q_dim = a.heads * a.head_dim;
    const int64_t group = a.heads / a.kv_heads;
    pool_.run(a.tokens * a.heads, [&](int64_t task, int thread) {
      const int64_t t = task / a.heads, h = task % a.heads, g = h / group;
      const int64_t pos = a.pos[t];
      const int64_t lo = a.window > 0 ? std::max<int64_t>(0, pos - a.window + 1) : 0;
      const float* q = a.q + t * q_dim + h * a.head_dim;
      float* out = a.out + t * q_dim + h * a.head_dim;
      float* sc = scores_.data() + size_t(thread) * size_t(max_context_);
      const size_t base = size_t(a.slot[t]) * size_t(a.max_context);
      // Byte offset of this head's slice of the first attended position.
      const size_t first = ((base + size_t(lo)) * size_t(kv_dim) + size_t(g * a.head_dim)) * (a.f16 ? 2 : 4);
      const int64_t n = pos - lo + 1;
      const void* krows = static_cast<const uint8_t*>(a.k) + first;
      const void* vrows = static_cast<const uint8_t*>(a.v) + first;
      attn_scores(q, krows, a.f16, kv_dim, n, a.head_dim, a.scale, sc);
      softmax_inplace(sc, n);
      attn_mix(sc, vrows, a.f16, kv_dim, n, a.head_dim, out);
    });
  }

 protected:
  void parallel_impl(int64_t n, void (*call)(void*, int64_t, int), void* ctx) override {
    pool_.run(n, [&](int64_t task, int thread) { call(ctx, task, thread); });
  }

 private:
  ThreadPool pool_;
  std::vector<float> scores_;  // [threads][max_context], attention scratch
  int64_t max_context_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads, int64_t max_context) {
  return std::make_unique<CpuBackend>(threads, max_context);
}

}  // namespace nunchaku::engine
