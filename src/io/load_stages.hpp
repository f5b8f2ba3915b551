// The stages of load_checkpoint (loader.hpp), each a function of what the one before made:
//   plan_units        ModelLayout + placement -> where every tensor goes in its module's
//                     allocation, the file ranges ("units") to read, mapped CPU modules
//   allocate_modules  one allocation (or populated file mapping) per module, in module order
//   cut_chunks        units -> reads of at most one staging buffer, in file order, each with
//                     the Sink kind that lands it (load_sinks.hpp)
//   run_pipeline      reader threads (chunk_readers.hpp) + the sinks (load_pipeline.cpp)
//   build_views       a TensorView per tensor; disk modules become views of file mappings
//   verify_store      --verify: every tensor checksummed against the file
// Internal to src/io (and its tests); load_checkpoint is the interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "format/checkpoint.hpp"
#include "io/loader.hpp"
#include "io/tensor_reader.hpp"

namespace nunchaku::load {

constexpr uint64_t kRunGap = 4096;  // tensors closer than this in a file share one run (padding is read too)

// A contiguous file range with one destination: a run of unconverted tensors, or one
// converted tensor.
struct Unit {
  uint32_t file = 0;
  uint64_t off = 0, len = 0;       // file range
  size_t module = 0;
  uint64_t dst_off = 0;            // offset in the module's allocation
  bool convert = false;
  DType from = DType::F32, to = DType::F32;
  std::vector<size_t> tensors;     // checkpoint tensor indices in this range
};

// Where a tensor lands in its module's allocation (modules that are copied).
struct TensorSlot {
  uint64_t off = 0;
  DType dtype = DType::F32;
  uint64_t nbytes = 0;
};

// A CPU module served by a populated read-only mapping of the file range covering its tensors.
struct MapRange {
  bool on = false;
  uint32_t file = 0;
  uint64_t off = 0, len = 0;       // off page-aligned
};

// Stage 0: tensors the grouping left out become one extra module "(ungrouped)" on the CPU
// (so nothing is dropped, with a note); then check_placement (Error plan.*).
struct Placed {
  ModelLayout layout;
  Placement placement;
  std::vector<std::string> notes;
  std::vector<size_t> cpu_read;  // modules only the CPU reads (a GPU run's mixtures of experts): mapped, never pinned
};
Placed complete_placement(const Checkpoint& ck, const ModelLayout& layout, const Placement& placement);

struct UnitPlan {
  std::vector<Device> module_dev;  // parallel to layout.modules
  std::vector<uint64_t> module_bytes;  // allocation size (0: disk or mapped)
  std::vector<MapRange> mapped;
  std::vector<TensorSlot> slot_of;     // per checkpoint tensor
  std::vector<Unit> units;             // in file order (file, offset)
  uint64_t host_module_bytes = 0;      // CPU modules that are allocated (not mapped)
  size_t converted_tensors = 0;
};

// Stage 1. `dtype`: --dtype (F16/BF16 targets of convert.hpp). `map_host`: CPU modules
// that need no conversion and lie in one file may be mapped (LoadOptions::map_host, and no
// pinning). Throws load.bad_layout (a module names a tensor or file the checkpoint lacks).
// `map_cpu_read`: Placed::cpu_read modules may be mapped even when other host modules are pinned.
UnitPlan plan_units(const Checkpoint& ck, const Placed& placed, std::optional<DType> dtype, bool map_host,
                    bool map_cpu_read = false);

// How a chunk's bytes land (load_sinks.hpp): read straight into host memory, read into a
// staging buffer and converted on the CPU, or staged and copied (or converted) to a GPU.
enum class SinkKind { Host, CpuConvert, Cuda };
SinkKind sink_kind(const Unit& u, Device module_device);

struct Chunk {
  size_t unit = 0;
  uint64_t off = 0, len = 0;       // file range (inside the unit's)
  SinkKind sink = SinkKind::Host;
  bool staged() const { return sink != SinkKind::Host; }
};

// Stage 3a: every unit cut into chunks of at most `cap` bytes (a multiple of kIoPage), in
// unit order.
std::vector<Chunk> cut_chunks(const UnitPlan& p, uint64_t cap);

// Stage 2: one allocation per copied module (pinned for CPU modules when `pin`), a populated
// read-only mapping per mapped module, nothing for disk ones; in module order, all before
// any read. Adds the modules to `store` and returns each one's base (null: disk).
// Throws load.out_of_memory (exit 3, naming the module; everything allocated is released
// with the store), load.short_read (a mapped file truncated since it was indexed).
std::vector<uint8_t*> allocate_modules(const Checkpoint& ck, const ModelLayout& layout, const UnitPlan& p, bool pin,
                                       WeightStore& store, LoadReport& rep);

// Stage 3b: reads every chunk (reader threads, chunk_readers.hpp) and lands it through its
// sink (load_sinks.hpp); `gpu_used_before` (device -> bytes in use before the load) names
// the GPUs, whose memory is measured at the end while the scratch buffers still exist.
// Fills the report's byte counts, phase times and GPU memory. Throws what the readers or
// sinks threw (the first), load.interrupted (exit 130) on o.cancel.
void run_pipeline(const Checkpoint& ck, const UnitPlan& p, const std::vector<Chunk>& chunks,
                  const std::vector<uint8_t*>& module_base, const std::vector<std::unique_ptr<ReadFile>>& files,
                  const std::map<int, uint64_t>& gpu_used_before, uint64_t chunk_cap, const LoadOptions& o,
                  std::chrono::steady_clock::time_point t_start, LoadReport& rep);

// Stage 4: a TensorView per tensor of every module (disk modules: views of whole-file
// read-only mappings, kept by the store). Throws load.short_read (a file shorter than a
// disk tensor's end).
void build_views(const Checkpoint& ck, const ModelLayout& layout, const UnitPlan& p,
                 const std::vector<uint8_t*>& module_base, WeightStore& store, LoadReport& rep);

// Stage 5 (--verify): each tensor's landed bytes against the file's (after the CPU twin's
// conversion for converted ones), by checksum64 in steps of at most `step_cap`. Opens the
// files only disk modules live in. Throws load.verify_mismatch (exit 1), load.interrupted.
void verify_store(const Checkpoint& ck, const WeightStore& store, std::vector<std::unique_ptr<ReadFile>>& files,
                  uint64_t step_cap, const LoadOptions& o, LoadReport& rep);

Exit interrupted_exit();  // 130, the shell's 128 + SIGINT

// The tensor of `u` covering file offset `at` (for error messages).
std::string tensor_at(const Checkpoint& ck, const Unit& u, uint64_t at);

}  // namespace nunchaku::load
