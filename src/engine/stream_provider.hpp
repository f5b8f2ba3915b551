// Streamed weights, host flavour: modules the load left on disk are read, just before use,
// into a bounded pool of slots in host memory and dropped after; everything else is served
// from the store as loaded. The GPU flavour (issue: CUDA backend) keeps this structure with
// device slots filled from pinned staging on a copy stream.
//
// - Pool: `slots` buffers of the largest streamed module's read layout (plan_module_reads),
//   allocated once; memory is slots x slot_bytes whatever the model size (unlike a file
//   mapping, whose page cache grows until the kernel evicts it).
// - Reader threads read runs of a module in chunks (O_DIRECT where the file system allows,
//   so the page cache does not grow either), while the engine computes earlier layers.
// - prefetch(m) claims a free slot (not in use, not prefetched-and-unused) and queues m's
//   reads; acquire(m) waits for them (or loads m at once when it was not prefetched).
// - A read error (a file truncated under us) is thrown by acquire() of that module as
//   load.short_read (exit 2) naming the file, tensor and offset.
// - MoE layers (expert_pieces): a slot holds the layer less its routed experts; fetch()
//   reads the pieces the batch routes to into a second pool of piece slots (LRU: a piece
//   still there from an earlier step is not read again), all of a call's reads in flight
//   at once over the reader threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/weights.hpp"
#include "format/checkpoint.hpp"
#include "io/chunk_readers.hpp"
#include "io/module_reads.hpp"
#include "io/tensor_reader.hpp"
#include "memory/engine_memory.hpp"

namespace nunchaku::engine {

struct StreamOptions {
  int slots = kStreamSlots;            // pool slots: the module in use + read ahead
  int reader_threads = 2;
  bool direct_io = true;               // O_DIRECT where the file system allows
  uint64_t chunk_bytes = 8ull << 20;   // largest single read
  std::function<void()> before_read;   // test hook: runs before each chunk is read
  bool expert_pieces = true;           // routed experts of streamed modules read per expert
  int piece_slots = 0;                 // 0 = stream_piece_slots(top_k) (engine_memory.hpp)
};

struct StreamStats {
  uint64_t bytes_read = 0;      // from files (page alignment included)
  uint64_t modules_read = 0;
  uint64_t pieces_read = 0;     // expert pieces read (fetch)
  uint64_t piece_hits = 0;      // expert pieces fetch found in the pool already
  double wait_s = 0;            // time acquire() blocked on reads
};

class StreamedProvider final : public WeightProvider {
 public:
  // The store must outlive the provider (the checkpoint and layout need not). Modules on Device::Disk in
  // the store are streamed. Throws Error load.out_of_memory (exit 3) if the pool cannot be
  // allocated.
  StreamedProvider(const Checkpoint& ck, const ModelLayout& layout, const WeightStore& store, const StreamOptions& opts);
  ~StreamedProvider() override;

  size_t modules() const override { return info_.size(); }
  std::span<const TensorView> info(size_t m) const override { return info_[m]; }
  std::span<const TensorView> acquire(size_t m) override;
  void release(size_t m) override;
  void prefetch(size_t m) override;
  bool streamed(size_t m) const override { return streamed_[m]; }
  uint64_t pool_bytes() const override { return pool_bytes_; }
  int pool_slots() const override { return int(slots_.size()); }
  uint64_t slot_bytes() const override { return slot_bytes_; }
  std::string describe() const override;
  bool pieces_streamed(size_t m) const override { return m < pieced_.size() && pieced_[m]; }
  int piece_slots() const override { return int(pieces_.size()); }
  uint64_t piece_bytes() const override { return piece_bytes_; }
  void fetch(size_t m, std::span<const Piece> pieces, std::span<const uint8_t*> where) override;
  StreamStats stats() const;

 private:
  struct Slot {
    Allocation mem;
    size_t module = SIZE_MAX;
    int pending = 0;            // chunks queued or being read
    bool in_use = false;        // between acquire and release
    bool fresh = false;         // prefetched, not yet acquired: not to be evicted
    uint64_t last_use = 0;
    std::exception_ptr error;
    std::vector<TensorView> views;
  };
  struct PieceSlot {
    Allocation mem;
    size_t tensor = SIZE_MAX;   // checkpoint tensor index; SIZE_MAX = empty
    uint64_t begin = 0, bytes = 0, off = 0;  // the piece; `off`: page-aligned file offset read to mem
    uint32_t file = 0;
    int pending = 0;
    bool in_use = false;        // handed out by the current fetch()
    uint64_t last_use = 0;
    std::exception_ptr error;
  };
  // The readers' side (io/chunk_readers.hpp): job tag = slot << 32 | run of the slot's
  // module; a piece slot's jobs have kPieceTag set and the piece slot in the low bits.
  static constexpr uint64_t kPieceTag = 1ull << 63;
  struct Target final : ReadTarget {
    StreamedProvider& p;
    explicit Target(StreamedProvider& provider) : p(provider) {}
    Buffer buffer(const ReadJob& j) override;
    void done(const ReadJob& j, const Buffer& b, uint64_t bytes, double seconds, std::exception_ptr err) override;
    std::string tensor_at(const ReadJob& j, uint64_t at) const override;
  };
  size_t find_slot(size_t m) const;            // SIZE_MAX if m is in no slot
  size_t claim_slot(std::unique_lock<std::mutex>& lk, bool wait);  // a slot to reuse
  void start_read(size_t slot, size_t m);       // under the lock
  const ModuleReads::Run& run_of(const ReadJob& j) const;
  void free_pieces();                           // under the lock: nothing handed out

  std::vector<TensorInfo> tensors_;  // the checkpoint's (names and offsets for errors)
  StreamOptions opts_;
  std::vector<std::vector<TensorView>> info_;  // resident views; streamed ones with data = null
  std::vector<bool> streamed_;
  std::vector<bool> pieced_;                   // streamed, with its routed experts in pieces
  std::vector<std::vector<size_t>> slot_tensor_;  // per module: its tensor k -> index in reads_ (SIZE_MAX: a piece)
  std::vector<PieceSlot> pieces_;
  uint64_t piece_bytes_ = 0;
  std::vector<ModuleReads> reads_;             // per streamed module
  std::vector<std::unique_ptr<ReadFile>> files_;
  std::vector<Slot> slots_;
  uint64_t slot_bytes_ = 0, pool_bytes_ = 0, clock_ = 0;
  StreamStats stats_;

  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  Target target_{*this};
  std::unique_ptr<ChunkReaders> readers_;  // last: stopped first
};

}  // namespace nunchaku::engine
