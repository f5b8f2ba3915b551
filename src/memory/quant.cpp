#include "memory/quant.hpp"

#include <algorithm>
#include <array>
#include <cctype>

#include <fmt/format.h>

#include "core/error.hpp"

namespace nunchaku {
namespace {

std::string lower(std::string_view s) {
  std::string out;
  for (char c : s) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// The llama.cpp ftypes we model: the default tensor type of each (llama_ftype_get_default_type).
struct FType {
  std::string_view name;
  DType base;
};
constexpr std::array<FType, 14> kFTypes{{
    {"q8_0", DType::Q8_0}, {"q4_0", DType::Q4_0}, {"q4_1", DType::Q4_1}, {"q5_0", DType::Q5_0},
    {"q5_1", DType::Q5_1}, {"q2_k", DType::Q2_K}, {"q3_k_s", DType::Q3_K}, {"q3_k_m", DType::Q3_K},
    {"q3_k_l", DType::Q3_K}, {"q4_k_s", DType::Q4_K}, {"q4_k_m", DType::Q4_K}, {"q5_k_s", DType::Q5_K},
    {"q5_k_m", DType::Q5_K}, {"q6_k", DType::Q6_K},
}};

// llama.cpp's tensor categories, recognised from HF or GGUF names.
enum class Cat { TokenEmbd, Output, AttnV, AttnK, AttnOut, AttnQKV, FfnDown, Other };

Cat category(const std::string& name, TensorRole role) {
  if (role == TensorRole::Embedding) return Cat::TokenEmbd;
  if (role == TensorRole::Head) return Cat::Output;
  if (contains(name, "v_proj") || contains(name, "attn_v.")) return Cat::AttnV;
  if (contains(name, "k_proj") || contains(name, "attn_k.")) return Cat::AttnK;
  if (contains(name, "o_proj") || contains(name, "attn_output") || contains(name, "attn.c_proj") ||
      contains(name, "attention.dense"))
    return Cat::AttnOut;
  if (contains(name, "qkv_proj") || contains(name, "attn_qkv") || contains(name, "c_attn") ||
      contains(name, "query_key_value"))
    return Cat::AttnQKV;
  if (contains(name, "down_proj") || contains(name, "ffn_down") || contains(name, ".w2.") ||
      contains(name, "mlp.c_proj") || contains(name, "dense_4h_to_h"))
    return Cat::FfnDown;
  return Cat::Other;
}

bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// llama_tensor_get_type_impl for the non-IQ ftypes (llama.cpp src/llama-quant.cpp).
DType ggml_mix(std::string_view ft, DType t, Cat cat, int64_t i, const QuantContext& c) {
  const int64_t n = c.num_layers;
  if (cat == Cat::Output || (c.tied_embeddings && cat == Cat::TokenEmbd)) return t == DType::Q8_0 ? t : DType::Q6_K;
  if (cat == Cat::AttnV) {
    if (ft == "q2_k") t = c.gqa >= 4 ? DType::Q4_K : DType::Q3_K;
    else if (ft == "q3_k_m") t = i < 2 ? DType::Q5_K : DType::Q4_K;
    else if (ft == "q3_k_l") t = DType::Q5_K;
    else if ((ft == "q4_k_m" || ft == "q5_k_m") && use_more_bits(i, n)) t = DType::Q6_K;
    else if (ft == "q4_k_s" && i < 4) t = DType::Q5_K;
    if (c.is_70b && (t == DType::Q3_K || t == DType::Q4_K)) t = DType::Q5_K;
    if (c.num_experts == 8) t = DType::Q8_0;
  } else if (cat == Cat::AttnK) {
    if (c.num_experts == 8) t = DType::Q8_0;
  } else if (cat == Cat::FfnDown) {
    if (ft == "q2_k") t = DType::Q3_K;
    else if (ft == "q3_k_m") t = i < n / 16 ? DType::Q5_K : DType::Q4_K;
    else if (ft == "q3_k_l") t = DType::Q5_K;
    else if (ft == "q4_k_m") { if (use_more_bits(i, n)) t = DType::Q6_K; }
    else if (ft == "q5_k_m" && use_more_bits(i, n)) t = DType::Q6_K;
    else if (ft == "q4_k_s" && i < n / 8) t = DType::Q5_K;
  } else if (cat == Cat::AttnOut) {
    if (c.num_experts == 8) {
      if (ft == "q2_k" || ft == "q3_k_s" || ft == "q3_k_m" || ft == "q4_k_s" || ft == "q4_k_m") t = DType::Q5_K;
    } else if (ft == "q2_k") t = DType::Q3_K;
    else if (ft == "q3_k_m") t = DType::Q4_K;
    else if (ft == "q3_k_l") t = DType::Q5_K;
  } else if (cat == Cat::AttnQKV) {
    if (ft == "q3_k_m" || ft == "q3_k_l") t = DType::Q4_K;
    else if (ft == "q4_k_m") t = DType::Q5_K;
    else if (ft == "q5_k_m") t = DType::Q6_K;
  }
  return t;
}

// tensor_type_fallback: rows whose length is not a multiple of the block size.
DType ggml_fallback(DType t, int64_t ncols) {
  if (ncols % dtype_info(t).block_elems == 0) return t;
  switch (t) {
    case DType::Q2_K: case DType::Q3_K: t = DType::Q4_0; break;
    case DType::Q4_K: t = DType::Q5_0; break;
    case DType::Q5_K: t = DType::Q5_1; break;
    case DType::Q6_K: t = DType::Q8_0; break;
    default: break;
  }
  if (ncols % dtype_info(t).block_elems != 0) t = DType::F16;
  return t;
}

}  // namespace

std::string QuantSpec::label() const {
  switch (scheme) {
    case QuantScheme::None: return "";
    case QuantScheme::Int8: return "int8";
    case QuantScheme::NF4: return double_quant ? "nf4+dq" : "nf4";
    case QuantScheme::FP4: return double_quant ? "fp4+dq" : "fp4";
    case QuantScheme::GPTQ:
    case QuantScheme::AWQ:
      return fmt::format("{}-{}bit-g{}", scheme == QuantScheme::GPTQ ? "gptq" : "awq", bits, group_size);
    case QuantScheme::GGML: return ggml;
  }
  return "";
}

std::vector<std::string> ggml_ftype_names() {
  std::vector<std::string> out;
  for (const auto& f : kFTypes) out.emplace_back(f.name);
  return out;
}

QuantSpec parse_quant(std::string_view text, int bits, int group_size, bool double_quant) {
  QuantSpec q;
  const std::string s = lower(text);
  q.bits = bits;
  q.group_size = group_size;
  q.double_quant = double_quant;
  if (s.empty() || s == "none") return q;
  if (s == "int8" || s == "llm.int8" || s == "bnb8") q.scheme = QuantScheme::Int8;
  else if (s == "nf4") q.scheme = QuantScheme::NF4;
  else if (s == "fp4") q.scheme = QuantScheme::FP4;
  else if (s == "gptq") q.scheme = QuantScheme::GPTQ;
  else if (s == "awq") q.scheme = QuantScheme::AWQ;
  else {
    for (const auto& f : kFTypes)
      if (s == f.name) {
        q.scheme = QuantScheme::GGML;
        q.ggml = s;
      }
    if (q.scheme == QuantScheme::None) {
      std::string all = "int8, nf4, fp4, gptq, awq";
      for (const auto& f : kFTypes) all += fmt::format(", {}", f.name);
      throw Error("usage.quant", fmt::format("--quant: unknown format '{}'", text), {.hint = "one of: " + all});
    }
  }
  if (q.scheme == QuantScheme::GPTQ || q.scheme == QuantScheme::AWQ) {
    const bool ok_bits = q.scheme == QuantScheme::AWQ ? bits == 4 : (bits == 2 || bits == 3 || bits == 4 || bits == 8);
    if (!ok_bits)
      throw Error("usage.quant_bits", fmt::format("--quant-bits {} is not supported by {}", bits, s),
                  {.hint = q.scheme == QuantScheme::AWQ ? "AWQ kernels are 4-bit" : "GPTQ: 2, 3, 4 or 8"});
    if (group_size != -1 && group_size <= 0)
      throw Error("usage.group_size", fmt::format("--group-size {} must be positive or -1", group_size));
  }
  return q;
}

TensorRole quant_role(const Module& m, size_t k, const TensorInfo& t) {
  if (t.shape.size() <= 1) return TensorRole::Vector;
  const Role r = k < m.roles.size() ? m.roles[k] : Role::None;
  switch (m.kind) {
    case ModuleKind::Head: return TensorRole::Head;
    case ModuleKind::Embedding:
      return r == Role::Embed || is_token_embedding(m.name) ? TensorRole::Embedding : TensorRole::Other;
    case ModuleKind::Layer:
      return r == Role::AttnNorm || r == Role::FfnNorm || r == Role::QNorm || r == Role::KNorm ||
                     r == Role::PostAttnNorm || r == Role::PostFfnNorm
                 ? TensorRole::Vector
                 : TensorRole::Linear;
    default: return TensorRole::Other;
  }
}

QuantizedTensor quantized_tensor(const QuantSpec& q, const TensorInfo& t, TensorRole role, int64_t layer,
                                 const QuantContext& ctx, uint64_t kept_bytes) {
  const uint64_t numel = t.numel();
  // PyTorch order: the last dim is the input features (a row of the weight matrix).
  const uint64_t in = t.shape.empty() ? 1 : static_cast<uint64_t>(t.shape.back());
  const uint64_t out = in == 0 ? 0 : numel / in;
  switch (q.scheme) {
    case QuantScheme::None: return {kept_bytes, "kept"};
    case QuantScheme::Int8:
      // bnb Linear8bitLt: int8 CB + fp32 SCB per output row. Embeddings, norms and
      // lm_head are not nn.Linear or are skipped (transformers get_keys_to_not_convert).
      if (role != TensorRole::Linear) return {kept_bytes, "kept"};
      return {numel + out * 4, "int8"};
    case QuantScheme::NF4:
    case QuantScheme::FP4: {
      if (role != TensorRole::Linear) return {kept_bytes, "kept"};
      // Params4bit: 2 weights/byte, one absmax per 64-element block (fp32), 16-entry code (fp32).
      // Double quant: absmax as uint8 plus an fp32 absmax per 256 blocks and an fp32 offset.
      const uint64_t blocks = ceil_div(numel, 64);
      uint64_t b = ceil_div(numel, 2) + 16 * 4;
      b += q.double_quant ? blocks + ceil_div(blocks, 256) * 4 + 4 : blocks * 4;
      return {b, q.label()};
    }
    case QuantScheme::GPTQ:
    case QuantScheme::AWQ: {
      if (role != TensorRole::Linear) return {kept_bytes, "kept"};
      const uint64_t groups = q.group_size <= 0 ? 1 : ceil_div(in, static_cast<uint64_t>(q.group_size));
      const uint64_t bits = static_cast<uint64_t>(q.bits);
      // qweight packs 32/bits values per int32 along the input (GPTQ) or output (AWQ) dim.
      uint64_t b = q.scheme == QuantScheme::GPTQ ? ceil_div(in * bits, 32) * 4 * out : ceil_div(out * bits, 32) * 4 * in;
      b += groups * ceil_div(out * bits, 32) * 4;  // qzeros, int32-packed
      b += groups * out * 2;                       // scales, fp16
      if (q.scheme == QuantScheme::GPTQ) b += in * 4;  // g_idx, int32
      return {b, fmt::format("{}-{}bit", q.scheme == QuantScheme::GPTQ ? "gptq" : "awq", q.bits)};
    }
    case QuantScheme::GGML: {
      // llama.cpp quantizes 2-D/3-D ".weight" tensors except norms and MoE routers;
      // token embeddings and the output head are quantized too (with their own rules).
      // convert_hf_to_gguf.py writes 1-D tensors (norms, biases) as F32 whatever the ftype.
      if (role == TensorRole::Vector && dtype_is_float(t.dtype)) return {numel * 4, "F32"};
      if (role == TensorRole::Vector || role == TensorRole::Other) return {kept_bytes, "kept"};
      if (contains(t.name, "norm") || contains(t.name, "ffn_gate_inp") || contains(t.name, "router") ||
          contains(t.name, "block_sparse_moe.gate.") || contains(t.name, "mlp.gate.weight"))
        return {kept_bytes, "kept"};
      DType base = DType::Q8_0;
      for (const auto& f : kFTypes)
        if (f.name == q.ggml) base = f.base;
      const DType ty = ggml_fallback(ggml_mix(q.ggml, base, category(t.name, role), layer, ctx), static_cast<int64_t>(in));
      const auto& info = dtype_info(ty);
      return {numel / info.block_elems * info.block_bytes, std::string(info.name)};
    }
  }
  return {kept_bytes, "kept"};
}

}  // namespace nunchaku
