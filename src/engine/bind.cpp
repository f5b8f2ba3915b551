#include "engine/bind.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>

#include "core/error.hpp"
#include "cuda/loader.hpp"
#include "engine/quant_blocks.hpp"
#include "model/arch/record.hpp"
#include "model/arch_table.hpp"

namespace nunchaku::engine {
namespace {

Error engine_error(const std::string& code, const std::string& msg, const std::string& tensor = "",
                   const std::string& hint = "") {
  return Error(code, msg, {.tensor = tensor, .hint = hint});
}

void check_place(const TensorView& t, const Backend* backend) {
  if (!backend && t.device.kind != Device::Kind::Cpu && t.device.kind != Device::Kind::Disk)
    throw engine_error("engine.not_readable", fmt::format("tensor is in {} memory, not host memory", t.device.str()), t.name);
  if (backend && !backend->can_read(t.device))
    throw engine_error("engine.not_readable",
                       fmt::format("tensor is in {} memory, which the {} backend cannot read", t.device.str(),
                                   backend->device().str()),
                       t.name, "place the model where the backend runs (--device, --plan)");
  if (!t.strides.empty()) throw engine_error("engine.not_contiguous", "tensor is not contiguous", t.name);
}

int64_t numel(const TensorView& t) {
  int64_t n = 1;
  for (auto d : t.shape) n *= d;
  return n;
}

}  // namespace

void check_supported(const ModelSpec& spec, const BlockRecipe& recipe) {
  if (!recipe.unsupported.empty())
    throw engine_error("engine.unsupported_architecture", recipe.unsupported, "", "supported: " + engine_families());
  const EngineDims d = engine_dims(spec);
  if (d.hidden <= 0 || d.heads <= 0 || d.head_dim <= 0 || d.head_dim % 2 || d.kv_heads <= 0 || d.heads % d.kv_heads ||
      d.layers <= 0)
    throw engine_error("engine.bad_spec", fmt::format("inconsistent dimensions: hidden {}, heads {}/{}, head_dim {}, layers {}",
                                                      d.hidden, d.heads, d.kv_heads, d.head_dim, d.layers));
}

size_t find_role(const ModelLayout& layout, Role r) {
  for (size_t m = 0; m < layout.modules.size(); ++m)
    for (Role x : layout.modules[m].roles)
      if (x == r) return m;
  return SIZE_MAX;
}

ModelBinding bind_modules(const ModelLayout& layout) {
  ModelBinding b;
  const BlockRecipe recipe = layout.spec ? recipe_for(*layout.spec) : BlockRecipe{};
  auto at_of = [&](size_t m, Role r) -> int16_t {
    const auto& roles = layout.modules[m].roles;
    for (size_t i = 0; i < roles.size(); ++i)
      if (roles[i] == r) return int16_t(i);
    return -1;
  };
  auto global = [&](Role r, size_t& module, int16_t& at, bool required) {
    module = find_role(layout, r);
    if (module == SIZE_MAX) {
      if (required)
        throw engine_error("engine.missing_tensor", fmt::format("the model has no {} tensor", role_name(r)), "",
                           "the checkpoint's tensor names do not follow the architecture table (docs/architectures.md)");
      return;
    }
    at = at_of(module, r);
  };
  global(Role::Embed, b.embed, b.embed_at, true);
  global(Role::FinalNorm, b.final_norm, b.final_norm_at, true);
  global(Role::Head, b.head, b.head_at, false);
  // An untied model whose head the table did not find would silently run the embedding as
  // its head: refused instead.
  if (b.head == SIZE_MAX && layout.spec && !layout.spec->tie_word_embeddings)
    throw engine_error("engine.missing_tensor", "the model has no head tensor and its config does not tie it to the embedding", "",
                       "the checkpoint's tensor names do not follow the architecture table (docs/architectures.md)");

  const int64_t n_layers = layout.spec ? layout.spec->num_layers : 0;
  b.layers.resize(size_t(std::max<int64_t>(0, n_layers)));
  std::vector<bool> seen(b.layers.size(), false);
  for (size_t m = 0; m < layout.modules.size(); ++m) {
    const Module& mod = layout.modules[m];
    if (mod.kind != ModuleKind::Layer || mod.layer < 0 || mod.layer >= n_layers) continue;
    auto& L = b.layers[size_t(mod.layer)];
    L.module = m;
    L.at.fill(-1);
    for (size_t i = 0; i < mod.roles.size(); ++i)
      if (mod.roles[i] != Role::None) L.at[size_t(mod.roles[i])] = int16_t(i);
    seen[size_t(mod.layer)] = true;
  }
  for (size_t l = 0; l < b.layers.size(); ++l) {
    if (!seen[l]) throw engine_error("engine.missing_tensor", fmt::format("layer {} has no tensors", l));
    const auto& at = b.layers[l].at;
    const bool sparse = at[size_t(Role::Router)] >= 0;  // a MoE layer (others of the family are dense)
    std::vector<Role> need = {Role::AttnNorm, Role::O, Role::FfnNorm};
    if (recipe.mla) {  // q directly or through its low rank; kv_b whole or split as llama.cpp's converter does
      need.insert(need.end(), {Role::KVA, Role::KVANorm});
      if (at[size_t(Role::Q)] < 0) need.insert(need.end(), {Role::QA, Role::QANorm, Role::QB});
      if (at[size_t(Role::KVB)] < 0) need.insert(need.end(), {Role::KB, Role::VB});
      if (sparse && recipe.exp_probs_bias) need.push_back(Role::ExpProbsBias);
    } else {
      for (Role r : recipe.fused_qkv ? std::vector{Role::QKV} : std::vector{Role::Q, Role::K, Role::V}) need.push_back(r);
    }
    if (sparse && recipe.clamped_swiglu && at[size_t(Role::ExpGate)] >= 0)  // GGUF: gate and up apart
      need.insert(need.end(), {Role::ExpGate, Role::ExpUp, Role::ExpDown, Role::ExpGateBias, Role::ExpUpBias, Role::ExpDownBias});
    else if (sparse && recipe.clamped_swiglu)
      need.insert(need.end(), {Role::ExpGateUpMixed, Role::ExpDown, Role::ExpGateUpBias, Role::ExpDownBias});
    else if (sparse && (at[size_t(Role::ExpGateUp)] >= 0 || at[size_t(Role::ExpGateUpIn)] >= 0)) need.push_back(Role::ExpDown);
    else if (sparse) need.insert(need.end(), {Role::ExpGate, Role::ExpUp, Role::ExpDown});
    else if (recipe.fused_gate_up) need.insert(need.end(), {Role::GateUp, Role::Down});
    else need.insert(need.end(), {Role::Gate, Role::Up, Role::Down});
    if (sparse && recipe.router_bias) need.push_back(Role::RouterBias);
    if (recipe.attn_sinks) need.push_back(Role::Sinks);
    if (sparse && (at[size_t(Role::ShGate)] >= 0 || at[size_t(Role::ShUp)] >= 0 || at[size_t(Role::ShDown)] >= 0))
      need.insert(need.end(), {Role::ShGate, Role::ShUp, Role::ShDown});
    for (Role r : need)
      if (b.layers[l].at[size_t(r)] < 0)
        throw engine_error("engine.missing_tensor",
                           fmt::format("layer {} ({}) has no {} tensor", l, layout.modules[b.layers[l].module].name,
                                       role_name(r)),
                           layout.modules[b.layers[l].module].name);
  }
  return b;
}

TensorView as_rows(const TensorView& t, int64_t rows, int64_t cols) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  TensorView v = t;
  if (n == rows * cols && !t.shape.empty() && t.shape.back() == cols) v.shape = {rows, cols};
  return v;
}

