#include "engine/stream_provider.hpp"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/trace.hpp"
#include "core/units.hpp"

namespace nunchaku::engine {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

StreamedProvider::StreamedProvider(const Checkpoint& ck, const ModelLayout& layout, const WeightStore& store,
                                   const StreamOptions& opts)
    : tensors_(ck.tensors), opts_(opts) {
  info_ = module_views(layout, store);
  streamed_.assign(info_.size(), false);
  reads_.resize(info_.size());
  files_.resize(ck.files.size());
  for (size_t m = 0; m < info_.size(); ++m) {
    if (store.modules()[m].device.kind != Device::Kind::Disk || layout.modules[m].tensors.empty()) continue;
    streamed_[m] = true;
    reads_[m] = plan_module_reads(ck, layout.modules[m]);
    slot_bytes_ = std::max(slot_bytes_, stream_slot_bytes(ck, layout.modules[m]));  // == reads_[m].bytes
    for (TensorView& v : info_[m]) {
      v.data = nullptr;
      v.device = Device{Device::Kind::Cpu, 0};  // where the bytes are while acquired
    }
    for (const auto& run : reads_[m].runs)
      if (!files_[run.file]) files_[run.file] = std::make_unique<ReadFile>(ck.files[run.file].path, opts.direct_io);
  }
  slots_.resize(size_t(std::max(1, opts.slots)));
  for (size_t i = 0; i < slots_.size(); ++i) {
    try {
      slots_[i].mem = allocate(Device{Device::Kind::Cpu, 0}, slot_bytes_, false, fmt::format("streaming slot {}", i));
    } catch (const Error& e) {
      throw Error(e.code(), e.message(),
                  {.file = ck.path, .hint = "give --cpu-ram more room, or lower the streaming slots"}, Exit::OutOfMemory);
    }
  }
  pool_bytes_ = slot_bytes_ * slots_.size();
  readers_ = std::make_unique<ChunkReaders>(target_, std::max(1, opts.reader_threads));
}

StreamedProvider::~StreamedProvider() { readers_->stop(); }

std::string StreamedProvider::describe() const {
  size_t n = size_t(std::count(streamed_.begin(), streamed_.end(), true));
  return fmt::format("streamed {} of {} through {} of {} bytes", n, plural(streamed_.size(), "module"),
                     plural(slots_.size(), "slot"), slot_bytes_);
}

StreamStats StreamedProvider::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

size_t StreamedProvider::find_slot(size_t m) const {
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].module == m) return i;
  return SIZE_MAX;
}

// The least recently used slot that is not in use and holds no prefetched-unused module;
// with `wait`, waits for one (a slot being read for a module that is then dropped).
size_t StreamedProvider::claim_slot(std::unique_lock<std::mutex>& lk, bool wait) {
  for (;;) {
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < slots_.size(); ++i) {
      const Slot& s = slots_[i];
      if (s.in_use || s.pending > 0 || (s.fresh && !wait)) continue;
      if (best == SIZE_MAX || s.last_use < slots_[best].last_use) best = i;
    }
    if (best != SIZE_MAX || !wait) return best;
    // Every slot is in use or being filled: wait for reads to finish (acquire only).
    bool any_pending = false;
    for (const Slot& s : slots_) any_pending |= s.pending > 0;
    if (!any_pending)
      throw Error("engine.stream_pool", fmt::format("all {} streaming slots are in use at once", slots_.size()),
                  {.hint = "the engine holds one module at a time; this is a bug"}, Exit::Internal);
    done_cv_.wait(lk);
  }
}

void StreamedProvider::start_read(size_t si, size_t m) {
  Slot& s = slots_[si];
  s.module = m;
  s.error = nullptr;
  s.fresh = true;
  s.views = info_[m];
  const ModuleReads& r = reads_[m];
  for (size_t k = 0; k < s.views.size(); ++k) s.views[k].data = s.mem.bytes_ptr() + r.tensor_dst[k];
  std::vector<ReadJob> jobs;
  for (size_t ri = 0; ri < r.runs.size(); ++ri) {
    const auto& run = r.runs[ri];
    for (uint64_t at = 0; at < run.len; at += opts_.chunk_bytes) {
      // Bytes that must exist: up to the end of the run's tensor data (the last page may pass EOF).
      const uint64_t off = run.off + at, end = std::min(off + std::min(opts_.chunk_bytes, run.len - at), run.data_end);
      jobs.push_back({files_[run.file].get(), off, end - std::min(off, end), si << 32 | ri});
      ++s.pending;
    }
  }
  ++stats_.modules_read;
  readers_->push(jobs);
}

void StreamedProvider::prefetch(size_t m) {
  if (!streamed_[m]) return;
  std::unique_lock lk(mu_);
  if (find_slot(m) != SIZE_MAX) return;
  size_t si = claim_slot(lk, false);
  if (si != SIZE_MAX) start_read(si, m);
}

std::span<const TensorView> StreamedProvider::acquire(size_t m) {
  if (!streamed_[m]) return info_[m];
  std::unique_lock lk(mu_);
  size_t si = find_slot(m);
  if (si == SIZE_MAX) {
    si = claim_slot(lk, true);
    start_read(si, m);
  }
  Slot& s = slots_[si];
  if (s.pending > 0) {
    trace::Span span("stream wait", "run");
    const auto t0 = Clock::now();
    done_cv_.wait(lk, [&] { return s.pending == 0; });
    stats_.wait_s += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  s.fresh = false;
  if (s.error) {
    std::exception_ptr e = s.error;
    s.error = nullptr;
    s.module = SIZE_MAX;  // read again if asked again
    std::rethrow_exception(e);
  }
  s.in_use = true;
  return s.views;
}

void StreamedProvider::release(size_t m) {
  if (!streamed_[m]) return;
  std::lock_guard lk(mu_);
  size_t si = find_slot(m);
  if (si == SIZE_MAX) return;
  slots_[si].in_use = false;
  slots_[si].last_use = ++clock_;
}

const ModuleReads::Run& StreamedProvider::run_of(const ReadJob& j) const {
  return reads_[slots_[j.tag >> 32].module].runs[j.tag & 0xffffffffu];
}

ReadTarget::Buffer StreamedProvider::Target::buffer(const ReadJob& j) {
  if (p.opts_.before_read) p.opts_.before_read();
  const ModuleReads::Run& run = p.run_of(j);
  return {p.slots_[j.tag >> 32].mem.bytes_ptr() + run.dst + (j.off - run.off), Slack::Pages, nullptr};
}

void StreamedProvider::Target::done(const ReadJob& j, const Buffer&, uint64_t bytes, double, std::exception_ptr err) {
  {
    std::lock_guard lk(p.mu_);
    Slot& s = p.slots_[j.tag >> 32];
    if (err && !s.error) s.error = err;
    --s.pending;
    p.stats_.bytes_read += bytes;
  }
  p.done_cv_.notify_all();
}

std::string StreamedProvider::Target::tensor_at(const ReadJob& j, uint64_t at) const {
  const ModuleReads::Run& run = p.run_of(j);
  for (size_t ti : run.tensors) {
    const auto& t = p.tensors_[ti];
    if (at >= t.offset && at < t.offset + std::max<uint64_t>(t.nbytes, 1)) return t.name;
  }
  return run.tensors.empty() ? std::string() : p.tensors_[run.tensors.back()].name;
}

}  // namespace nunchaku::engine
