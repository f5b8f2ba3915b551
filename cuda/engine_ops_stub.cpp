// Built when the CUDA component is off: every entry point of engine_ops.hpp fails with
// "built without CUDA" (the CUDA backend then refuses to start with that reason).
#include "cuda/engine_ops.hpp"
#include "cuda/stub.hpp"

namespace nunchaku::cuda {
Context::~Context() = default;
bool Context::init(int, std::string* err) { return no_cuda(err); }
bool Context::alloc_panel(uint64_t, std::string* err) { return no_cuda(err); }
void* Context::alloc(uint64_t, std::string* err) { no_cuda(err); return nullptr; }
void Context::release(void*) {}
void* Context::alloc_host(uint64_t, std::string* err) { no_cuda(err); return nullptr; }
void Context::release_host(void*) {}
bool Context::upload(void*, const void*, uint64_t, std::string* err) { return no_cuda(err); }
bool Context::download(void*, const void*, uint64_t, std::string* err) { return no_cuda(err); }
bool Context::zero(void*, uint64_t, std::string* err) { return no_cuda(err); }
bool Context::synchronize(std::string* err) { return no_cuda(err); }

bool engine_available(std::string* why) { return no_cuda(why); }
bool blas_available(std::string* why) { return no_cuda(why); }
bool embed(Context&, const DMatrix&, const int32_t*, int64_t, float, float*, std::string* err) { return no_cuda(err); }
bool norm(Context&, float*, const float*, const int64_t*, float*, int64_t, int64_t, int64_t, const DNorm&, float,
          std::string* err) {
  return no_cuda(err);
}
bool add(Context&, float*, const float*, int64_t, std::string* err) { return no_cuda(err); }
bool act_mul(Context&, float*, const float*, int64_t, int, std::string* err) { return no_cuda(err); }
bool scale(Context&, float*, int64_t, float, std::string* err) { return no_cuda(err); }
bool softcap(Context&, float*, int64_t, float, std::string* err) { return no_cuda(err); }
bool matmul(Context&, const DMatrix&, const float*, int64_t, int64_t, float*, int64_t, const DVec&, std::string* err) {
  return no_cuda(err);
}
bool matmul_heads(Context&, const DHeads&, const float*, int64_t, int64_t, int64_t, float*, int64_t, int64_t,
                  std::string* err) {
  return no_cuda(err);
}
bool rope(Context&, const AttnShape&, float*, int64_t, int64_t, const int64_t*, const float*, std::string* err) {
  return no_cuda(err);
}
bool store_kv(Context&, const AttnShape&, const float*, const float*, int64_t, const int32_t*, const int64_t*, void*, void*,
              std::string* err) {
  return no_cuda(err);
}
bool rope_and_cache(Context&, const AttnShape&, float*, float*, const float*, int64_t, const int32_t*, const int64_t*,
                    const float*, const DNorm&, const DNorm&, float, void*, void*, std::string* err) {
  return no_cuda(err);
}
bool attention(Context&, const AttnShape&, const float*, int64_t, const int32_t*, const int64_t*, const AttnOpts&,
               const void*, const void*, float*, std::string* err) {
  return no_cuda(err);
}
bool mla_rope_cache(Context&, const AttnShape&, const float*, int64_t, float*, float*, int64_t, const int32_t*,
                    const int64_t*, const float*, void*, std::string* err) {
  return no_cuda(err);
}
bool dequant_row_on_device(Context&, const DMatrix&, int64_t, float*, std::string* err) { return no_cuda(err); }

}  // namespace nunchaku::cuda
