// Stage 3b of the loader: reader threads take the chunks in file order; a chunk for host
// memory without conversion is read straight into place, any other one into a buffer of
// the staging ring, which the calling thread hands to its sink while the readers read on.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "core/error.hpp"
#include "io/chunk_readers.hpp"
#include "io/load_sinks.hpp"

namespace nunchaku::load {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The readers' side of the pipeline: where each chunk goes, and what happens once it is read.
class LoadTarget final : public ReadTarget {
 public:
  LoadTarget(const Checkpoint& ck, const UnitPlan& p, const std::vector<Chunk>& chunks, const Sink& host,
             StagingRing* ring, std::atomic<uint64_t>& done_bytes)
      : ck_(ck), p_(p), chunks_(chunks), host_(host), ring_(ring), done_bytes_(done_bytes) {}

  Buffer buffer(const ReadJob& j) override {
    if (abort_) return {};
    const Chunk& c = chunks_[j.tag];
    if (!c.staged()) return {host_.place(c), Slack::None, nullptr};
    StagingSlot* s = ring_->acquire();
    if (!s) return {};
    return {s->data + c.off % kIoPage, Slack::Pages, s};
  }

  void done(const ReadJob& j, const Buffer& b, uint64_t bytes, double seconds, std::exception_ptr err) override {
    read_ns_ += static_cast<uint64_t>(seconds * 1e9);
    bytes_read_ += bytes;
    if (err) return fail(err);
    const Chunk& c = chunks_[j.tag];
    if (auto* s = static_cast<StagingSlot*>(b.token)) {
      s->chunk = j.tag;
      s->payload = b.dst;
      s->length = c.len;
      ring_->push_filled(s);
      return;
    }
    done_bytes_ += c.len;
    {
      std::lock_guard lk(mu_);
      ++direct_done_;
    }
    cv_.notify_all();
  }

  std::string tensor_at(const ReadJob& j, uint64_t at) const override {
    return load::tensor_at(ck_, p_.units[chunks_[j.tag].unit], at);
  }

  // True once `total` unstaged chunks have landed or a reader failed; waits up to `ms`.
  bool wait_direct(size_t total, int ms) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, std::chrono::milliseconds(ms), [&] { return abort_ || direct_done_ == total; });
  }
  void abort() {
    abort_ = true;
    if (ring_) ring_->close();
    cv_.notify_all();
  }
  bool aborted() const { return abort_; }
  std::exception_ptr error() {
    std::lock_guard lk(mu_);
    return error_;
  }
  uint64_t bytes_read() const { return bytes_read_; }
  double read_s() const { return double(read_ns_.load()) / 1e9; }

 private:
  void fail(std::exception_ptr e) {
    {
      std::lock_guard lk(mu_);
      if (!error_) error_ = e;
    }
    abort();
  }

  const Checkpoint& ck_;
  const UnitPlan& p_;
  const std::vector<Chunk>& chunks_;
  const Sink& host_;
  StagingRing* ring_;
  std::atomic<uint64_t>& done_bytes_;
  std::atomic<bool> abort_{false};
  std::atomic<uint64_t> bytes_read_{0}, read_ns_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  size_t direct_done_ = 0;
  std::exception_ptr error_;
};

// Readers are stopped on every exit path, exceptions included (the ring closed first, so
// none stays blocked waiting for a buffer).
struct StopReaders {
  LoadTarget& target;
  std::unique_ptr<ChunkReaders>& readers;
  ~StopReaders() {
    target.abort();
    if (readers) readers->stop();
  }
};

}  // namespace

