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

// Module `mod` is not on disk itself but its routed-expert tensors are (the loader's split
// of an expert_map entry; `views` are its tensors as loaded).
bool experts_apart_on_disk(const Module& mod, const std::vector<TensorView>& views) {
  bool experts_on_disk = false, rest_resident = false;
  for (size_t k = 0; k < mod.tensors.size() && k < views.size(); ++k) {
    const bool on_disk = views[k].device.kind == Device::Kind::Disk;
    if (k < mod.roles.size() && is_expert_role(mod.roles[k])) experts_on_disk |= on_disk;
    else rest_resident |= !on_disk;
  }
  return experts_on_disk && rest_resident;
}

}  // namespace

StreamedProvider::StreamedProvider(const Checkpoint& ck, const ModelLayout& layout, const WeightStore& store,
                                   const StreamOptions& opts)
    : tensors_(ck.tensors), opts_(opts) {
  info_ = module_views(layout, store);
  streamed_.assign(info_.size(), false);
  pieced_.assign(info_.size(), false);
  slot_tensor_.resize(info_.size());
  reads_.resize(info_.size());
  files_.resize(ck.files.size());
  auto open_file = [&](uint32_t f) {
    if (!files_[f]) files_[f] = std::make_unique<ReadFile>(ck.files[f].path, opts.direct_io);
  };
  for (size_t m = 0; m < info_.size(); ++m) {
    const Module& mod = layout.modules[m];
    if (opts.expert_pieces && experts_apart_on_disk(mod, info_[m])) {
      // A layer kept in memory whose routed experts a plan left on disk (expert_map): the
      // layer is served as loaded, its experts read expert by expert into the piece slots.
      pieced_[m] = true;
      piece_bytes_ = std::max(piece_bytes_, stream_piece_bytes(ck, mod));
      for (size_t k = 0; k < mod.tensors.size(); ++k)
        if (k < mod.roles.size() && is_expert_role(mod.roles[k])) {
          info_[m][k].data = nullptr;  // never read through the file mapping
          open_file(ck.tensors[mod.tensors[k]].file);
        }
      continue;
    }
    if (store.modules()[m].device.kind != Device::Kind::Disk || mod.tensors.empty()) continue;
    streamed_[m] = true;
    // The slot's tensors: all, or all but the routed experts' (read as pieces).
    Module slot = mod;
    std::vector<size_t> keep(mod.tensors.size());
    for (size_t k = 0; k < keep.size(); ++k) keep[k] = k;
    if (opts.expert_pieces && stream_piece_bytes(ck, mod) > 0) {
      keep = stream_slot_tensors(mod);
      pieced_[m] = true;
      slot.tensors.clear();
      for (size_t k : keep) slot.tensors.push_back(mod.tensors[k]);
      piece_bytes_ = std::max(piece_bytes_, stream_piece_bytes(ck, mod));
      for (size_t k = 0; k < mod.tensors.size(); ++k)
        if (k < mod.roles.size() && is_expert_role(mod.roles[k])) open_file(ck.tensors[mod.tensors[k]].file);
    }
    slot_tensor_[m].assign(mod.tensors.size(), SIZE_MAX);
    for (size_t j = 0; j < keep.size(); ++j) slot_tensor_[m][keep[j]] = j;
    reads_[m] = plan_module_reads(ck, slot);
    slot_bytes_ = std::max(slot_bytes_, reads_[m].bytes);  // == stream_slot_bytes(ck, mod)
    for (TensorView& v : info_[m]) {
      v.data = nullptr;
      v.device = Device{Device::Kind::Cpu, 0};  // where the bytes are while acquired
    }
    for (const auto& run : reads_[m].runs) open_file(run.file);
  }
  auto pool_error = [&](const Error& e) {
    return Error(e.code(), e.message(),
                 {.file = ck.path, .hint = "give --cpu-ram more room, or lower the streaming slots"}, Exit::OutOfMemory);
  };
  slots_.resize(slot_bytes_ > 0 ? size_t(std::max(1, opts.slots)) : 0);  // none when only experts stream
  for (size_t i = 0; i < slots_.size(); ++i) {
    try {
      slots_[i].mem = allocate(Device{Device::Kind::Cpu, 0}, slot_bytes_, false, fmt::format("streaming slot {}", i));
    } catch (const Error& e) {
      throw pool_error(e);
    }
  }
  if (piece_bytes_ > 0) {
    const int64_t top_k = layout.spec ? layout.spec->num_experts_per_tok : 1;
    // At least one expert's gate, up and down at a time.
    pieces_.resize(size_t(opts.piece_slots > 0 ? std::max(3, opts.piece_slots) : stream_piece_slots(top_k)));
    for (size_t i = 0; i < pieces_.size(); ++i) {
      try {
        pieces_[i].mem = allocate(Device{Device::Kind::Cpu, 0}, piece_bytes_, false, fmt::format("expert piece slot {}", i));
      } catch (const Error& e) {
        throw pool_error(e);
      }
    }
  }
  pool_bytes_ = slot_bytes_ * slots_.size() + piece_bytes_ * pieces_.size();
  readers_ = std::make_unique<ChunkReaders>(target_, std::max(1, opts.reader_threads));
}

