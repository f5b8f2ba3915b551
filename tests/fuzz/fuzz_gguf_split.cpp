// libFuzzer: split-GGUF merging. Input: one byte N (1-3 parts, mod 3), then N-1 lengths
// (4 bytes little-endian each, folded into what is left), then the parts' bytes, written as
// m-0000K-of-0000N.gguf; the first part is opened (which finds and merges the set). A
// merged checkpoint's tensors are unique and lie inside their parts, or open_checkpoint
// raises nunchaku::Error.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>

#include <fmt/format.h>

#include "core/error.hpp"
#include "format/open.hpp"
#include "tests/fuzz/fuzz_scratch.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nunchaku;
  if (size < 1) return 0;
  const int parts = 1 + data[0] % 3;
  size_t at = 1;
  std::vector<size_t> lens;
  for (int k = 0; k + 1 < parts; ++k) {
    uint32_t v = 0;
    for (int i = 0; i < 4 && at < size; ++i) v |= uint32_t(data[at++]) << (8 * i);
    lens.push_back(v);
  }
  const std::string dir = fuzz::scratch("split");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directory(dir);
  for (int k = 0; k < parts; ++k) {
    const size_t left = size - at;
    const size_t n = k + 1 < parts ? lens[size_t(k)] % (left + 1) : left;
    fuzz::put_file(fmt::format("{}/m-{:05d}-of-{:05d}.gguf", dir, k + 1, parts), data + at, n);
    at += n;
  }
  try {
    Checkpoint ck = open_checkpoint(fmt::format("{}/m-00001-of-{:05d}.gguf", dir, parts));
    std::set<std::string> names;
    for (const auto& t : ck.tensors) {
      if (t.file >= ck.files.size() || !names.insert(t.name).second) __builtin_trap();
      const uint64_t bytes = ck.files[t.file].bytes;
      if (t.offset > bytes || t.nbytes > bytes - t.offset) __builtin_trap();
    }
  } catch (const Error&) {
  }
  return 0;
}
