// `load`: stream a checkpoint into memory by a placement, layer by layer.
//
// Pipeline (docs/load.md has the picture; io/load_stages.hpp the stages as functions):
//  1. Layout: per module one allocation; tensors that stay in their file dtype are laid
//     out in "runs" that keep their relative file positions (a run starts at an address
//     congruent to its file offset mod 4096, so runs read straight into place, and
//     O_DIRECT works); converted tensors get their own 256-aligned slot.
//  2. All allocations are made first, in module order, so a model that does not fit
//     fails before any byte is read, with everything released.
//  3. Work is cut into chunks (<= staging size) in file order. Reader threads take chunks
//     in order: a chunk for host memory without conversion is pread straight into its
//     destination; any other chunk (GPU, or --dtype conversion) is read into a buffer of
//     the staging ring, and the calling thread copies it on (cudaMemcpyAsync on a copy
//     stream, conversion kernel, or CPU conversion) while the readers read ahead.
//  4. Disk-offloaded modules are mmap views; nothing is read for them.
// The checkpoint files are opened O_RDONLY and never written.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "format/checkpoint.hpp"
#include "io/placement.hpp"
#include "io/weight_store.hpp"
#include "model/model.hpp"

namespace nunchaku {

struct LoadProgress {
  uint64_t done_bytes = 0;
  uint64_t total_bytes = 0;
  double seconds = 0;
};

struct LoadOptions {
  Placement placement;                 // must place every module (check_placement)
  std::optional<DType> dtype;          // F16 or BF16: convert F32/F16/BF16 tensors (not disk ones)
  uint64_t staging_bytes = 64ull << 20;  // one staging buffer; also the largest single read
  int staging_buffers = 4;
  int reader_threads = 0;              // 0 = min(4, hardware threads)
  bool direct_io = false;              // O_DIRECT reads where alignment allows
  bool pin_host = true;                // host modules pinned when CUDA is used (see docs/load.md)
  // CPU modules that need no conversion and lie in one file become populated read-only
  // private mappings of the file (the page cache's pages, no copy), as llama.cpp's mmap
  // loading; false (--copy) makes private copies. Ignored for pinned host modules.
  bool map_host = true;
  bool verify = false;                 // checksum every tensor after it lands against the file
  const std::atomic<bool>* cancel = nullptr;  // set (e.g. by SIGINT) to stop: Error load.interrupted
  std::function<void(const LoadProgress&)> progress;  // from the calling thread, ~10 times a second
};

struct GpuMemory {
  uint64_t predicted = 0;  // module allocations + conversion scratch on this device
  uint64_t measured = 0;   // rise of (total - free) from cudaMemGetInfo, at the end of the load
};

struct LoadReport {
  std::map<Device, uint64_t> bytes_per_device;  // tensor bytes as stored (disk: left in the file)
  std::map<std::string, uint64_t> allocated;    // memory kind -> bytes allocated for modules
  uint64_t total_bytes = 0;     // bytes the load had to read
  uint64_t bytes_read = 0;      // bytes read from files (O_DIRECT alignment included)
  uint64_t bytes_direct = 0;    // read straight into their destination
  uint64_t bytes_staged = 0;    // went through the staging ring
  size_t tensors = 0, converted_tensors = 0, disk_tensors = 0;
  size_t mapped_modules = 0;    // CPU modules served by populated file mappings (map_host)
  uint64_t bytes_mapped = 0;
  size_t chunks = 0;
  int reader_threads = 0;
  int staging_buffers = 0;      // 0 when nothing needed staging
  uint64_t staging_bytes = 0;
  bool direct_io = false;
  // Seconds. Wall: whole load incl. allocation; phases are busy time summed over the threads
  // doing them (read: reader threads in pread; copy: the consumer enqueuing H2D copies and
  // waiting for them, GPU conversion included; convert: CPU conversion).
  double wall_s = 0, alloc_s = 0, read_s = 0, copy_s = 0, convert_s = 0, verify_s = 0;
  uint64_t host_peak_bytes = 0;  // module allocations + staging buffers in host memory
  uint64_t max_rss_bytes = 0;    // getrusage at the end
  std::map<Device, GpuMemory> gpu;
  size_t verified_tensors = 0;
  std::vector<std::string> notes;
  double gb_per_s() const { return wall_s > 0 ? double(total_bytes) / wall_s / 1e9 : 0; }
};

struct LoadResult {
  WeightStore store;
  LoadReport report;
};

// Throws Error: plan.* (placement), load.no_cuda (CUDA module without a device, exit 2),
// load.out_of_memory (exit 3, nothing left allocated), load.short_read / io.* (exit 2,
// naming tensor and offset), load.verify_mismatch (exit 1), load.interrupted (exit 130).
LoadResult load_checkpoint(const Checkpoint& ck, const ModelLayout& layout, const LoadOptions& opts);

// 64-bit checksum used by --verify (fast, not cryptographic).
uint64_t checksum64(const void* data, uint64_t n, uint64_t seed = 0);

}  // namespace nunchaku
