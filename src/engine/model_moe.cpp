// The Transformer's mixture-of-experts layers: binding a layer's router and experts (one
// tensor per expert, HF and old GGUF; stacked [E, rows, cols], GGUF ffn_*_exps; gate|up fused
// per layer, transformers 5 in memory) as row ranges, or input-major stacks (gpt-oss, Llama 4),
// and handing them to Backend::moe.
#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"
#include "engine/bind.hpp"
#include "engine/model.hpp"
#include "model/arch_table.hpp"

namespace nunchaku::engine {
namespace {

// The expert number of a per-expert tensor: its last all-digit name component
// ("model.layers.3.mlp.experts.17.up_proj.weight" -> 17, "blk.0.ffn_up.5.weight" -> 5).
int64_t expert_number(std::string_view name) {
  int64_t found = -1;
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) dot = name.size();
    std::string_view w = name.substr(start, dot - start);
    if (!w.empty() && w.size() <= 9 && std::all_of(w.begin(), w.end(), [](char c) { return c >= '0' && c <= '9'; }))
      found = std::stoll(std::string(w));
    start = dot + 1;
  }
  return found;
}

int64_t dim(const TensorView& t, size_t i) { return i < t.shape.size() ? t.shape[i] : 0; }

}  // namespace

void Transformer::moe_dims(const ModelLayout& layout, size_t module) {
  const auto info = weights_.info(module);
  const auto& roles = layout.modules[module].roles;
  for (size_t i = 0; i < roles.size() && i < info.size(); ++i) {
    const TensorView& t = info[i];
    if (roles[i] == Role::ExpGate) dims_.expert_inter = t.shape.size() == 3 ? dim(t, 1) : dim(t, 0);
    if (roles[i] == Role::ExpGateUp) dims_.expert_inter = dim(t, 1) / 2;
    // gpt-oss: MXFP4 blocks [E, 2I, H/32, 16] or input-major floats [E, H, 2I]
    if (roles[i] == Role::ExpGateUpMixed) dims_.expert_inter = (t.dtype == DType::U8 ? dim(t, 1) : dim(t, 2)) / 2;
    if (roles[i] == Role::ExpGateUpIn) dims_.expert_inter = dim(t, 2) / 2;  // [E, H, 2I]
    if (roles[i] == Role::ShGate) dims_.inter = std::max(dims_.inter, dim(t, 0));
  }
}

void Transformer::bind_mixed_experts(Moe& m, const Layer& L, std::span<const TensorView> info, const std::string& module) {
  const int64_t E = dims_.experts, H = dims_.hidden, I = dims_.expert_inter;
  auto stacked = [&](Role r, Role scales, int64_t rows, int64_t cols, int which) {
    const int16_t at = L.at[size_t(r)], sat = L.at[size_t(scales)];
    const WeightMatrix w = expert_matrix(info[size_t(at)], sat >= 0 ? &info[size_t(sat)] : nullptr, E, rows, cols, backend_);
    for (int64_t e = 0; e < E; ++e) {
      Part& p = m.experts[size_t(e) * 3 + size_t(which)];
      p.w = w;
      p.at = at;
      p.scales_at = w.dtype == DType::MXFP4 ? sat : int16_t(-1);  // (data, scales: bound per pass)
      p.row0 = e * w.stored_rows();
    }
  };
  const bool halves = L.at[size_t(Role::ExpGateUpIn)] >= 0;  // Llama 4: no biases, no MXFP4
  stacked(halves ? Role::ExpGateUpIn : Role::ExpGateUpMixed, Role::ExpGateUpScales, 2 * I, H, 0);
  stacked(Role::ExpDown, Role::ExpDownScales, H, I, 2);
  if (halves) return;
  check_vector(info[size_t(L.at[size_t(Role::ExpGateUpBias)])], E * 2 * I, backend_);
  check_vector(info[size_t(L.at[size_t(Role::ExpDownBias)])], E * H, backend_);
  if (L.at[size_t(Role::RouterBias)] >= 0) check_vector(info[size_t(L.at[size_t(Role::RouterBias)])], E, backend_);
  (void)module;
}

