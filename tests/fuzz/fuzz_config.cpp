// libFuzzer: config.json parsing and its consistency checks, then estimate and plan on what
// it describes. The input is the config.json beside a tiny well-formed Llama's weights
// (hidden 8, 1 layer): the config may claim any dimensions, which describe_model must check
// against the tensors (or Error), and estimate/plan must size without overflow.
#include <cstddef>
#include <cstdint>

#include "core/error.hpp"
#include "format/open.hpp"
#include "tests/fuzz/fuzz_plan_math.hpp"
#include "tests/fuzz/fuzz_scratch.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nunchaku;
  if (size == 0) return 0;
  static const std::string dir = [] {
    const std::string d = fuzz::scratch("config");
    fuzz::write_tiny_llama(d, false);
    return d;
  }();
  fuzz::put_file(dir + "/config.json", data + 1, size - 1);
  try {
    Checkpoint ck = open_checkpoint(dir);
    ModelLayout layout = describe_model(ck);
    fuzz::estimate_and_plan(ck, layout, data[0]);
  } catch (const Error&) {
  }
  return 0;
}
