// Emulator shim (cuda/emu/cuda_emu.hpp): only the emulator targets have this directory on their include path.
#pragma once
#include "cuda/emu/cuda_emu.hpp"