void Transformer::bind_moe(Layer& L, std::span<const TensorView> info, std::span<const Role> roles,
                           const std::string& module) {
  const int64_t E = dims_.experts, H = dims_.hidden, I = dims_.expert_inter;
  // A split backend runs the experts on its CPU part: what its moe op reads in host memory;
  // the shared expert's matrices there too, or all three where the layer's part reads them.
  const auto refuse = [&](size_t i, std::string_view what) {
    return Error("engine.not_readable", fmt::format("{}: {}, but this tensor is in {} memory", module, what, info[i].device.str()),
                 {.tensor = info[i].name, .hint = "keep the layer's experts and router in host memory, its shared expert "
                                                  "there or with the layer (run's --vram plans do; a --plan file: "
                                                  "\"expert_map\" and \"moe_on_host\")"});
  };
  Moe m;
  const int16_t sh = L.at[size_t(Role::ShGate)];
  m.shared_on_layer = sh >= 0 && !backend_.moe_can_read(info[size_t(sh)].device);
  for (size_t i = 0; i < roles.size() && i < info.size(); ++i) {
    const Device d = info[i].device;
    const bool shared = roles[i] == Role::ShGate || roles[i] == Role::ShUp || roles[i] == Role::ShDown;
    if (shared && m.shared_on_layer && (backend_.moe_can_read(d) || !backend_.can_read(d)))
      throw refuse(i, "the shared expert's gate matrix is where the layer runs, its other matrices must be too");
    if ((shared ? !m.shared_on_layer : is_expert_part_role(roles[i])) && !backend_.moe_can_read(d))
      throw refuse(i, "the mixture of experts runs on the CPU");
  }
  if ((recipe_.clamped_swiglu && L.at[size_t(Role::ExpGateUpMixed)] >= 0) ||  // HF gpt-oss: gate|up interleaved
      L.at[size_t(Role::ExpGateUpIn)] >= 0) {                                   // Llama 4: gate|up halves
    m.experts.resize(size_t(E) * 3);
    bind_mixed_experts(m, L, info, module);
  } else {
    bind_expert_rows(m, info, roles, module);
  }
  auto single = [&](Part& p, Role r, int64_t rows, int64_t cols) {
    p.at = L.at[size_t(r)];
    p.w = matrix(info[size_t(p.at)], rows, cols, &backend_);
  };
  single(m.router, Role::Router, E, H);
  if (recipe_.clamped_swiglu && L.at[size_t(Role::ExpGateUpMixed)] < 0) {  // GGUF gpt-oss: gate and up apart, each with its bias
    check_vector(info[size_t(L.at[size_t(Role::ExpGateBias)])], E * I, backend_);
    check_vector(info[size_t(L.at[size_t(Role::ExpUpBias)])], E * I, backend_);
    check_vector(info[size_t(L.at[size_t(Role::ExpDownBias)])], E * H, backend_);
    if (L.at[size_t(Role::RouterBias)] >= 0) check_vector(info[size_t(L.at[size_t(Role::RouterBias)])], E, backend_);
  }
  if (int16_t b = L.at[size_t(Role::ExpProbsBias)]; b >= 0) check_vector(info[size_t(b)], E, backend_);
  m.shared = L.at[size_t(Role::ShGate)] >= 0;
  if (m.shared) {
    const int64_t S = dim(info[size_t(L.at[size_t(Role::ShGate)])], 0);
    single(m.sh_gate, Role::ShGate, S, H);
    single(m.sh_up, Role::ShUp, S, H);
    single(m.sh_down, Role::ShDown, H, S);
    if (int16_t g = L.at[size_t(Role::ShExpGate)]; g >= 0) check_vector(info[size_t(g)], H, backend_);
  }
  m.bound.resize(size_t(E));
  m.want.reserve(size_t(std::max(0, weights_.piece_slots())));
  m.where.reserve(size_t(std::max(0, weights_.piece_slots())));
  L.moe = std::move(m);
}

