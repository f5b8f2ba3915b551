// What the emulator's cuBLAS (cublas.cpp) needs from its runtime (runtime.cpp).
#pragma once

#include <functional>
#include <mutex>
#include <string>

#include "cuda/emu/cuda_emu.hpp"

namespace nk_emu {

// The one lock every API call holds (re-entrant: draining a stream runs ops that lock again).
std::recursive_mutex& api_lock();
// Whether [p, p + bytes) lies inside one device allocation.
bool in_device(const void* p, size_t bytes);
// What an enqueued operation is, for the schedule (runtime.cpp): a kernel, a copy or memset,
// or an event record/wait.
enum class Work { Kernel, Copy, Marker };
// Enqueues `op` on stream s (nullptr: the legacy default stream), in stream order.
void enqueue(cudaStream_t s, std::function<void()> op, Work w);
// A fault a GPU would report as a sticky error (illegal address, failed kernel): printed to
// stderr, and every later call returns `e` until take_fault().
void fault(cudaError_t e, const std::string& what);
// The sticky error, cudaSuccess when none.
cudaError_t sticky();

}  // namespace nk_emu
