// libFuzzer target for the model description over GGUF bytes: the GGUF reader, then
// spec_from_gguf and the model validation of describe_model. Any input must either
// describe a model or raise nunchaku::Error.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.hpp"
#include "format/readers.hpp"
#include "core/source.hpp"
#include "model/model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nunchaku::MemorySource src(std::span<const uint8_t>(data, size), "fuzz.gguf");
  try {
    nunchaku::Checkpoint ck = nunchaku::read_gguf(src);
    nunchaku::ModelLayout layout = nunchaku::describe_model(ck);
    if (layout.spec && layout.spec->num_kv_heads > 0 && layout.spec->num_heads % layout.spec->num_kv_heads != 0 &&
        layout.spec->layer_kv_heads.empty())
      __builtin_trap();  // the validation lets no inconsistent head count through
  } catch (const nunchaku::Error&) {
  }
  return 0;
}
