// Memory every thread of this process costs before it does anything: its static
// thread-local storage. glibc gives each new thread one block holding every loaded
// object's thread_local variables and zero-fills the uninitialized ones at thread start
// (_dl_allocate_tls_init), so all of it is resident for as long as the thread (or its
// cached stack) lives, whether the thread touches the variables or not. For nunchaku this
// is mostly the CPU kernels' GEMM accumulators (one per compiled ISA, engine/kernels_simd.hpp).
#pragma once

#include <cstdint>

namespace nunchaku {

// Σ over the loaded objects (the executable and its shared libraries) of their PT_TLS
// segment's memory size, each rounded up to its alignment: what the linker laid out, so a
// change to any thread_local (a kernel's tile constants, a new variable) is followed without
// a number written twice. Computed once per process.
uint64_t static_tls_bytes();

}  // namespace nunchaku
