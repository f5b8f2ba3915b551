// libFuzzer: arbitrary bytes as a torch.save file (zip, legacy or tar). Only
// nunchaku::Error may escape read_pytorch; anything else (crash, sanitizer
// report, other exception, leak, hang) is a finding.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.hpp"
#include "format/readers.hpp"
#include "core/source.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nunchaku::MemorySource src(std::span(data, size), "fuzz.pt");
  try {
    nunchaku::Checkpoint ck = nunchaku::read_pytorch(src);
    for (const auto& t : ck.tensors)  // the contract: every tensor lies inside the file
      if (t.offset > size || t.nbytes > size - t.offset) __builtin_trap();
  } catch (const nunchaku::Error&) {
  }
  return 0;
}
