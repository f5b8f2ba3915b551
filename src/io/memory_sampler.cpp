#include "io/memory_sampler.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "cuda/loader.hpp"
#include "io/memory_counters.hpp"

namespace nunchaku {
namespace {

// Resident pages from a /proc/self/statm descriptor: "size resident shared ...".
uint64_t rss_from(int fd) {
  char buf[128];
  const ssize_t n = fd >= 0 ? ::pread(fd, buf, sizeof buf - 1, 0) : -1;
  if (n <= 0) return 0;
  buf[n] = 0;
  char* end = nullptr;
  std::strtoull(buf, &end, 10);
  const uint64_t pages = std::strtoull(end, nullptr, 10);
  return pages * uint64_t(::sysconf(_SC_PAGESIZE));
}

uint64_t cuda_used(int device) {
  cuda::MemInfo mi;
  std::string err;
  return cuda::mem_info(device, mi, &err) ? mi.total_bytes - mi.free_bytes : 0;
}

}  // namespace

std::string cuda_memory_counter(int device) { return "cuda:" + std::to_string(device) + " memory"; }
std::string predicted_counter(const std::string& counter) { return counter + " (predicted)"; }

uint64_t current_rss_bytes() {
  const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  const uint64_t v = rss_from(fd);
  if (fd >= 0) ::close(fd);
  return v;
}

uint64_t max_rss_bytes() {
  rusage ru{};
  return ::getrusage(RUSAGE_SELF, &ru) == 0 ? uint64_t(ru.ru_maxrss) * 1024 : 0;
}

MemorySampler::MemorySampler(trace::Recorder& rec, std::chrono::microseconds period, std::vector<int> cuda_devices)
    : rec_(rec), period_(period) {
  statm_ = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  read_before_ = file_bytes_read();
  for (int d : cuda_devices) used_before_[d] = cuda_used(d);
  sample(true);
  thread_ = std::thread([this] { run(); });
}

MemorySampler::~MemorySampler() {
  stop();
  if (statm_ >= 0) ::close(statm_);
}

void MemorySampler::stop() {
  {
    std::lock_guard lk(wake_mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  sample(true);
}

void MemorySampler::watch_cuda(int device) {
  const uint64_t before = cuda_used(device);
  std::lock_guard lk(mu_);
  if (used_before_.count(device)) return;
  used_before_[device] = before;
}

std::vector<std::string> MemorySampler::counters() const {
  std::lock_guard lk(mu_);
  std::vector<std::string> out;
  for (const auto& [name, _] : peaks_) out.push_back(name);
  return out;
}

uint64_t MemorySampler::peak(const std::string& counter) const {
  std::lock_guard lk(mu_);
  auto it = peaks_.find(counter);
  return it == peaks_.end() ? 0 : it->second;
}

void MemorySampler::run() {
  trace::name_thread("sampler");
  std::unique_lock lk(wake_mu_);
  while (!wake_.wait_for(lk, period_, [this] { return stopping_; })) {
    lk.unlock();
    sample(false);
    lk.lock();
  }
}

void MemorySampler::sample(bool force) {
  const auto now = trace::Clock::now();
  std::vector<std::pair<std::string, uint64_t>> v = {{kHostRssCounter, rss_from(statm_)},
                                                     {kPinnedCounter, live_pinned_bytes()},
                                                     {kFileReadCounter, file_bytes_read() - read_before_}};
  std::map<int, uint64_t> before;
  {
    std::lock_guard lk(mu_);
    before = used_before_;
  }
  if (!before.empty()) v.push_back({kDeviceAllocCounter, live_device_bytes()});
  for (const auto& [d, b] : before) {
    const uint64_t used = cuda_used(d);
    v.push_back({cuda_memory_counter(d), used > b ? used - b : 0});
  }
  std::lock_guard lk(mu_);
  for (auto& [name, value] : v) {
    auto [it, fresh] = last_.try_emplace(name, value);
    if (force || fresh || it->second != value) rec_.counter(name, now, value);
    it->second = value;
    uint64_t& p = peaks_[name];
    p = std::max(p, value);
  }
  ++ticks_;
}

}  // namespace nunchaku
