// A small persistent pool of worker threads for the CPU kernels.
//
// run(n, fn) calls fn(task, thread) for every task in [0, n) and returns when all are
// done; the calling thread works too (thread index 0), so a pool of size 1 has no worker
// threads at all. Tasks are split into one contiguous block per thread: thread t runs
// block t in ascending order, then takes what is left of the other blocks from their
// ends, so uneven tasks and cores shared with other processes still balance, while each
// thread's tasks follow each other in memory (decode tasks are row ranges of one weight
// matrix: a thread's ranges form one stream its prefetch runs ahead in; handed out one
// at a time from a shared counter, the threads' tasks interleaved and each prefetched
// the rows the other was about to read; docs/engine.md has the measurement). Dispatch
// allocates nothing.
// Workers spin briefly after a dispatch (the next one usually follows within
// microseconds in the token loop), then sleep on a condition variable. run() waits for
// the tasks, not for the workers: a worker the OS has not scheduled yet simply misses
// that run (it joins only while the run is open), so a busy machine never stalls a
// dispatch for a time slice.
// Thread-safety: one run() at a time (the engine is single-threaded above the kernels).
// Starting threads never blocks: a thread the OS refuses (pids.max, address space) means
// a smaller pool and a warning, and more than kMaxPerCore threads per hardware thread are
// not started at all (they only add contention).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace nunchaku::engine {

class ThreadPool {
 public:
  static constexpr int kMaxPerCore = 4;

  // Total threads incl. the caller; <= 0: hardware threads. size() says how many it got;
  // warning() says why that is fewer than asked ("" when it is not).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  const std::string& warning() const { return warning_; }

  // Test hook: thread starts after the first `n` fail as the OS would fail them
  // (std::system_error); -1 (the default) turns it off. Process-wide.
  static void fail_thread_starts_after_for_test(int n);

  template <class F>
  void run(int64_t n, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    run_impl(n, [](void* ctx, int64_t task, int thread) { (*static_cast<Fn*>(ctx))(task, thread); },
             const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using Call = void (*)(void*, int64_t, int);
  void run_impl(int64_t n, Call call, void* ctx);
  void work(int thread);
  void worker_main(int thread);

  // Block t of a run: [front, back) of the tasks not yet claimed, packed as front | back << 32
  // (one compare-and-swap claims from either end). Own cache line each.
  struct alignas(64) Block {
    std::atomic<uint64_t> range{0};
  };
  int64_t claim(Block& b, bool from_front);

  std::vector<std::thread> workers_;
  std::unique_ptr<Block[]> blocks_;  // size() of them
  std::string warning_;
  std::mutex m_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> done_{0};    // tasks finished in this run
  std::atomic<int> inside_{0};      // workers inside work() for this run
  bool open_ = false;               // workers may still join this run (under m_)
  bool stop_ = false;
  Call call_ = nullptr;
  void* ctx_ = nullptr;
};

}  // namespace nunchaku::engine
