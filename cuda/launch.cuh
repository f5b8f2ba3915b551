// One spelling for kernel launches in cuda/*.cu: NK_LAUNCH(kernel, grid, block, smem, stream,
// args...) is `kernel<<<grid, block, smem, stream>>>(args...)` under nvcc, and a launch on the
// CPU emulator (cuda/emu/cuda_emu.hpp) when the same source is compiled as C++ for the
// emulator tests. Launch errors are read with cudaGetLastError() after it, as with <<<>>>.
#pragma once

#if defined(__CUDACC__)
#define NK_LAUNCH(kernel, grid, block, smem, stream, ...) kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)
#else
#include "cuda/emu/cuda_emu.hpp"
#define NK_LAUNCH(kernel, grid, block, smem, stream, ...) \
  ::nk_emu::launch_kernel(#kernel, kernel, grid, block, smem, stream, __VA_ARGS__)
#endif