// Experts as row ranges: one tensor per expert, stacked [E, rows, cols], or gate|up fused
// per layer [E, 2I, H].
void Transformer::bind_expert_rows(Moe& m, std::span<const TensorView> info, std::span<const Role> roles,
                                   const std::string& module) {
  const int64_t E = dims_.experts, H = dims_.hidden, I = dims_.expert_inter;
  m.experts.resize(size_t(E) * 3);
  std::vector<bool> seen(size_t(E) * 3, false);
  auto bad = [&](const std::string& what, const std::string& tensor) {
    return Error("engine.bad_shape", fmt::format("{}: {}", module, what), {.tensor = tensor});
  };
  // Part `which` (0 gate, 1 up, 2 down) of expert e: rows [row0, row0 + rows) of tensor i.
  auto place = [&](int64_t e, int which, size_t i, int64_t rows, int64_t cols, int64_t row0, int64_t total) {
    if (e < 0 || e >= E) throw bad(fmt::format("expert {} outside [0, {})", e, E), info[i].name);
    Part& p = m.experts[size_t(e) * 3 + size_t(which)];
    p.at = int16_t(i);
    p.row0 = row0;
    p.w = expert_rows(as_rows(info[i], total, cols), total, cols, backend_);
    p.w.rows = rows;
    seen[size_t(e) * 3 + size_t(which)] = true;
  };
  for (size_t i = 0; i < roles.size() && i < info.size(); ++i) {
    const TensorView& t = info[i];
    const Role r = roles[i];
    const int which = r == Role::ExpGate ? 0 : r == Role::ExpUp ? 1 : r == Role::ExpDown ? 2 : -1;
    if (which >= 0) {
      const bool stacked = t.shape.size() == 3;
      const int64_t rows = which == 2 ? H : I, cols = which == 2 ? I : H;
      if (stacked && dim(t, 0) != E) throw bad(fmt::format("{} experts stacked where the model has {}", dim(t, 0), E), t.name);
      if (stacked)
        for (int64_t e = 0; e < E; ++e) place(e, which, i, rows, cols, e * rows, E * rows);
      else
        place(expert_number(t.name), which, i, rows, cols, 0, rows);
    } else if (r == Role::ExpGateUp) {
      if (dim(t, 0) != E) throw bad(fmt::format("{} experts stacked where the model has {}", dim(t, 0), E), t.name);
      for (int64_t e = 0; e < E; ++e) {
        place(e, 0, i, I, H, e * 2 * I, E * 2 * I);
        place(e, 1, i, I, H, e * 2 * I + I, E * 2 * I);
      }
    }
  }
  for (size_t j = 0; j < seen.size(); ++j)
    if (!seen[j])
      throw Error("engine.missing_tensor",
                  fmt::format("{} has no {} tensor of expert {}", module, j % 3 == 0 ? "gate" : j % 3 == 1 ? "up" : "down", j / 3),
                  {.tensor = module});
}

