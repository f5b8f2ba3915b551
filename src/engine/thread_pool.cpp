#include "engine/thread_pool.hpp"

#include <algorithm>
#include <cstdio>
#include <system_error>

#include "core/log.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define NUNCHAKU_PAUSE() _mm_pause()
#else
#define NUNCHAKU_PAUSE() ((void)0)
#endif

namespace nunchaku::engine {

namespace {
constexpr int kSpin = 4000;  // pause iterations (tens of microseconds) before sleeping / yielding
std::atomic<int> g_fail_starts_after{-1};
}

void ThreadPool::fail_thread_starts_after_for_test(int n) { g_fail_starts_after.store(n); }

ThreadPool::ThreadPool(int threads) {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (threads <= 0) threads = hw;
  const int wanted = threads;
  const int cap = hw * kMaxPerCore;
  if (threads > cap) {
    threads = cap;
    warning_ = std::to_string(wanted) + " threads asked for, " + std::to_string(cap) + " used (" +
               std::to_string(kMaxPerCore) + " per hardware thread at most)";
  }
  const int fail_after = g_fail_starts_after.load();
  for (int t = 1; t < threads; ++t) {
    try {
      if (fail_after >= 0 && t > fail_after)
        throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again), "test hook");
      workers_.emplace_back([this, t] { worker_main(t); });
    } catch (const std::system_error& e) {
      // The workers started so far serve every run: tasks are claimed, not assigned.
      warning_ = "started " + std::to_string(t) + " of " + std::to_string(wanted) +
                 " threads (the system refused more: " + e.what() + ")";
      break;
    }
  }
  if (!warning_.empty()) log::warn("{}", warning_);
  blocks_ = std::make_unique<Block[]>(size_t(size()));
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lk(m_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

int64_t ThreadPool::claim(Block& b, bool from_front) {
  uint64_t s = b.range.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t front = s & 0xffffffffu, back = s >> 32;
    if (front >= back) return -1;
    const uint64_t next = from_front ? (back << 32) | (front + 1) : ((back - 1) << 32) | front;
    if (b.range.compare_exchange_weak(s, next, std::memory_order_relaxed)) return int64_t(from_front ? front : back - 1);
  }
}

void ThreadPool::work(int thread) {
  // Its own block first, from the front; then the others' from their ends, so their owners
  // (if they are running) keep their streams.
  // The tasks it ran are counted once at the end (one shared cache line per thread and
  // run, not per task): the caller waits for all of them either way.
  const int T = size();
  int64_t ran = 0;
  for (int k = 0; k < T; ++k) {
    Block& b = blocks_[size_t((thread + k) % T)];
    for (int64_t i = claim(b, k == 0); i >= 0; i = claim(b, k == 0), ++ran) call_(ctx_, i, thread);
  }
  if (ran > 0) done_.fetch_add(ran, std::memory_order_acq_rel);
}

void ThreadPool::run_impl(int64_t n, Call call, void* ctx) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1 || n > int64_t(0xffffffffu)) {  // (a block's bounds are 32-bit)
    for (int64_t i = 0; i < n; ++i) call(ctx, i, 0);
    return;
  }
  {
    std::lock_guard lk(m_);
    call_ = call;
    ctx_ = ctx;
    const int T = size();
    for (int t = 0; t < T; ++t) {
      const uint64_t front = uint64_t(n * t / T), back = uint64_t(n * (t + 1) / T);
      blocks_[size_t(t)].range.store(front | back << 32, std::memory_order_relaxed);
    }
    done_.store(0, std::memory_order_relaxed);
    open_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  work(0);
  // Tasks claimed by workers that are still running them.
  for (int i = 0; done_.load(std::memory_order_acquire) < n; ++i) {
    if (i < kSpin) NUNCHAKU_PAUSE();
    else std::this_thread::yield();
  }
  {
    std::lock_guard lk(m_);
    open_ = false;
  }
  // Workers that joined may still be on their way out of work(); call_, ctx_ and the blocks stay put until then.
  for (int i = 0; inside_.load(std::memory_order_acquire) != 0; ++i) {
    if (i < kSpin) NUNCHAKU_PAUSE();
    else std::this_thread::yield();
  }
}

void ThreadPool::worker_main(int thread) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int i = 0; i < kSpin && g == seen; ++i) {
      NUNCHAKU_PAUSE();
      g = generation_.load(std::memory_order_acquire);
    }
    bool join = false;
    {
      std::unique_lock lk(m_);
      if (g == seen) wake_.wait(lk, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      seen = generation_.load(std::memory_order_acquire);
      if (stop_) return;
      join = open_;
      if (join) inside_.fetch_add(1, std::memory_order_acq_rel);
    }
    if (join) {
      work(thread);
      inside_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
}

}  // namespace nunchaku::engine
