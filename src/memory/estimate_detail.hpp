// Private to estimate.cpp / training.cpp: the pieces of estimate() that add components.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "memory/estimate.hpp"

namespace nunchaku::estimate_detail {

// Saturating arithmetic: user-given batch × context products must never wrap
// (a wrapped total would say "fits"); a saturated one says OOM.
inline uint64_t add(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max() : r;
}
inline uint64_t mul(std::initializer_list<uint64_t> xs) {
  uint64_t r = 1;
  for (uint64_t x : xs)
    if (__builtin_mul_overflow(r, x, &r)) return std::numeric_limits<uint64_t>::max();
  return r;
}

// Bytes per element (sub-byte and block types round up to 1; only used for plain types).
inline uint64_t elem_bytes(DType t) {
  const auto& i = dtype_info(t);
  return i.block_elems == 1 ? i.block_bytes : (i.block_bytes >= i.block_elems ? i.block_bytes / i.block_elems : 1);
}

inline bool is_weight_like(DType t) {
  auto k = dtype_info(t).kind;
  return k == DTypeKind::Float || k == DTypeKind::Quantized;
}

// The float dtype holding most bytes (what "as stored" means for compute).
inline DType dominant_dtype(const Checkpoint& ck) {
  std::map<DType, uint64_t> by;
  for (const auto& t : ck.tensors)
    if (is_weight_like(t.dtype)) by[t.dtype] += t.nbytes;
  DType best = DType::F32;
  uint64_t most = 0;
  for (auto [d, b] : by)
    if (b > most) most = b, best = d;
  return best;
}

// A tensor that receives gradients: a base weight (full training) or a LoRA factor.
struct TrainTensor {
  size_t module = 0;      // index into Estimate::modules
  uint64_t rows = 0, cols = 0, numel = 0;  // rows × cols matrix view (Adafactor factors it)
  bool adapter = false;   // LoRA factor: fp32 weight + grad, no master copy
  uint64_t dim0 = 0;      // the tensor's first dimension (FSDP shards it; 0 = rows)
};

uint64_t round_up(uint64_t v, uint64_t m);  // v rounded up to a multiple of m (runtime.cpp)
// Every layer module's kv_bytes = kv_layer_bytes(e.spec, layer, tokens, batch, e.kv_dtype, cells), and their sum.
void set_layer_kv(Estimate& e, int64_t tokens, int64_t batch, const KvCells& cells = {});
uint64_t sum_kv(const Estimate& e);
uint64_t gpus(const Estimate& e);          // the workload's GPU count, at least 1
std::string split_note(const Estimate& e);  // " / N GPUs" when split, else ""

// One decoder layer's residual stream (2 × tokens × hidden) and q|k|v projections
// (tokens × (heads + 2 × kv_heads) × head_dim) in the compute dtype, as PyTorch holds them (runtime.cpp).
uint64_t torch_residual_bytes(const Estimate& e, uint64_t tokens);
uint64_t torch_qkv_bytes(const Estimate& e, uint64_t tokens);
// glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: its dynamic mmap threshold never rises above
// it, so a block this large or larger is mmapped (and unmapped when freed) unless a free
// chunk in the heap already holds it.
constexpr uint64_t kGlibcMmapThresholdMax = 32ULL << 20;
// Mixture of experts (runtime_moe.cpp): whether a decoder layer has no routed experts
// (DeepSeek's first_k_dense_replace); vLLM's profile-run peak through the model's layers at
// `tokens` tokens; transformers' routed-experts transient for `tokens` tokens. `f` gets the
// formula with its numbers.
bool has_dense_layer(const Estimate& e);
uint64_t vllm_moe_peak(const Estimate& e, uint64_t tokens, std::string* f);
uint64_t torch_moe_bytes(const Estimate& e, uint64_t tokens, std::string* f);
uint64_t torch_moe_block_bytes(const Estimate& e, uint64_t tokens);  // one of its four (t·k, h) tensors

// Each adds its GPU (and host) components to `e` and returns the default allocator slack.
uint64_t add_runtime_inference(Estimate& e, const Checkpoint& ck);  // runtime.cpp
uint64_t add_llamacpp(Estimate& e, const Checkpoint& ck);            // runtime_llamacpp.cpp
uint64_t add_training_terms(Estimate& e, const std::vector<TrainTensor>& trainable);
void add_overheads(Estimate& e, uint64_t slack_default);
// transformers on the CPU loading per-expert tensors as stored (runtime_torch_cpu.cpp): the
// fused copy beside the file's pages.
void add_torch_fused_experts(Estimate& e, const Checkpoint& ck);
// transformers on the CPU converting the stored dtype (runtime_torch_cpu.cpp): the load's
// peak (the stored file's pages beside the converted copy) where it passes the run's.
void add_torch_load_peak(Estimate& e, const Checkpoint& ck);
// ... and the interpreter's exit (torch_exit above the end state) where it passes both.
void add_torch_exit_peak(Estimate& e);
// Training (training_peak.cpp): the first step's optimizer states (--steps 1) where they
// pass what backward frees, and glibc's heap under LoRA on the CPU.
void adjust_training_peak(Estimate& e);

// A checkpoint without a model description (no config.json, no GGUF metadata: a vision
// model, a UNet, an adapter, any nn.Module): inference on PyTorch, weights by module (as
// stored or as --dtype) and the runtime's overheads; no KV cache or activations, which need
// the dimensions (estimate_weights.cpp). Throws estimate.no_spec for what needs them.
Estimate estimate_weights_only(const Checkpoint& ck, const ModelLayout& layout, const Workload& w);

}  // namespace nunchaku::estimate_detail
