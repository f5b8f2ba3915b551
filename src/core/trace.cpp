#include "core/trace.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

namespace nunchaku::trace {
namespace {

std::atomic<Recorder*> g_active{nullptr};
std::atomic<uint32_t> g_next_tid{1};
std::mutex g_names_mu;
std::map<uint32_t, std::string>& names() {
  static std::map<uint32_t, std::string> m;
  return m;
}

}  // namespace

Recorder* active() { return g_active.load(std::memory_order_relaxed); }

uint32_t thread_id() {
  thread_local const uint32_t id = g_next_tid.fetch_add(1);
  return id;
}

void name_thread(const char* name) {
  std::lock_guard lk(g_names_mu);
  names()[thread_id()] = name;
}

std::string thread_name(uint32_t tid) {
  std::lock_guard lk(g_names_mu);
  auto it = names().find(tid);
  return it != names().end() ? it->second : "thread " + std::to_string(tid);
}

Recorder::Recorder(std::string process_name) : process_(std::move(process_name)), t0_(Clock::now()) {
  Recorder* none = nullptr;
  if (!g_active.compare_exchange_strong(none, this)) throw std::logic_error("trace::Recorder: another recorder is active");
}

Recorder::~Recorder() {
  Recorder* self = this;
  g_active.compare_exchange_strong(self, nullptr);
}

double Recorder::micros(Clock::time_point t) const {
  return std::max(0.0, std::chrono::duration<double, std::micro>(t - t0_).count());
}

void Recorder::complete(const char* name, const char* category, Clock::time_point begin, Clock::time_point end) {
  const uint32_t tid = thread_id();
  const double ts = micros(begin), dur = std::max(0.0, micros(end) - ts);
  std::lock_guard lk(mu_);
  phases_.push_back({name, category, tid, ts, dur});
}

void Recorder::counter(const std::string& name, Clock::time_point at, uint64_t value) {
  const double ts = micros(at);
  std::lock_guard lk(mu_);
  auto it = std::find(counters_.begin(), counters_.end(), name);
  const auto index = static_cast<uint32_t>(it - counters_.begin());
  if (it == counters_.end()) counters_.push_back(name);
  samples_.push_back({index, ts, value});
}

nlohmann::json Recorder::to_json(const nlohmann::json& other) const {
  using nlohmann::json;
  std::lock_guard lk(mu_);
  json events = json::array();
  // Microseconds with a nanosecond's precision: what Perfetto keeps.
  auto us = [](double v) { return std::round(v * 1000) / 1000; };
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 0}, {"args", {{"name", process_}}}});
  std::vector<uint32_t> tids;
  for (const auto& p : phases_) tids.push_back(p.tid);
  std::sort(tids.begin(), tids.end());
  tids.erase(std::unique(tids.begin(), tids.end()), tids.end());
  for (uint32_t t : tids)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", t}, {"args", {{"name", thread_name(t)}}}});
  struct Item {
    double ts;
    size_t index;
    bool phase;
  };
  std::vector<Item> order;
  for (size_t i = 0; i < phases_.size(); ++i) order.push_back({phases_[i].ts, i, true});
  for (size_t i = 0; i < samples_.size(); ++i) order.push_back({samples_[i].ts, i, false});
  std::stable_sort(order.begin(), order.end(), [](const Item& a, const Item& b) { return a.ts < b.ts; });
  for (const Item& it : order) {
    if (it.phase) {
      const Phase& p = phases_[it.index];
      events.push_back({{"name", p.name}, {"cat", p.category}, {"ph", "X"}, {"ts", us(p.ts)}, {"dur", us(p.dur)}, {"pid", 1}, {"tid", p.tid}});
    } else {
      const Sample& s = samples_[it.index];
      events.push_back({{"name", counters_[s.counter]}, {"ph", "C"}, {"ts", us(s.ts)}, {"pid", 1}, {"tid", 0}, {"args", {{"bytes", s.value}}}});
    }
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", other}};
}

}  // namespace nunchaku::trace
