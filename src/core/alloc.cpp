#include "core/alloc.hpp"

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NUNCHAKU_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define NUNCHAKU_ASAN 1
#endif

namespace nunchaku {
namespace {
std::atomic<uint64_t> g_failed_bytes{0};
}  // namespace

uint64_t failed_allocation_bytes() { return g_failed_bytes.load(std::memory_order_relaxed); }

}  // namespace nunchaku

#ifndef NUNCHAKU_ASAN
// The replaceable allocation functions, as the standard library defines them (malloc,
// the new-handler loop, bad_alloc), plus the record of the refused size. The nothrow and
// array forms of the library call these.
namespace {
void* allocate(std::size_t n, std::size_t align) {
  if (n == 0) n = 1;
  for (;;) {
    void* p = nullptr;
    if (align <= alignof(std::max_align_t)) p = std::malloc(n);
    else if (::posix_memalign(&p, align, n) != 0) p = nullptr;
    if (p) return p;
    std::new_handler h = std::get_new_handler();
    if (!h) {
      nunchaku::g_failed_bytes.store(n, std::memory_order_relaxed);
      throw std::bad_alloc();
    }
    h();
  }
}
}  // namespace

void* operator new(std::size_t n) { return allocate(n, 0); }
void* operator new[](std::size_t n) { return allocate(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return allocate(n, std::size_t(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return allocate(n, std::size_t(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#endif
