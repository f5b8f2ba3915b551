// Process-wide byte counters of the io layer, readable from any thread at any time (the
// samples of `--trace`, io/memory_sampler.hpp). Relaxed atomics: each value is exact when
// read, with no ordering against other memory.
#pragma once

#include <cstdint>

namespace nunchaku {

// Bytes allocate() (io/weight_store.hpp) holds now in pinned host memory, and in device
// memory on all devices. Defined in weight_store.cpp.
uint64_t live_pinned_bytes();
uint64_t live_device_bytes();

// Bytes read_range() (io/tensor_reader.hpp, the one read path of loads and weight streams)
// has read in this process so far, page rounding included. Defined in tensor_reader.cpp.
uint64_t file_bytes_read();

}  // namespace nunchaku
