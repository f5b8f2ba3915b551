// libFuzzer: run --plan / load --plan JSON input. parse_plan must return a placement or raise
// nunchaku::Error; check_placement against a tiny Llama's layout must accept only a
// placement that puts every module on a device, or raise nunchaku::Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "format/open.hpp"
#include "io/placement.hpp"
#include "model/model.hpp"
#include "tests/fuzz/fuzz_scratch.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nunchaku;
  static const ModelLayout layout = [] {
    const std::string d = fuzz::scratch("plan-model");
    fuzz::write_tiny_llama(d);
    return describe_model(open_checkpoint(d));
  }();
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    Placement p = parse_plan(text, "fuzz-plan.json");
    check_placement(p, layout);
    for (const auto& m : layout.modules)
      if (!p.modules.count(m.name)) __builtin_trap();  // accepted, so every module is placed
  } catch (const Error&) {
  }
  return 0;
}
