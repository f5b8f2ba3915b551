// What-if weight formats: the exact bytes a tensor would take after the real
// quantizer (bitsandbytes, GPTQ/AWQ kernels, llama.cpp's quantize) converted it,
// scales/zeros/absmax included, and which tensors each scheme leaves alone.
// Formulas and sources: docs/estimate.md, "weights".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "format/checkpoint.hpp"
#include "model/model.hpp"
#include "memory/workload.hpp"

namespace nunchaku {

// What a tensor is, as far as quantizers care.
enum class TensorRole {
  Embedding,  // token embedding table
  Head,       // output projection (lm_head / output.weight)
  Linear,     // a 2-D (or stacked 3-D expert) weight inside a decoder layer
  Vector,     // rank-1: norms, biases
  Other,      // anything else (position embeddings, buffers)
};

// What tensor k of module m (t = its TensorInfo) is to a quantizer, from the module the
// architecture record put it in and the role the tensor table gave it (no name matching):
// rank <= 1 and a layer's norms are Vector, a layer's other tensors Linear, the head module
// Head, the token-embedding module Embedding, anything else Other.
TensorRole quant_role(const Module& m, size_t k, const TensorInfo& t);

// "--quant" text → spec: int8, nf4, fp4, gptq, awq or a llama.cpp ftype name
// (q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k_s/m/l, q4_k_s/m, q5_k_s/m, q6_k).
// bits/group_size apply to gptq/awq, double_quant to nf4/fp4. "" or "none" = None.
// Throws Error("usage.quant") on anything else or an invalid bits/group size.
QuantSpec parse_quant(std::string_view text, int bits = 4, int group_size = 128, bool double_quant = false);
std::vector<std::string> ggml_ftype_names();

// Model-wide facts some schemes look at (llama.cpp's mixes).
struct QuantContext {
  int64_t num_layers = 0;
  int64_t gqa = 1;          // num_heads / num_kv_heads
  int64_t num_experts = 0;
  bool is_70b = false;      // llama.cpp's LLM_TYPE_70B rule for attn_v
  bool tied_embeddings = false;  // no separate head tensor: llama.cpp quantizes tok_embd like the output
};

struct QuantizedTensor {
  uint64_t bytes = 0;
  std::string format;  // "kept", "int8", "nf4", "gptq-4bit", "Q6_K", ...
};

// Bytes of `t` under `q`. `kept_bytes` is what the tensor takes when the scheme
// leaves it alone (its stored bytes, or at --dtype). `layer` is its decoder layer (-1 if none).
QuantizedTensor quantized_tensor(const QuantSpec& q, const TensorInfo& t, TensorRole role, int64_t layer,
                                 const QuantContext& ctx, uint64_t kept_bytes);

}  // namespace nunchaku