StreamedProvider::~StreamedProvider() { readers_->stop(); }

std::string StreamedProvider::describe() const {
  size_t n = size_t(std::count(streamed_.begin(), streamed_.end(), true));
  std::string d = fmt::format("streamed {} of {} through {} of {} bytes", n, plural(streamed_.size(), "module"),
                              plural(slots_.size(), "slot"), slot_bytes_);
  if (!pieces_.empty())
    d += fmt::format(", routed experts through {} of {} bytes", plural(pieces_.size(), "piece slot"), piece_bytes_);
  return d;
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
  for (size_t k = 0; k < s.views.size(); ++k) {
    const size_t j = slot_tensor_[m][k];
    s.views[k].data = j == SIZE_MAX ? nullptr : s.mem.bytes_ptr() + r.tensor_dst[j];
  }
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
  if (pieced_[m]) free_pieces();
  size_t si = find_slot(m);
  if (si == SIZE_MAX) return;
  slots_[si].in_use = false;
  slots_[si].last_use = ++clock_;
}

void StreamedProvider::free_pieces() {
  for (PieceSlot& p : pieces_) p.in_use = false;
}

void StreamedProvider::fetch(size_t m, std::span<const Piece> want, std::span<const uint8_t*> where) {
  if (!pieces_streamed(m) || want.size() > pieces_.size() || where.size() < want.size())
    throw Error("engine.stream_pool",
                fmt::format("{} expert pieces asked of module {} where the pool has {} piece slots", want.size(), m,
                            pieces_.size()),
                {}, Exit::Internal);
  std::unique_lock lk(mu_);
  free_pieces();  // the previous call's pieces are done with
  // Pieces already in the pool are kept (and not read again); the rest take the least
  // recently used free slots.
  std::vector<size_t> slot_of(want.size(), SIZE_MAX);
  std::vector<ReadJob> jobs;
  for (size_t i = 0; i < want.size(); ++i) {
    const Piece& q = want[i];
    const TensorView& v = info_[m].at(q.tensor);
    const TensorInfo& t = tensors_.at(v.tensor);
    if (q.begin > t.nbytes || q.bytes > t.nbytes - q.begin || q.bytes == 0)
      throw Error("engine.stream_pool", fmt::format("a piece [{}, +{}) outside the {} bytes of the tensor", q.begin, q.bytes, t.nbytes),
                  {.tensor = t.name}, Exit::Internal);
    for (size_t p = 0; p < pieces_.size(); ++p)
      if (pieces_[p].tensor == v.tensor && pieces_[p].begin == q.begin && pieces_[p].bytes == q.bytes && !pieces_[p].error) {
        slot_of[i] = p;
        break;
      }
    if (slot_of[i] != SIZE_MAX) {
      pieces_[slot_of[i]].in_use = true;
      ++stats_.piece_hits;
    }
  }
  for (size_t i = 0; i < want.size(); ++i) {
    if (slot_of[i] != SIZE_MAX) continue;
    size_t best = SIZE_MAX;
    for (size_t p = 0; p < pieces_.size(); ++p)
      if (!pieces_[p].in_use && pieces_[p].pending == 0 && (best == SIZE_MAX || pieces_[p].last_use < pieces_[best].last_use))
        best = p;
    if (best == SIZE_MAX)  // want.size() <= slots and none pending outside a call: cannot happen
      throw Error("engine.stream_pool", "no free expert piece slot", {}, Exit::Internal);
    const TensorInfo& t = tensors_[info_[m][want[i].tensor].tensor];
    PieceSlot& ps = pieces_[best];
    ps.tensor = info_[m][want[i].tensor].tensor;
    ps.begin = want[i].begin;
    ps.bytes = want[i].bytes;
    ps.file = t.file;
    ps.error = nullptr;
    ps.in_use = true;
    const uint64_t first = t.offset + ps.begin, end = first + ps.bytes;
    ps.off = align_down(first, kIoPage);
    if (align_up(end, kIoPage) - ps.off > piece_bytes_)
      throw Error("engine.stream_pool", fmt::format("a piece of {} bytes where a piece slot holds {}", ps.bytes, piece_bytes_),
                  {.tensor = t.name}, Exit::Internal);
    for (uint64_t at = ps.off; at < end; at += opts_.chunk_bytes) {
      const uint64_t stop = std::min(at + opts_.chunk_bytes, end);
      jobs.push_back({files_[ps.file].get(), at, stop - at, size_t(kPieceTag | best)});
      ++ps.pending;
    }
    slot_of[i] = best;
    ++stats_.pieces_read;
  }
  if (!jobs.empty()) {
    readers_->push(jobs);
    trace::Span span("expert wait", "run");
    const auto t0 = Clock::now();
    done_cv_.wait(lk, [&] {
      for (size_t p : slot_of)
        if (pieces_[p].pending > 0) return false;
      return true;
    });
    stats_.wait_s += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  for (size_t i = 0; i < want.size(); ++i) {
    PieceSlot& ps = pieces_[slot_of[i]];
    ps.last_use = ++clock_;
    if (ps.error) {  // the slot is emptied: asked again, the piece is read again
      std::exception_ptr e = ps.error;
      ps.error = nullptr;
      ps.tensor = SIZE_MAX;
      std::rethrow_exception(e);
    }
    where[i] = ps.mem.bytes_ptr() + (tensors_[ps.tensor].offset + ps.begin - ps.off);
  }
}

const ModuleReads::Run& StreamedProvider::run_of(const ReadJob& j) const {
  return reads_[slots_[j.tag >> 32].module].runs[j.tag & 0xffffffffu];
}

ReadTarget::Buffer StreamedProvider::Target::buffer(const ReadJob& j) {
  if (p.opts_.before_read) p.opts_.before_read();
  if (j.tag & kPieceTag) {
    PieceSlot& ps = p.pieces_[j.tag & ~kPieceTag];
    return {ps.mem.bytes_ptr() + (j.off - ps.off), Slack::Pages, nullptr};
  }
  const ModuleReads::Run& run = p.run_of(j);
  return {p.slots_[j.tag >> 32].mem.bytes_ptr() + run.dst + (j.off - run.off), Slack::Pages, nullptr};
}

void StreamedProvider::Target::done(const ReadJob& j, const Buffer&, uint64_t bytes, double, std::exception_ptr err) {
  {
    std::lock_guard lk(p.mu_);
    if (j.tag & kPieceTag) {
      PieceSlot& ps = p.pieces_[j.tag & ~kPieceTag];
      if (err && !ps.error) ps.error = err;
      --ps.pending;
    } else {
      Slot& s = p.slots_[j.tag >> 32];
      if (err && !s.error) s.error = err;
      --s.pending;
    }
    p.stats_.bytes_read += bytes;
  }
  p.done_cv_.notify_all();
}

std::string StreamedProvider::Target::tensor_at(const ReadJob& j, uint64_t at) const {
  if (j.tag & kPieceTag) return p.tensors_[p.pieces_[j.tag & ~kPieceTag].tensor].name;
  const ModuleReads::Run& run = p.run_of(j);
  for (size_t ti : run.tensors) {
    const auto& t = p.tensors_[ti];
    if (at >= t.offset && at < t.offset + std::max<uint64_t>(t.nbytes, 1)) return t.name;
  }
  return run.tensors.empty() ? std::string() : p.tensors_[run.tensors.back()].name;
}

}  // namespace nunchaku::engine
