// Built when the CUDA component is off: every entry point fails with "built without CUDA".
#include "cuda/loader.hpp"
#include "cuda/stub.hpp"

namespace nunchaku::cuda {
bool loader_available(std::string* why) { return no_cuda(why); }
bool mem_info(int, MemInfo&, std::string* err) { return no_cuda(err); }
void* device_alloc(int, uint64_t, std::string* err) { no_cuda(err); return nullptr; }
void device_free(int, void*) {}
void* pinned_alloc(uint64_t, std::string* err) { no_cuda(err); return nullptr; }
void pinned_free(void*) {}

CopyStream::~CopyStream() = default;
bool CopyStream::init(int, int, uint64_t, std::string* err) { return no_cuda(err); }
bool CopyStream::h2d(void*, const void*, uint64_t, std::string* err) { return no_cuda(err); }
bool CopyStream::h2d_convert(void*, const void*, uint64_t, ConvType, ConvType, std::string* err) { return no_cuda(err); }
bool CopyStream::record(int, std::string* err) { return no_cuda(err); }
bool CopyStream::wait(int, std::string* err) { return no_cuda(err); }
bool CopyStream::synchronize(std::string* err) { return no_cuda(err); }
void CopyStream::reset() {}

bool d2h(int, void*, const void*, uint64_t, std::string* err) { return no_cuda(err); }
bool convert_on_device(int, ConvType, ConvType, const void*, void*, uint64_t, std::string* err) { return no_cuda(err); }
double measure_h2d_peak(int, uint64_t, int, std::string* err) { no_cuda(err); return 0; }

}  // namespace nunchaku::cuda
