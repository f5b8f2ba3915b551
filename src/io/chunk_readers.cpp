#include "io/chunk_readers.hpp"

#include <algorithm>
#include <chrono>

#include "core/trace.hpp"

namespace nunchaku {

ChunkReaders::ChunkReaders(ReadTarget& target, int threads) : target_(target) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { run(); });
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
