// libFuzzer target for the safetensors header reader. Any input must either
// index or raise nunchaku::Error; anything else (a crash, a sanitizer report,
// another exception type) is a finding.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.hpp"
#include "format/readers.hpp"
#include "core/source.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nunchaku::MemorySource src(std::span<const uint8_t>(data, size), "fuzz.safetensors");
  try {
    nunchaku::Checkpoint ck = nunchaku::read_safetensors(src);
    // The contract every consumer relies on: each tensor lies inside the file.
    for (const auto& t : ck.tensors)
      if (t.offset > src.size() || t.nbytes > src.size() - t.offset) __builtin_trap();
  } catch (const nunchaku::Error&) {
  }
  return 0;
}
