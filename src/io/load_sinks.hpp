// The sinks of the loader's chunk pipeline (load_stages.hpp): how a chunk's bytes reach
// the memory of its module, one kind per destination:
//   HostSink        host memory, pageable or pinned: the reader threads read straight into
//                   place (no staging, O_DIRECT where aligned)
//   CpuConvertSink  host memory with --dtype: read into a staging buffer, converted on the
//                   consumer thread (convert.hpp)
//   CudaSink        GPU memory: staged (pinned buffers), then one copy stream per device
//                   (cuda/loader.hpp) copies, or copies to a scratch and converts
// CPU modules mapped from their file and disk modules have no chunks: the allocation
// stage (the mapping) and the views stage (file mappings of disk modules) land them.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "cuda/loader.hpp"
#include "io/load_stages.hpp"
#include "io/staging.hpp"

namespace nunchaku::load {

// What every sink needs: the plan, the module allocations and the progress counter.
struct SinkContext {
  const Checkpoint& ck;
  const UnitPlan& plan;
  const std::vector<Chunk>& chunks;
  const std::vector<uint8_t*>& module_base;
  StagingRing* ring = nullptr;          // null when no chunk is staged
  std::atomic<uint64_t>& done_bytes;    // bytes landed (progress)
};

// Where chunk c lands in its module's allocation: byte offset, and elements when converted.
struct Landing {
  uint64_t dst_off = 0;
  uint64_t elements = 0;  // converted chunks only
};
Landing landing(const Unit& u, const Chunk& c);

class Sink {
 public:
  explicit Sink(const SinkContext& cx) : cx_(cx) {}
  virtual ~Sink() = default;
  // Unstaged sinks: where the readers put chunk c (congruent to c.off mod kIoPage).
  virtual uint8_t* place(const Chunk& c) const;
  // Staged sinks, on the consumer thread: move buffer s (holding chunk c) on; it returns
  // to the ring now or later. Throws load.cuda on a CUDA failure.
  virtual void land(const Chunk& c, StagingSlot* s);
  // Waits for every landing in flight and returns its buffers to the ring.
  virtual void finish() {}
  double busy_s() const { return busy_s_; }  // consumer time in land()

 protected:
  const SinkContext& cx_;
  double busy_s_ = 0;
};

class HostSink final : public Sink {
 public:
  using Sink::Sink;
  uint8_t* place(const Chunk& c) const override;
};

class CpuConvertSink final : public Sink {
 public:
  using Sink::Sink;
  void land(const Chunk& c, StagingSlot* s) override;
};

// All GPUs: a copy stream per device, one copy in flight at a time (after a buffer's copy
// is enqueued, the previous one is waited for and its buffer given back, so the readers
// fill the other buffers meanwhile).
class CudaSink final : public Sink {
 public:
  // Creates the copy streams of `devices` (each with a conversion scratch of `scratch_bytes`
  // when it is in `converts`). Throws load.out_of_memory (exit 3).
  CudaSink(const SinkContext& cx, const std::vector<int>& devices, const std::map<int, bool>& converts,
           uint64_t scratch_bytes, LoadReport& rep);
  void land(const Chunk& c, StagingSlot* s) override;
  void finish() override;
  void synchronize();  // every copy stream done (throws load.cuda)

 private:
  void retire_oldest();
  std::map<int, std::unique_ptr<cuda::CopyStream>> streams_;
  std::deque<StagingSlot*> inflight_;  // copies enqueued, buffer not yet free
};

// Throws load.cuda (exit 1) naming what failed when !good.
void cuda_check(const Checkpoint& ck, bool good, const std::string& err, const char* what);

}  // namespace nunchaku::load
