// The emulator's kernel executor (exec.cpp), used by the runtime's launch.
#pragma once

#include <functional>
#include <string>

#include "cuda/emu/cuda_emu.hpp"

namespace nk_emu {

// Runs `body` as every thread of every block of the grid (blocks in order, x fastest) and
// returns "" or the first fault (with the block and thread it happened in).
std::string run_grid(dim3 grid, dim3 block, const std::function<void()>& body);

}  // namespace nk_emu
