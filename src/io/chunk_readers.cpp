#include "io/chunk_readers.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <system_error>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/log.hpp"

#include "core/trace.hpp"

namespace nunchaku {

namespace {
std::atomic<int> g_fail_starts_after{-1};
}

void ChunkReaders::fail_thread_starts_after_for_test(int n) { g_fail_starts_after.store(n); }

ChunkReaders::ChunkReaders(ReadTarget& target, int threads) : target_(target) {
  const int wanted = std::max(1, threads);
  const int fail_after = g_fail_starts_after.load();
  for (int i = 0; i < wanted; ++i) {
    try {
      if (fail_after >= 0 && i >= fail_after)
        throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again), "test hook");
      threads_.emplace_back([this] { run(); });
    } catch (const std::system_error& e) {
      // The readers started so far take every job (jobs are claimed, not assigned).
      if (i == 0)
        throw Error("io.threads", fmt::format("cannot start a reader thread: {}", e.code().message()),
                    {.hint = "the process or user limit on threads is reached (ulimit -u); raise it or run fewer "
                             "processes"},
                    Exit::Internal);
      warning_ = fmt::format("started {} of {} reader threads (the system refused more: {})", i, wanted,
                             e.code().message());
      log::warn("{}", warning_);
      break;
    }
  }
}

ChunkReaders::~ChunkReaders() { stop(); }

void ChunkReaders::push(const ReadJob& j) {
  {
    std::lock_guard lk(mu_);
    queue_.push_back(j);
  }
  cv_.notify_one();
}

void ChunkReaders::push(const std::vector<ReadJob>& jobs) {
  {
    std::lock_guard lk(mu_);
    queue_.insert(queue_.end(), jobs.begin(), jobs.end());
  }
  cv_.notify_all();
}

void ChunkReaders::stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

void ChunkReaders::run() {
  using Clock = std::chrono::steady_clock;
  trace::name_thread("reader");
  for (;;) {
    ReadJob j;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      j = queue_.front();
      queue_.pop_front();
    }
    ReadTarget::Buffer b;
    uint64_t bytes = 0;
    double seconds = 0;
    std::exception_ptr err;
    try {
      b = target_.buffer(j);
      if (!b.dst) continue;
      const auto t0 = Clock::now();
      bytes = read_range(*j.file, j.off, j.len, b.dst, b.slack, [&](uint64_t at) { return target_.tensor_at(j, at); });
      seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    } catch (...) {
      err = std::current_exception();
    }
    target_.done(j, b, bytes, seconds, err);
  }
}

}  // namespace nunchaku