void Transformer::run_moe(Layer& L, std::span<const TensorView> w) {
  Moe& m = *L.moe;
  auto rebind = [&](Part& p) {
    p.w.data = static_cast<const uint8_t*>(w[size_t(p.at)].data) + size_t(p.row0) * p.w.row_bytes;
  };
  const bool pieces = weights_.pieces_streamed(L.module);
  if (!pieces)
    for (Part& p : m.experts)
      if (p.at >= 0) rebind(p);
  for (Part& p : m.experts)  // split-scale MXFP4: the scales stay in the module's slot
    if (p.scales_at >= 0)
      p.w.scales = static_cast<const uint8_t*>(w[size_t(p.scales_at)].data) + size_t(p.row0) * size_t(p.w.cols / 32);
  rebind(m.router);
  if (m.shared) rebind(m.sh_gate), rebind(m.sh_up), rebind(m.sh_down);
  const bool clamped = recipe_.clamped_swiglu;
  const bool mixed = clamped && L.at[size_t(Role::ExpGateUpMixed)] >= 0;  // else GGUF's gate and up apart
  const bool halves = L.at[size_t(Role::ExpGateUpIn)] >= 0;
  const VecRef gu_bias = mixed ? vector_ref(w, L.at[size_t(Role::ExpGateUpBias)]) : VecRef{};
  const VecRef g_bias = clamped && !mixed ? vector_ref(w, L.at[size_t(Role::ExpGateBias)]) : VecRef{};
  const VecRef u_bias = clamped && !mixed ? vector_ref(w, L.at[size_t(Role::ExpUpBias)]) : VecRef{};
  const VecRef down_bias = clamped ? vector_ref(w, L.at[size_t(Role::ExpDownBias)]) : VecRef{};
  auto slice = [](VecRef v, size_t e, int64_t n) {  // expert e's row of a stacked bias
    if (!v) return v;
    v.data = static_cast<const uint8_t*>(v.data) + e * size_t(n) * dtype_info(v.dtype).block_bytes;
    v.n = n;
    return v;
  };
  const int64_t I = dims_.expert_inter;
  for (size_t e = 0; e < m.bound.size(); ++e)
    m.bound[e] = {&m.experts[e * 3].w, mixed || halves ? nullptr : &m.experts[e * 3 + 1].w, &m.experts[e * 3 + 2].w,
                  slice(gu_bias, e, 2 * I), slice(down_bias, e, dims_.hidden), slice(g_bias, e, I), slice(u_bias, e, I)};
  MoeFfn f;
  f.router = &m.router.w;
  f.router_bias = vector_ref(w, L.at[size_t(Role::RouterBias)]);
  f.experts = m.bound;
  f.top_k = dims_.top_k;
  f.norm_topk = recipe_.norm_topk;
  f.routing = recipe_.routing;
  f.act = recipe_.act;
  f.gate_up_mixed = mixed;
  f.gate_up_halves = halves;
  f.input_weighted = recipe_.expert_input_weighted;
  f.clamped_swiglu = clamped;
  f.swiglu_alpha = recipe_.swiglu_alpha;
  f.swiglu_limit = recipe_.swiglu_limit;
  f.groups = recipe_.route_groups;
  f.groups_used = recipe_.route_groups_used;
  f.group_top2 = recipe_.route_group_top2;
  f.routed_scale = recipe_.routed_scale;
  if (recipe_.exp_probs_bias) f.choice_bias = vector_ref(w, L.at[size_t(Role::ExpProbsBias)]);
  if (pieces) {  // the routed experts' rows come from the provider, round by round
    f.bind_max = std::max(1, weights_.piece_slots() / 3);
    f.bind = [this, &L](std::span<const int32_t> experts) {  // two pointers: no allocation
      Moe& m = *L.moe;
      m.want.clear();
      for (int32_t e : experts)
        for (int which = 0; which < 3; ++which) {
          const Part& p = m.experts[size_t(e) * 3 + size_t(which)];
          if (p.at < 0) continue;  // gpt-oss: no separate up
          m.want.push_back({size_t(p.at), uint64_t(p.row0) * p.w.row_bytes, uint64_t(p.w.stored_rows()) * p.w.row_bytes});
        }
      m.where.resize(m.want.size());
      weights_.fetch(L.module, m.want, m.where);
      size_t j = 0;
      for (int32_t e : experts)
        for (int which = 0; which < 3; ++which)
          if (Part& p = m.experts[size_t(e) * 3 + size_t(which)]; p.at >= 0) p.w.data = m.where[j++];
    };
  }
  f.shared_on_layer = m.shared_on_layer;
  if (m.shared) {
    f.shared_gate = &m.sh_gate.w;
    f.shared_up = &m.sh_up.w;
    f.shared_down = &m.sh_down.w;
    f.shared_expert_gate = vector_ref(w, L.at[size_t(Role::ShExpGate)]);
  }
  backend_.moe(f);
}

}  // namespace nunchaku::engine
