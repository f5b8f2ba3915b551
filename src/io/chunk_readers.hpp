// Reader threads: the one read path from checkpoint files into memory, shared by the
// loader's chunk pipeline and the streamed weight provider. Jobs are file ranges, taken in
// the order they were pushed; a ReadTarget says where each one lands (and may block for
// memory, e.g. a free staging buffer) and hears when it has landed or failed.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "io/tensor_reader.hpp"

namespace nunchaku {

struct ReadJob {
  const ReadFile* file = nullptr;
  uint64_t off = 0, len = 0;  // file bytes that must exist
  size_t tag = 0;             // the target's: a chunk index, a slot
};

class ReadTarget {
 public:
  struct Buffer {
    uint8_t* dst = nullptr;    // where byte `off` goes, congruent to it mod kIoPage; null: skip the
                               // job (done() is not called)
    Slack slack = Slack::None;
    void* token = nullptr;     // the target's (e.g. the staging buffer)
  };
  virtual ~ReadTarget() = default;
  // Called on a reader thread before the read; may block. Exceptions go to done().
  virtual Buffer buffer(const ReadJob& j) = 0;
  // After the read, or instead of it with `err` set (the read or buffer() threw). `bytes`:
  // read from the file (O_DIRECT rounding included); `seconds`: spent reading. Must not throw.
  virtual void done(const ReadJob& j, const Buffer& b, uint64_t bytes, double seconds, std::exception_ptr err) = 0;
  // The tensor at file offset `at` of job j (error messages).
  virtual std::string tensor_at(const ReadJob& j, uint64_t at) const = 0;
};

class ChunkReaders {
 public:
  // Starts `threads` (>= 1) reader threads that serve `target`, which must outlive them.
  // When the system refuses a thread (ulimit -u, std::system_error), the ones started serve
  // every job, with a warning (warning(), also logged); when it refuses the first one:
  // Error("io.threads", exit 1).
  ChunkReaders(ReadTarget& target, int threads);
  ChunkReaders(const ChunkReaders&) = delete;
  ChunkReaders& operator=(const ChunkReaders&) = delete;
  ~ChunkReaders();  // stop()

  void push(const ReadJob& j);
  void push(const std::vector<ReadJob>& jobs);
  // Drops the jobs not started; the threads finish the read they are in and are joined.
  // Wake anything a reader may be blocked on in buffer() first. Idempotent.
  void stop();
  int threads() const { return static_cast<int>(threads_.size()); }
  // Why threads() is fewer than asked ("" when it is not).
  const std::string& warning() const { return warning_; }
  // Test hook: thread starts after the first `n` fail as the OS would fail them; -1 (the
  // default) turns it off. Process-wide.
  static void fail_thread_starts_after_for_test(int n);

 private:
  void run();

  ReadTarget& target_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ReadJob> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
  std::string warning_;
};

}  // namespace nunchaku
