// libFuzzer: `nunchaku trace FILE --svg OUT` on hostile trace JSON (core/timeline_picture.hpp).
// Whatever the document, timeline_svg returns an SVG or throws nunchaku::Error (exit 2),
// never nlohmann's exceptions (exit 1) nor undefined behaviour; every coordinate it writes is
// a finite number (no "nan" or "inf" attribute). The bytes are parsed as cli/trace.cpp does,
// without exceptions: what is not JSON is cli/trace.cpp's trace.json error.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/timeline_picture.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json doc = nlohmann::json::parse(data, data + size, nullptr, false);
  if (doc.is_discarded()) return 0;
  std::string svg;
  try {
    svg = nunchaku::timeline_svg(doc, "fuzz.json");
  } catch (const nunchaku::Error&) {
    return 0;
  }
  if (svg.rfind("<svg", 0) != 0 && svg.rfind("<?xml", 0) != 0) __builtin_trap();
  for (const char* bad : {"=\"nan", "=\"-nan", "=\"inf", "=\"-inf"})
    if (svg.find(bad) != std::string::npos) __builtin_trap();
  return 0;
}