void run_pipeline(const Checkpoint& ck, const UnitPlan& p, const std::vector<Chunk>& chunks,
                  const std::vector<uint8_t*>& module_base, const std::vector<std::unique_ptr<ReadFile>>& files,
                  const std::map<int, uint64_t>& gpu_used_before, uint64_t chunk_cap, const LoadOptions& o,
                  Clock::time_point t_start, LoadReport& rep) {
  size_t staged_total = 0;
  std::map<int, bool> gpu_converts;  // device -> needs a conversion scratch
  for (const Chunk& c : chunks) {
    rep.total_bytes += c.len;
    staged_total += c.staged();
    (c.staged() ? rep.bytes_staged : rep.bytes_direct) += c.len;
    const Unit& u = p.units[c.unit];
    if (c.sink == SinkKind::Cuda && u.convert) gpu_converts[p.module_dev[u.module].index] = true;
  }
  rep.chunks = chunks.size();

  std::unique_ptr<StagingRing> ring;
  if (staged_total) {
    int n = static_cast<int>(std::min<size_t>(o.staging_buffers, staged_total));
    ring = std::make_unique<StagingRing>(n, chunk_cap, !gpu_used_before.empty());
    rep.staging_buffers = n;
    rep.staging_bytes = chunk_cap;
    rep.host_peak_bytes += ring->bytes_allocated();
  }
  std::atomic<uint64_t> done_bytes{0};
  const SinkContext cx{ck, p, chunks, module_base, ring.get(), done_bytes};
  HostSink host(cx);
  CpuConvertSink cpu_convert(cx);
  std::unique_ptr<CudaSink> cuda;  // destroyed before the ring: its copies read the ring's buffers
  if (!gpu_used_before.empty()) {
    std::vector<int> devices;
    for (const auto& [dev, _] : gpu_used_before) devices.push_back(dev);
    cuda = std::make_unique<CudaSink>(cx, devices, gpu_converts, chunk_cap, rep);
  }
  for (size_t mi = 0; mi < p.module_dev.size(); ++mi)
    if (p.module_dev[mi].kind == Device::Kind::Cuda) rep.gpu[p.module_dev[mi]].predicted += p.module_bytes[mi];
  auto sink_of = [&](const Chunk& c) -> Sink& {
    if (c.sink == SinkKind::Cuda) return *cuda;
    if (c.sink == SinkKind::CpuConvert) return cpu_convert;
    return host;
  };

  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  int nthreads = o.reader_threads > 0 ? o.reader_threads : static_cast<int>(std::min(4u, hw));
  nthreads = static_cast<int>(std::min<size_t>(nthreads, std::max<size_t>(chunks.size(), 1)));
  rep.reader_threads = chunks.empty() ? 0 : nthreads;

  LoadTarget target(ck, p, chunks, host, ring.get(), done_bytes);
  std::unique_ptr<ChunkReaders> readers;
  StopReaders stop{target, readers};
  if (rep.reader_threads > 0) {
    std::vector<ReadJob> jobs;
    jobs.reserve(chunks.size());
    for (size_t ci = 0; ci < chunks.size(); ++ci)
      jobs.push_back({files[p.units[chunks[ci].unit].file].get(), chunks[ci].off, chunks[ci].len, ci});
    readers = std::make_unique<ChunkReaders>(target, rep.reader_threads);
    if (!readers->warning().empty()) rep.notes.push_back(readers->warning());
    rep.reader_threads = readers->threads();
    readers->push(jobs);
  }

  const size_t direct_total = chunks.size() - staged_total;
  size_t staged_done = 0;
  auto last_progress = Clock::now() - std::chrono::seconds(1);
  for (;;) {
    if (o.cancel && o.cancel->load()) {
      target.abort();
      throw Error("load.interrupted", "interrupted; everything loaded so far was released", {.file = ck.path},
                  interrupted_exit());
    }
    if (target.aborted()) break;
    if (o.progress && since(last_progress) >= 0.1) {
      last_progress = Clock::now();
      o.progress({done_bytes.load(), rep.total_bytes, since(t_start)});
    }
    if (staged_done == staged_total) {
      if (cuda) cuda->finish();
      if (target.wait_direct(direct_total, 50)) break;
      continue;
    }
    StagingSlot* s = ring->pop_filled(50);
    if (!s) continue;
    const Chunk& c = chunks[s->chunk];
    sink_of(c).land(c, s);
    ++staged_done;
  }
  if (readers) readers->stop();
  if (auto e = target.error()) std::rethrow_exception(e);
  if (cuda) cuda->synchronize();
  rep.read_s = target.read_s();
  rep.copy_s = cuda ? cuda->busy_s() : 0;
  rep.convert_s = cpu_convert.busy_s();
  rep.bytes_read = target.bytes_read();
  if (o.progress) o.progress({rep.total_bytes, rep.total_bytes, since(t_start)});

  // GPU memory measured while the scratch buffers still exist (the peak of the load).
  for (auto& [dev, used0] : gpu_used_before) {
    cuda::MemInfo mi;
    std::string err;
    if (cuda::mem_info(dev, mi, &err)) {
      uint64_t used = mi.total_bytes - mi.free_bytes;
      rep.gpu[Device{Device::Kind::Cuda, dev}].measured = used > used0 ? used - used0 : 0;
    }
  }
}

}  // namespace nunchaku::load
