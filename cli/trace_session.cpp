#include "cli/trace_session.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "io/atomic_output.hpp"

namespace nunchaku::cli {

TraceSession::TraceSession(std::string path, std::string command) : path_(std::move(path)), command_(std::move(command)) {
  if (path_.empty()) return;
  check();
  trace::name_thread("main");
  start_rss_ = current_rss_bytes();
  rec_ = std::make_unique<trace::Recorder>("nunchaku " + command_);
  sampler_ = std::make_unique<MemorySampler>(*rec_, kTracePeriod);
}

void TraceSession::check() const {
  if (!path_.empty()) check_not_input(path_);
}

void TraceSession::watch_cuda(int device) {
  if (sampler_) sampler_->watch_cuda(device);
}

void TraceSession::predict(const std::string& counter, uint64_t bytes) {
  if (on()) predicted_[counter] = bytes;
}

void TraceSession::predict_load(const LoadReport& r, uint64_t host_bytes, uint64_t streamed_reads) {
  predict(kHostRssCounter, start_rss_ + host_bytes);
  // Mapped CPU modules (no --copy) are not read: the kernel maps the page cache's pages.
  predict(kFileReadCounter, r.total_bytes - std::min(r.bytes_mapped, r.total_bytes) + streamed_reads);
  if (auto it = r.allocated.find("pinned"); it != r.allocated.end()) predict(kPinnedCounter, it->second);
  if (auto it = r.allocated.find("device"); it != r.allocated.end()) predict(kDeviceAllocCounter, it->second);
}

void TraceSession::finish(nlohmann::json other) {
  if (!on()) return;
  sampler_->stop();
  const auto end = trace::Clock::now();
  nlohmann::json peaks = nlohmann::json::object(), predicted = nlohmann::json::object();
  for (const auto& [name, bytes] : predicted_) {
    rec_->counter(predicted_counter(name), rec_->start(), bytes);
    rec_->counter(predicted_counter(name), end, bytes);
    predicted[name] = bytes;
  }
  for (const std::string& name : sampler_->counters()) peaks[name] = sampler_->peak(name);
  other["command"] = command_;
  other["trace_format_version"] = kTraceFormatVersion;
  other["sample_period_us"] = kTracePeriod.count();
  other["num_samples"] = sampler_->samples();
  other["peak_bytes"] = peaks;
  other["predicted_bytes"] = predicted;
  other["max_rss_bytes"] = max_rss_bytes();
  other["start_rss_bytes"] = start_rss_;
  const std::string text = rec_->to_json(other).dump() + "\n";
  rec_.reset();
  write_file_atomically(path_, text);
  fmt::print(stderr, "wrote {} (Chrome trace: open it in Perfetto or chrome://tracing)\n", path_);
}

}  // namespace nunchaku::cli