WeightMatrix matrix(const TensorView& t, int64_t rows, int64_t cols, const Backend* backend) {
  check_place(t, backend);
  if (t.shape.size() != 2 || t.shape[0] != rows || t.shape[1] != cols)
    throw engine_error("engine.bad_shape",
                       fmt::format("shape [{}] where the model needs [{}, {}]", fmt::join(t.shape, ", "), rows, cols),
                       t.name);
  if (backend ? !backend->supports(Op::Matmul, t.dtype) : !matmul_supports(t.dtype))
    throw engine_error("engine.unsupported_dtype",
                       fmt::format("dtype {} is not supported by the {} kernels", dtype_name(t.dtype),
                                   backend ? backend->device().str() : "cpu"),
                       t.name, "supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K");
  auto rb = dtype_nbytes(t.dtype, uint64_t(cols));
  if (!rb || *rb * uint64_t(rows) != t.nbytes)
    throw engine_error("engine.bad_shape", "row length is not a whole number of blocks", t.name);
  return WeightMatrix{static_cast<const uint8_t*>(t.data), t.dtype, rows, cols, size_t(*rb), t.name};
}

WeightMatrix expert_rows(const TensorView& t, int64_t rows, int64_t cols, const Backend& backend) {
  if (t.dtype != DType::MXFP4) return matrix(t, rows, cols, &backend);
  check_place(t, &backend);
  if (t.shape.size() != 2 || t.shape[0] != rows || t.shape[1] != cols)
    throw engine_error("engine.bad_shape",
                       fmt::format("shape [{}] where the model needs [{}, {}]", fmt::join(t.shape, ", "), rows, cols),
                       t.name);
  if (!backend.supports(Op::Moe, t.dtype) || !expert_matrix_supports(t.dtype, false, false))
    throw engine_error("engine.unsupported_dtype",
                       fmt::format("MXFP4 experts are not supported by the {} kernels", backend.device().str()), t.name);
  auto rb = dtype_nbytes(t.dtype, uint64_t(cols));
  if (!rb || *rb * uint64_t(rows) != t.nbytes)
    throw engine_error("engine.bad_shape", "row length is not a whole number of blocks", t.name);
  return WeightMatrix{static_cast<const uint8_t*>(t.data), t.dtype, rows, cols, size_t(*rb), t.name};
}

