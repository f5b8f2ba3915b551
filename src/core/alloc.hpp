// Real out-of-memory reporting: the program's operator new (alloc.cpp) records the size of
// a request the system refused before throwing std::bad_alloc, so the one catch in main
// can say what was wanted ("out of host memory: 1.00 TiB wanted"). Under AddressSanitizer
// the sanitizer's own operator new stays in place and no size is recorded.
#pragma once

#include <cstdint>

namespace nunchaku {

// Bytes of the latest allocation through operator new that failed; 0 when none did (or
// when the sanitizer's allocator is in use).
uint64_t failed_allocation_bytes();

}  // namespace nunchaku
