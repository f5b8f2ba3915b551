// libFuzzer: arbitrary bytes as a GGUF file through read_gguf_file and
// read_gguf. Only nunchaku::Error may escape; anything else (crash, sanitizer
// report, other exception, an out-of-memory from an unchecked count, a hang)
// is a finding. The metadata is dumped too, since JSON output rejects
// invalid UTF-8 that a file's strings may hold.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.hpp"
#include "format/gguf.hpp"
#include "format/readers.hpp"
#include "core/source.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nunchaku::MemorySource src(std::span(data, size), "fuzz.gguf");
  try {
    nunchaku::GgufFile g = nunchaku::read_gguf_file(src);
    for (const auto& t : g.tensors)
      if (t.offset < g.data_offset || t.offset + t.nbytes > size) __builtin_trap();
  } catch (const nunchaku::Error&) {
  }
  try {
    nunchaku::Checkpoint ck = nunchaku::read_gguf(src);
    (void)ck.metadata.dump();
    for (const auto& t : ck.tensors)
      if (t.offset + t.nbytes > size) __builtin_trap();
  } catch (const nunchaku::Error&) {
  }
  return 0;
}
