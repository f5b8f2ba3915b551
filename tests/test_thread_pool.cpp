// The CPU kernels' thread pool: every task once, each thread's own block in order, the
// rest taken from the other blocks' ends (engine/thread_pool.hpp).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/thread_pool.hpp"

using nunchaku::engine::ThreadPool;

namespace {

// (task, thread) in the order each thread ran them.
struct Trace {
  std::mutex m;
  std::vector<std::vector<int64_t>> by_thread;
  explicit Trace(int threads) : by_thread(size_t(threads)) {}
  void add(int64_t task, int thread) {
    std::lock_guard lk(m);
    by_thread[size_t(thread)].push_back(task);
  }
};

}  // namespace

TEST_CASE("thread pool: every task runs once, for any task count", "[engine][pool]") {
  ThreadPool pool(4);
  for (int64_t n : {1, 2, 3, 4, 5, 7, 64, 1001}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::atomic<int> bad_thread{0};  // Catch2's CHECK is not thread-safe: checked after the run
    pool.run(n, [&](int64_t task, int thread) {
      if (thread < 0 || thread >= pool.size()) bad_thread++;
      hits[size_t(task)]++;
    });
    CHECK(bad_thread.load() == 0);
    for (auto& h : hits) CHECK(h.load() == 1);
  }
}

TEST_CASE("thread pool: a thread runs its own block in order, then the rest from the other end", "[engine][pool]") {
  ThreadPool pool(2);
  if (pool.size() < 2) {
    WARN("skipped: the pool got one thread");
    return;
  }
  const int64_t n = 40;  // blocks [0, 20) for the caller, [20, 40) for the worker
  // The caller waits (up to 2 s) until the worker has run a task, so both take part; the
  // worker then holds its third task until the caller has taken one of the worker's block
  // (up to 2 s), so the caller, done with its own block, must take the worker's from the
  // end down.
  std::atomic<int> worker_tasks{0};
  std::atomic<bool> caller_stole{false};
  Trace trace(2);
  const auto wait_for = [](const auto& ready) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (!ready() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  };
  pool.run(n, [&](int64_t task, int thread) {
    trace.add(task, thread);
    if (thread == 0) {
      if (task >= n / 2) caller_stole = true;
      else wait_for([&] { return worker_tasks.load() > 0; });
    } else if (++worker_tasks == 3) {
      wait_for([&] { return caller_stole.load(); });
    }
  });
  const auto& caller = trace.by_thread[0];
  const auto& worker = trace.by_thread[1];
  REQUIRE(caller.size() + worker.size() == size_t(n));
  if (worker.empty()) {
    WARN("skipped: the worker was not scheduled within 2 s (busy machine)");
    return;
  }
  // Own blocks from the front, in order.
  for (size_t i = 0; i < caller.size() && i < size_t(n / 2); ++i) CHECK(caller[i] == int64_t(i));
  CHECK(worker[0] == n / 2);
  for (size_t i = 1; i < worker.size(); ++i) CHECK(worker[i] > worker[i - 1]);
  // The worker held task 22 while the caller, done with its block, took the worker's
  // tasks from the end: 39 first, then downwards.
  REQUIRE(caller.size() > size_t(n / 2));
  CHECK(caller[size_t(n / 2)] == n - 1);
  for (size_t i = size_t(n / 2) + 1; i < caller.size(); ++i) CHECK(caller[i] == caller[i - 1] - 1);
}