WeightMatrix expert_matrix(const TensorView& t, const TensorView* scales, int64_t experts, int64_t rows, int64_t cols,
                           const Backend& backend) {
  check_place(t, &backend);
  const bool mxfp4 = t.dtype == DType::U8;
  if (!mxfp4) {
    if (!expert_matrix_supports(t.dtype, true, false))
      throw engine_error("engine.unsupported_dtype",
                         fmt::format("experts of dtype {} (input-major experts are F32, F16 or BF16)", dtype_name(t.dtype)),
                         t.name);
    if (t.shape != std::vector<int64_t>{experts, cols, rows})
      throw engine_error("engine.bad_shape",
                         fmt::format("shape [{}] where the model needs [{}, {}, {}]", fmt::join(t.shape, ", "), experts, cols, rows),
                         t.name);
    const size_t esize = dtype_info(t.dtype).block_bytes;
    WeightMatrix w{static_cast<const uint8_t*>(t.data), t.dtype, rows, cols, size_t(rows) * esize, t.name};
    w.input_major = true;
    return w;
  }
  if (!scales)
    throw engine_error("engine.missing_tensor", "MXFP4 blocks without their scales tensor (<name>_scales)", t.name);
  check_place(*scales, &backend);
  if (cols % 32 || t.shape != std::vector<int64_t>{experts, rows, cols / 32, 16})
    throw engine_error("engine.bad_shape",
                       fmt::format("MXFP4 blocks of shape [{}] where the model needs [{}, {}, {}, 16]", fmt::join(t.shape, ", "),
                                   experts, rows, cols / 32),
                       t.name);
  if (scales->dtype != DType::U8 || scales->shape != std::vector<int64_t>{experts, rows, cols / 32})
    throw engine_error("engine.bad_shape",
                       fmt::format("MXFP4 scales of dtype {} and shape [{}] where the model needs U8 [{}, {}, {}]",
                                   dtype_name(scales->dtype), fmt::join(scales->shape, ", "), experts, rows, cols / 32),
                       scales->name);
  WeightMatrix w{static_cast<const uint8_t*>(t.data), DType::MXFP4, rows, cols, size_t(cols / 2), t.name};
  w.scales = static_cast<const uint8_t*>(scales->data);
  return w;
}

void check_vector(const TensorView& t, int64_t n, const Backend& backend) {
  check_place(t, &backend);
  if (numel(t) != n)
    throw engine_error("engine.bad_shape", fmt::format("{} elements where the model needs {}", numel(t), n), t.name);
  if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
    throw engine_error("engine.unsupported_dtype", "vector of dtype " + std::string(dtype_name(t.dtype)), t.name);
}

VecRef vector_ref(std::span<const TensorView> views, int16_t at) {
  if (at < 0) return {};
  const TensorView& t = views[size_t(at)];
  return {t.data, t.dtype, numel(t)};
}

std::vector<float> read_vector(const TensorView& t, int64_t n) {
  if (numel(t) != n)
    throw engine_error("engine.bad_shape", fmt::format("{} elements where the model needs {}", numel(t), n), t.name);
  std::vector<float> out(static_cast<size_t>(n));
  const auto* p = static_cast<const uint8_t*>(t.data);
  std::vector<uint8_t> host;  // a vector in GPU memory (rope_freqs of a model loaded there)
  if (t.device.kind == Device::Kind::Cuda) {
    host.resize(t.nbytes);
    std::string err;
    if (!cuda::d2h(t.device.index, host.data(), t.data, t.nbytes, &err))
      throw engine_error("engine.cuda", "cannot read a weight vector back from " + t.device.str() + ": " + err, t.name);
    p = host.data();
  }
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case DType::F32: std::memcpy(&out[size_t(i)], p + 4 * i, 4); break;
      case DType::F16: out[size_t(i)] = blocks::half_to_float(blocks::load_u16(p + 2 * i)); break;
      case DType::BF16: out[size_t(i)] = blocks::bf16_to_float(blocks::load_u16(p + 2 * i)); break;
      default: throw engine_error("engine.unsupported_dtype", "vector of dtype " + std::string(dtype_name(t.dtype)), t.name);
    }
  }
  return out;
}

}  // namespace nunchaku::engine
