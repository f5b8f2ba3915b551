// libFuzzer: arbitrary bytes as one pickle for the safe unpickler. Only
// nunchaku::Error may escape.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.hpp"
#include "format/pickle.hpp"
#include "core/source.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nunchaku::MemorySource src(std::span(data, size), "fuzz.pkl");
  try {
    nunchaku::pickle::Unpickler up(src, 0, size);
    up.load();
    if (up.position() > size) __builtin_trap();
  } catch (const nunchaku::Error&) {
  }
  return 0;
}
