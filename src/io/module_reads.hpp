// How one module's tensors are read into a buffer of their own (a streaming slot): tensors
// close together in a file form one run, read with one page-aligned request (O_DIRECT
// capable), each run landing at a page-aligned place in the buffer. The buffer size this
// needs is what a streaming slot takes, so plan and the engine size slots with it.
#pragma once

#include <cstdint>
#include <vector>

#include "format/checkpoint.hpp"
#include "model/model.hpp"

namespace nunchaku {

struct ModuleReads {
  struct Run {
    uint32_t file = 0;
    uint64_t off = 0, len = 0;   // page-aligned file range (may extend past the end of the file)
    uint64_t data_end = 0;       // file offset where the run's tensor bytes end (must exist)
    uint64_t dst = 0;            // page-aligned offset in the buffer
    std::vector<size_t> tensors; // checkpoint tensor indices in this run
  };
  std::vector<Run> runs;
  std::vector<uint64_t> tensor_dst;  // parallel to Module::tensors: offset of its bytes in the buffer
  uint64_t bytes = 0;                // buffer size needed (a multiple of the page)
};

// Tensors closer than `gap` bytes in one file share a run (the gap is read too).
ModuleReads plan_module_reads(const Checkpoint& ck, const Module& m, uint64_t gap = 64 * 1024);

}  // namespace nunchaku
