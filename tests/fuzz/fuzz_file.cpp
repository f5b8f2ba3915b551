// libFuzzer: the file/mmap path (core/file). The input is written to a scratch file; its
// first bytes choose ranges that File::read_at, read_some_at and map_read_only then take.
// Every range inside the file must give exactly the file's bytes, every range outside it
// Error io.short_read (never a crash, a SIGBUS or another exception).
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.hpp"
#include "core/file.hpp"
#include "tests/fuzz/fuzz_scratch.hpp"

namespace {
uint64_t take(const uint8_t*& p, const uint8_t* end) {
  uint64_t v = 0;
  for (int i = 0; i < 8 && p < end; ++i) v |= uint64_t(*p++) << (8 * i);
  return v;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nunchaku;
  const std::string path = fuzz::scratch("file.bin");
  fuzz::put_file(path, data, size);
  File f = File::open_read_only(path);
  if (f.size() != size) __builtin_trap();
  const uint8_t* p = data;
  const uint8_t* end = data + std::min<size_t>(size, 48);
  for (int round = 0; round < 3; ++round) {
    // Offsets near the end and past it are the interesting ones: fold to a small range.
    const uint64_t off = take(p, end) % (size + 64), len = take(p, end) % (size + 64);
    std::vector<uint8_t> buf(len);
    const bool inside = off <= size && len <= size - off;
    try {
      f.read_at(off, buf.data(), len);
      if (!inside || (len && std::memcmp(buf.data(), data + off, len) != 0)) __builtin_trap();
    } catch (const Error& e) {
      if (inside || e.code() != "io.short_read") __builtin_trap();
    }
    const size_t got = f.read_some_at(off, buf.data(), len);
    if (got != (off >= size ? 0 : std::min<uint64_t>(len, size - off))) __builtin_trap();
    const uint64_t page_off = off & ~uint64_t(4095);
    const uint64_t map_len = len + (off - page_off);
    const bool map_inside = page_off <= size && map_len <= size - page_off;
    try {
      void* m = map_read_only(f, page_off, size_t(map_len), (round & 1) != 0);
      if (!map_inside) __builtin_trap();
      if (map_len && std::memcmp(m, data + page_off, map_len) != 0) __builtin_trap();
      unmap_read_only(m, size_t(map_len));
    } catch (const Error& e) {
      if (map_inside && e.code() != "io.mmap") __builtin_trap();
    }
  }
  check_mapped_reads();  // nothing changed in place, nothing faulted
  return 0;
}
