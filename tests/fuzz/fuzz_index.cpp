// libFuzzer: index.json reading and shard merging. The input is model.safetensors.index.json
// beside two well-formed shards (a.safetensors: x, y; b.safetensors: z); open_checkpoint of
// the directory and of the index must give every tensor in the shard the index names, or
// raise nunchaku::Error.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "core/error.hpp"
#include "format/open.hpp"
#include "tests/fuzz/fuzz_scratch.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nunchaku;
  static const std::string dir = [] {
    const std::string d = fuzz::scratch("index");
    std::filesystem::create_directories(d);
    fuzz::put_file(d + "/a.safetensors", fuzz::safetensors_bytes({{"x", {2, 2}}, {"y", {3}}}));
    fuzz::put_file(d + "/b.safetensors", fuzz::safetensors_bytes({{"z", {4}}}));
    return d;
  }();
  const std::string index = dir + "/model.safetensors.index.json";
  fuzz::put_file(index, data, size);
  for (const std::string& path : {index, dir}) {
    try {
      Checkpoint ck = open_checkpoint(path);
      std::set<std::string> names;
      for (const auto& t : ck.tensors) {
        if (t.file >= ck.files.size()) __builtin_trap();
        if (!names.insert(t.name).second) __builtin_trap();  // merged shards never repeat a tensor
        const uint64_t bytes = ck.files[t.file].bytes;
        if (t.offset > bytes || t.nbytes > bytes - t.offset) __builtin_trap();
      }
    } catch (const Error&) {
    }
  }
  return 0;
}
