// libFuzzer: the loader. The input (a GGUF when it starts with "GGUF", else safetensors)
// is written to a scratch file, opened, described and loaded onto the CPU (copies and
// mappings, one and two reader threads, with --verify): load_checkpoint must land every
// byte or raise nunchaku::Error. Inputs whose tensors claim more than 16 MiB are skipped
// (the bytes must exist in the file anyway; this bounds the memory a run takes).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/error.hpp"
#include "format/open.hpp"
#include "io/loader.hpp"
#include "io/placement.hpp"
#include "model/model.hpp"
#include "tests/fuzz/fuzz_scratch.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nunchaku;
  if (size < 1) return 0;
  const bool gguf = size >= 4 && std::memcmp(data, "GGUF", 4) == 0;
  const std::string path = fuzz::scratch(gguf ? "load.gguf" : "load.safetensors");
  fuzz::put_file(path, data, size);
  try {
    Checkpoint ck = open_checkpoint(path);
    uint64_t total = 0;
    for (const auto& t : ck.tensors) total += t.nbytes;
    if (total > (16u << 20)) return 0;
    ModelLayout layout = describe_model(ck);
    LoadOptions o;
    o.placement = place_all(layout, Device{Device::Kind::Cpu, 0});
    o.map_host = (data[size - 1] & 1) != 0;
    o.reader_threads = 1 + (data[size - 1] >> 1 & 1);
    o.verify = true;
    o.staging_bytes = 1 << 16;
    LoadResult r = load_checkpoint(ck, layout, o);
    (void)r;
  } catch (const Error&) {
  }
  return 0;
}
