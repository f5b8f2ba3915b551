// Timelines of a command (`load --trace`, `run --trace`) in the Chrome Trace Event format
// (the JSON the PyTorch profiler writes and Perfetto / chrome://tracing open):
//   duration events ("ph": "X") for phases: a Span around the work, on the thread doing it;
//   counter events ("ph": "C") for sampled values (io/memory_sampler.hpp) and predictions.
// At most one Recorder exists at a time; while none does, a Span costs one relaxed atomic
// load, so the instrumented code paths (reads, copies, forward passes) need no flag.
// Thread-safe: spans and counters may come from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace nunchaku::trace {

using Clock = std::chrono::steady_clock;

class Recorder {
 public:
  // Starts the timeline (time 0) and becomes the active recorder; throws std::logic_error
  // when another one is active.
  explicit Recorder(std::string process_name);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // A phase [begin, end) on the calling thread. `name` and `category` must outlive the
  // recorder (string literals).
  void complete(const char* name, const char* category, Clock::time_point begin, Clock::time_point end);
  // A sample of counter `name` at `at` (time 0 when earlier than the start).
  void counter(const std::string& name, Clock::time_point at, uint64_t value);
  Clock::time_point start() const { return t0_; }
  // Microseconds since the start.
  double micros(Clock::time_point t) const;

  // {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": other}: metadata events
  // naming the process and each thread, then phases and counters in time order.
  nlohmann::json to_json(const nlohmann::json& other) const;

 private:
  struct Phase {
    const char* name;
    const char* category;
    uint32_t tid;
    double ts, dur;  // microseconds
  };
  struct Sample {
    uint32_t counter;
    double ts;
    uint64_t value;
  };
  std::string process_;
  Clock::time_point t0_;
  mutable std::mutex mu_;
  std::vector<Phase> phases_;
  std::vector<std::string> counters_;  // names, by index
  std::vector<Sample> samples_;
};

// The active recorder, or null (relaxed: a span that races a recorder's start or end is
// dropped, never torn).
Recorder* active();

// Names the calling thread in every trace ("main", "reader", "sampler"); threads not named
// are "thread N".
void name_thread(const char* name);
// The calling thread's id in traces (1 for the first thread that asked, ...).
uint32_t thread_id();
std::string thread_name(uint32_t tid);

// RAII phase: [construction, destruction) on this thread, when a recorder is active at
// construction. `name` and `category`: string literals.
class Span {
 public:
  Span(const char* name, const char* category) : name_(name), category_(category) {
    if (active()) t0_ = Clock::now(), on_ = true;
  }
  ~Span() {
    if (!on_) return;
    if (Recorder* r = active()) r->complete(name_, category_, t0_, Clock::now());
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  const char* name_;
  const char* category_;
  Clock::time_point t0_{};
  bool on_ = false;
};

}  // namespace nunchaku::trace
