#include "core/source.hpp"

#include <cstring>

#include "core/error.hpp"

namespace nunchaku {

std::vector<uint8_t> Source::read_vec(uint64_t offset, size_t n) const {
  if (offset > size() || n > size() - offset)
    throw Error("io.short_read",
                "wanted " + std::to_string(n) + " bytes but only " +
                    std::to_string(offset > size() ? 0 : size() - offset) + " remain",
                {.file = path(), .offset = offset, .hint = "the file is truncated"});
  std::vector<uint8_t> v(n);
  if (n) read_at(offset, v.data(), n);
  return v;
}

void MemorySource::read_at(uint64_t offset, void* buf, size_t n) const {
  if (offset > bytes_.size() || n > bytes_.size() - offset)
    throw Error("io.short_read",
                "wanted " + std::to_string(n) + " bytes but the file has " + std::to_string(bytes_.size()),
                {.file = name_, .offset = offset, .hint = "the file is truncated"});
  if (n) std::memcpy(buf, bytes_.data() + offset, n);
}

}  // namespace nunchaku
