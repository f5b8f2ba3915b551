// libFuzzer: format sniffing and open_checkpoint's dispatch. The first byte picks the name
// the rest is written under (.gguf, .safetensors, .bin, .pt, .pth, no extension, or alone
// in a directory that is opened instead); open_checkpoint must return a checkpoint whose
// tensors lie inside their files, or raise nunchaku::Error.
#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "core/error.hpp"
#include "format/open.hpp"
#include "tests/fuzz/fuzz_scratch.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nunchaku;
  if (size == 0) return 0;
  static const char* const kNames[] = {"m.gguf", "m.safetensors", "pytorch_model.bin", "m.pt", "m.pth", "weights"};
  const uint8_t pick = data[0];
  const bool in_dir = pick & 0x80;
  const std::string dir = fuzz::scratch("open");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directory(dir);
  const std::string file = dir + "/" + kNames[(pick & 0x7f) % 6];
  fuzz::put_file(file, data + 1, size - 1);
  try {
    (void)sniff_format(file);
    Checkpoint ck = open_checkpoint(in_dir ? dir : file);
    for (const auto& t : ck.tensors) {
      if (t.file >= ck.files.size()) __builtin_trap();
      const uint64_t bytes = ck.files[t.file].bytes;
      if (t.offset > bytes || t.nbytes > bytes - t.offset) __builtin_trap();
    }
  } catch (const Error&) {
  }
  return 0;
}
