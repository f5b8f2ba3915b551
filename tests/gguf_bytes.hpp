// Little-endian GGUF bytes written field by field, for tests that build a file inline.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace nunchaku::test {

// Little-endian GGUF bytes, field by field.
struct GgufBytes {
  std::vector<uint8_t> b;
  template <class T>
  GgufBytes& num(T v) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof v);
    b.insert(b.end(), tmp, tmp + sizeof v);
    return *this;
  }
  GgufBytes& u32(uint32_t v) { return num(v); }
  GgufBytes& u64(uint64_t v) { return num(v); }
  GgufBytes& raw(std::string_view s) {
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  GgufBytes& str(std::string_view s) { return u64(s.size()).raw(s); }
  GgufBytes& kv_u32(std::string_view k, uint32_t v) { return str(k).u32(4).u32(v); }
  GgufBytes& kv_str(std::string_view k, std::string_view v) { return str(k).u32(8).str(v); }
  GgufBytes& tensor(std::string_view name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (auto d : ne) u64(d);
    return u32(type).u64(offset);
  }
  GgufBytes& pad_to(size_t align) {
    while (b.size() % align) b.push_back(0);
    return *this;
  }
  GgufBytes& zeros(size_t n) {
    b.insert(b.end(), n, 0);
    return *this;
  }
};

}  // namespace nunchaku::test
