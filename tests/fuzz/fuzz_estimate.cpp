// libFuzzer: estimate and plan arithmetic on hostile dimensions from GGUF metadata (block
// counts, head counts, context lengths, expert counts as the file claims them). The first
// byte picks the workload and budgets; the rest is the GGUF.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.hpp"
#include "core/source.hpp"
#include "format/readers.hpp"
#include "tests/fuzz/fuzz_plan_math.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nunchaku;
  if (size == 0) return 0;
  MemorySource src(std::span<const uint8_t>(data + 1, size - 1), "fuzz.gguf");
  try {
    Checkpoint ck = read_gguf(src);
    ModelLayout layout = describe_model(ck);
    fuzz::estimate_and_plan(ck, layout, data[0]);
  } catch (const Error&) {
  }
  return 0;
}
