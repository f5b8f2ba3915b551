// libFuzzer: JSON serialization of tensor names (issue 41, defect 3). Every name a reader
// accepts (GGUF and safetensors headers from the input), and the input itself as a name,
// must serialize through dump_json to valid JSON and parse back to utf8_replace_invalid of
// the name, as a value and as an object key.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/source.hpp"
#include "core/text.hpp"
#include "format/readers.hpp"

namespace {
void round_trip(const std::string& name) {
  const nlohmann::json doc = {{"name", name}, {"map", {{name, "cpu"}}}};
  for (int indent : {-1, 2})
    for (bool ascii : {false, true}) {
      nlohmann::json back;
      try {
        back = nlohmann::json::parse(nunchaku::dump_json(doc, indent, ascii));
      } catch (const nlohmann::json::exception&) {
        __builtin_trap();  // not valid JSON
      }
      const std::string want = nunchaku::utf8_replace_invalid(name);
      if (back["name"] != want || !back["map"].contains(want) || back["map"].size() != 1) __builtin_trap();
    }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nunchaku;
  round_trip(std::string(reinterpret_cast<const char*>(data), std::min<size_t>(size, 4096)));
  for (bool gguf : {true, false}) {
    MemorySource src(std::span<const uint8_t>(data, size), gguf ? "fuzz.gguf" : "fuzz.safetensors");
    try {
      Checkpoint ck = gguf ? read_gguf(src) : read_safetensors(src);
      for (const auto& t : ck.tensors) round_trip(t.name);
    } catch (const Error&) {
    }
  }
  return 0;
}
