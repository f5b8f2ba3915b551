// Built when the CUDA component is off: the copy ring cannot start ("built without CUDA").
#include "cuda/copy_ring.hpp"
#include "cuda/stub.hpp"

namespace nunchaku::cuda {
CopyRing::~CopyRing() = default;
bool CopyRing::init(int, void*, int, uint64_t, std::string* err) { return no_cuda(err); }
bool CopyRing::begin(int, std::string* err) { return no_cuda(err); }
bool CopyRing::copy(int, uint64_t, const void*, uint64_t, std::string* err) { return no_cuda(err); }
bool CopyRing::filled(int, std::string* err) { return no_cuda(err); }
bool CopyRing::use(int, std::string* err) { return no_cuda(err); }
bool CopyRing::done(int, std::string* err) { return no_cuda(err); }
bool CopyRing::wait_filled(int, std::string* err) { return no_cuda(err); }
bool register_host(void*, uint64_t, std::string* err) { return no_cuda(err); }
void unregister_host(void*) {}

}  // namespace nunchaku::cuda
