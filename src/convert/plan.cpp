#include "convert/plan.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

#include <fmt/format.h>

#include "convert/elements.hpp"
#include "core/error.hpp"
#include "model/arch_table.hpp"

namespace nunchaku::convert {

namespace {

// transformers' registration order inside a decoder layer (LlamaDecoderLayer and its
// relatives): attention projections with their biases, q/k norms, the MLP, the norms.
constexpr std::string_view kHfOrder[] = {
    "self_attn.q_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.weight", "self_attn.k_proj.bias",
    "self_attn.v_proj.weight", "self_attn.v_proj.bias", "self_attn.o_proj.weight", "self_attn.o_proj.bias",
    "self_attn.qkv_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
    "mlp.gate_proj.weight", "mlp.gate_proj.bias", "mlp.up_proj.weight", "mlp.up_proj.bias",
    "mlp.gate_up_proj.weight", "mlp.down_proj.weight", "mlp.down_proj.bias",
    "input_layernorm.weight", "post_attention_layernorm.weight",
    "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight",
};

bool contiguous(const TensorInfo& t) {
  if (t.strides.empty()) return true;
  int64_t expect = 1;
  for (size_t i = t.shape.size(); i-- > 0;) {
    if (t.shape[i] != 1 && t.strides[i] != expect) return false;
    expect *= t.shape[i];
  }
  return true;
}

DType output_dtype(const TensorInfo& t, const PlanOptions& o) {
  const auto kind = dtype_info(t.dtype).kind;
  const bool floaty = kind == DTypeKind::Float || kind == DTypeKind::Quantized;
  if (!floaty) return t.dtype;  // integers and bools are never cast (as torch_dtype)
  DType want = o.dtype.value_or(t.dtype);
  if (!o.dtype && kind == DTypeKind::Quantized && !o.gguf) want = DType::F32;  // safetensors has no blocks
  if (want == DType::Q8_0) {
    // As llama.cpp: vectors stay F32; rows that are not whole blocks fall back to F16.
    if (t.shape.size() < 2) return DType::F32;
    if (t.shape.back() % 32 != 0) return DType::F16;
  }
  return want;
}

void check_convertible(const Checkpoint& ck, const TensorInfo& t, DType out) {
  if (out == t.dtype && contiguous(t)) return;  // bytes copied as they are (quantized blocks too)
  const auto& file = ck.files[t.file].path;
  if (!can_read_as_float(t.dtype) && out != t.dtype)
    throw Error("convert.unsupported_dtype",
                fmt::format("cannot convert {} to {}", dtype_name(t.dtype), dtype_name(out)),
                {.file = file, .tensor = t.name, .offset = t.offset,
                 .hint = "convert reads F64/F32/F16/BF16 and Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K"});
  if (dtype_info(t.dtype).kind == DTypeKind::Quantized && !contiguous(t))
    throw Error("convert.bad_view", "a quantized tensor with strides", {.file = file, .tensor = t.name, .offset = t.offset});
  for (auto s : t.strides)
    if (s < 0)
      throw Error("convert.bad_view", "negative stride", {.file = file, .tensor = t.name, .offset = t.offset});
}

// Same storage, same view: a tied weight written once.
using ViewKey = std::tuple<std::string, uint64_t, DType, std::vector<int64_t>, std::vector<int64_t>>;

}  // namespace

int hf_param_rank(const std::string& suffix) {
  for (size_t i = 0; i < std::size(kHfOrder); ++i)
    if (suffix == kHfOrder[i]) return int(i);
  return int(std::size(kHfOrder));
}

ConvertPlan plan_tensors(const Checkpoint& ck, const ModelLayout& layout, const PlanOptions& o) {
  // State_dict order: modules in model order; inside one, transformers' registration order.
  std::vector<size_t> order;
  std::vector<bool> seen(ck.tensors.size(), false);
  const bool renamed = o.renames && !o.renames->empty();
  for (const auto& m : layout.modules) {
    std::vector<size_t> ts(m.tensors.begin(), m.tensors.end());
    const size_t cut = m.name.size() + 1;
    auto rank = [&](size_t i) {
      if (renamed) {  // ranked by the name written: its suffix inside its layer
        const std::string& n = (*o.renames)[i].name;
        const auto lp = layer_path(n);
        return hf_param_rank(lp && n.size() > lp->module.size() + 1 ? n.substr(lp->module.size() + 1) : n);
      }
      const auto& n = ck.tensors[i].name;
      return hf_param_rank(n.size() > cut ? n.substr(cut) : n);
    };
    std::stable_sort(ts.begin(), ts.end(), [&](size_t a, size_t b) {
      const int ra = rank(a), rb = rank(b);
      return ra != rb ? ra < rb : ck.tensors[a].name < ck.tensors[b].name;
    });
    for (size_t i : ts)
      if (i < seen.size() && !seen[i]) order.push_back(i), seen[i] = true;
  }
  for (size_t i = 0; i < ck.tensors.size(); ++i)
    if (!seen[i]) order.push_back(i);

  ConvertPlan plan;
  std::map<ViewKey, std::string> kept;
  std::map<std::string, std::string> written_as;  // output name -> input name
  for (size_t i : order) {
    const TensorInfo& t = ck.tensors[i];
    const Rename* rn = renamed ? &(*o.renames)[i] : nullptr;
    if (rn && rn->name.empty()) {
      plan.skipped.push_back(t.name + ": " + rn->skipped);
      continue;
    }
    const std::string& name = rn ? rn->name : t.name;
    if (auto [it, fresh] = written_as.emplace(name, t.name); !fresh)
      throw Error("convert.names_collide", fmt::format("'{}' and '{}' would both be written as '{}'", it->second, t.name, name),
                  {.file = ck.files[t.file].path, .tensor = t.name});
    if (!t.storage.empty()) {
      ViewKey key{t.storage, t.storage_offset, t.dtype, t.shape, t.strides};
      auto [it, fresh] = kept.emplace(key, name);
      if (!fresh) {
        plan.dropped.push_back(name + "=" + it->second);
        continue;
      }
    }
    const DType out = output_dtype(t, o);
    check_convertible(ck, t, out);
    auto nb = dtype_nbytes(out, t.numel());
    if (!nb)
      throw Error("convert.bad_shape", fmt::format("{} elements are not whole {} blocks", t.numel(), dtype_name(out)),
                  {.file = ck.files[t.file].path, .tensor = t.name, .offset = t.offset});
    plan.tensors.push_back({name, i, out, t.shape, *nb, rn ? rn->qk_heads : 0, rn && rn->to_gguf});
  }
  return plan;
}

void shard_by_size(ConvertPlan& plan, uint64_t max_bytes, bool by_name) {
  std::vector<size_t> order(plan.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (by_name)
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return plan.tensors[a].name < plan.tensors[b].name; });
  std::vector<Shard> shards;
  Shard cur;
  for (size_t i : order) {
    const uint64_t b = plan.tensors[i].nbytes;
    if (b > max_bytes) {
      shards.push_back({.tensors = {i}, .bytes = b});
      continue;
    }
    if (cur.bytes + b > max_bytes) shards.push_back(std::move(cur)), cur = {};
    cur.tensors.push_back(i);
    cur.bytes += b;
  }
  if (!cur.tensors.empty() || shards.empty()) shards.push_back(std::move(cur));
  plan.shards = std::move(shards);
  const size_t n = plan.shards.size();
  for (size_t s = 0; s < n; ++s)
    plan.shards[s].file = n == 1 ? "model.safetensors" : fmt::format("model-{:05}-of-{:05}.safetensors", s + 1, n);
}

void shard_by_module(ConvertPlan& plan, const Checkpoint& ck, const ModelLayout& layout) {
  std::vector<int> module_of(ck.tensors.size(), -1);
  for (size_t m = 0; m < layout.modules.size(); ++m)
    for (size_t i : layout.modules[m].tensors)
      if (i < module_of.size()) module_of[i] = int(m);
  std::map<int, size_t> shard_of_module;  // -1 (no module) gathers the rest
  std::vector<Shard> shards;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const int m = module_of[plan.tensors[i].src];
    auto [it, fresh] = shard_of_module.emplace(m, shards.size());
    if (fresh) shards.emplace_back();
    shards[it->second].tensors.push_back(i);
    shards[it->second].bytes += plan.tensors[i].nbytes;
  }
  if (shards.empty()) shards.emplace_back();
  plan.shards = std::move(shards);
  const size_t n = plan.shards.size();
  for (size_t s = 0; s < n; ++s)
    plan.shards[s].file = n == 1 ? "model.safetensors" : fmt::format("model-{:05}-of-{:05}.safetensors", s + 1, n);
}

}  // namespace nunchaku::convert
