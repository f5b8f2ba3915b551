// The emulator's kernel executor (exec.cpp), used by the runtime's launch.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "cuda/emu/cuda_emu.hpp"

namespace nk_emu {

// NUNCHAKU_CUDA_EMU_SEED (default 1): the seed of the emulator's scheduling choices.
uint64_t emu_seed();
// The next number of the splitmix64 sequence in state x.
inline uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Runs `body` as every thread of every block of the grid (blocks in order, x fastest) and
// returns "" or the first fault (with the block and thread it happened in).
std::string run_grid(dim3 grid, dim3 block, const std::function<void()>& body);

}  // namespace nk_emu
