#include "core/thread_memory.hpp"

#include <link.h>

namespace nunchaku {
namespace {

int add_tls_segment(dl_phdr_info* info, size_t, void* sum) {
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_TLS) continue;
    const uint64_t align = ph.p_align > 1 ? ph.p_align : 1;
    *static_cast<uint64_t*>(sum) += (uint64_t(ph.p_memsz) + align - 1) / align * align;
  }
  return 0;
}

}  // namespace

uint64_t static_tls_bytes() {
  static const uint64_t bytes = [] {
    uint64_t sum = 0;
    dl_iterate_phdr(add_tls_segment, &sum);
    return sum;
  }();
  return bytes;
}

}  // namespace nunchaku
