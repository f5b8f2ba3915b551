// `--trace FILE` of load and run: one trace::Recorder and the one MemorySampler for the
// whole command, predictions beside the samples, and the Chrome Trace Event JSON written
// through the one output writer at the end (docs/pictures.md, docs/schema/trace.json).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/trace.hpp"
#include "io/loader.hpp"
#include "io/memory_sampler.hpp"

namespace nunchaku::cli {

// Sampling period: a few milliseconds (the sampler's cost is measured by scripts/bench_trace.sh).
inline constexpr std::chrono::microseconds kTracePeriod{2000};
// What --trace documents' otherData.trace_format_version is (bumped as json_format_version is).
inline constexpr int kTraceFormatVersion = 1;

class TraceSession {
 public:
  // Off when `path` is empty. Refuses (io.output_is_input) a path that is one of the inputs
  // noted so far; call again with check() once the checkpoint's files are noted.
  TraceSession(std::string path, std::string command);
  bool on() const { return rec_ != nullptr; }
  void check() const;
  // Samples cudaMemGetInfo of `device` from now on.
  void watch_cuda(int device);
  // The prediction for `counter` (a flat line over the whole timeline).
  void predict(const std::string& counter, uint64_t bytes);
  // Host RSS when the session started (the program, its libraries): what a command's own
  // host-memory prediction comes on top of.
  uint64_t start_rss() const { return start_rss_; }
  // What a load predicts (load and run): host RSS = start_rss() + `host_bytes`; file bytes
  // read = the bytes not served by file mappings + `streamed_reads`; pinned host memory and
  // device memory allocated = the plan's module blocks. (cuda:N memory: the caller's.)
  void predict_load(const LoadReport& r, uint64_t host_bytes, uint64_t streamed_reads = 0);
  // Stops sampling and writes the file; `other` goes into otherData beside the peaks.
  void finish(nlohmann::json other = nlohmann::json::object());

 private:
  std::string path_, command_;
  std::unique_ptr<trace::Recorder> rec_;
  std::unique_ptr<MemorySampler> sampler_;
  std::map<std::string, uint64_t> predicted_;
  uint64_t start_rss_ = 0;
};

}  // namespace nunchaku::cli
