#include "engine/model.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/units.hpp"
#include "engine/bind.hpp"
#include "engine/rope.hpp"
#include "model/arch_table.hpp"
#include "core/file.hpp"

namespace nunchaku::engine {

EngineConfig engine_config(const EngineOptions& opts, const Backend& backend, const WeightProvider& weights) {
  EngineConfig c;
  c.max_batch = opts.max_batch;
  c.max_context = opts.max_context;
  c.max_tokens = opts.max_tokens;
  c.logit_rows = opts.logit_rows;
  c.kv_dtype = opts.kv_dtype;
  c.threads = backend.threads();
  c.cuda = backend.device().kind == Device::Kind::Cuda;
  c.fast_math = opts.fast_math;  // charged and used by CPU backends only (engine_memory)
  c.stream_slots = weights.pool_slots();
  c.stream_slot_bytes = weights.slot_bytes();
  c.stream_piece_slots = weights.piece_slots();
  c.stream_piece_bytes = weights.piece_bytes();
  return c;
}

Transformer::Transformer(const ModelLayout& layout, WeightProvider& weights, Backend& backend, const EngineOptions& opts)
    : weights_(weights), backend_(backend), opts_(opts) {
  if (!layout.spec) throw Error("engine.bad_spec", "the model's dimensions are unknown");
  spec_ = *layout.spec;
  recipe_ = recipe_for(spec_);
  check_supported(spec_, recipe_);
  if (weights.modules() != layout.modules.size())
    throw Error("engine.bad_weights", "the weight provider does not match the model's modules");
  if (opts_.kv_dtype != DType::F32 && opts_.kv_dtype != DType::F16)
    throw Error("engine.bad_option", "KV cache dtype must be F32 or F16");
  if (!backend_.supports(Op::Attention, opts_.kv_dtype))
    throw Error("engine.bad_option", fmt::format("the {} backend cannot hold a {} KV cache", backend_.device().str(),
                                                 dtype_name(opts_.kv_dtype)));
  bind(layout);

  // The run state, sized by the accounting estimate/plan use (dimensions as the weights have them).
  ModelSpec sized = spec_;
  sized.vocab_size = dims_.vocab;
  sized.intermediate_size = dims_.inter;
  sized.moe_intermediate_size = dims_.expert_inter;
  if (dims_.experts > 0 && !backend_.supports(Op::Moe, DType::F32))
    throw Error("engine.unsupported_architecture",
                fmt::format("the {} backend does not run mixture-of-experts layers yet", backend_.device().str()),
                {.hint = "run it on the CPU (--device cpu)"});
  if (recipe_.mla && !backend_.supports(Op::Mla, DType::F32))
    throw Error("engine.unsupported_architecture",
                fmt::format("the {} backend does not run multi-head latent attention yet", backend_.device().str()),
                {.hint = "run it on the CPU (--device cpu)"});
  check_layer_ops();
  EngineConfig config = engine_config(opts_, backend_, weights_);
  config.panel_cols = panel_cols();
  memory_ = backend_.plan_state(sized, config);
  cfg_ = memory_.config;
  compute_rope(layout);  // longrope picks its factors by the context the run holds
  BackendSetup setup{dims_, memory_, eps_, rope_style_, inv_freq_, inv_freq_local_, recipe_.ropes[0].dims,
                     recipe_.ropes[0].mscale};
  backend_.allocate(setup);
  const size_t T = size_t(cfg_.max_tokens);
  slot_len_.assign(size_t(cfg_.max_batch), 0);
  tok_id_.resize(T);
  tok_slot_.resize(T);
  tok_pos_.resize(T);
  sel_rows_.resize(size_t(cfg_.logit_rows));
}

Transformer::~Transformer() = default;

// Llama 4's layer pieces are ops a backend may lack (the CUDA one does): refused before a run.
void Transformer::check_layer_ops() const {
  bool chunked = false, nope = false;
  for (const LayerRecipe& l : recipe_.layers) chunked = chunked || l.chunked, nope = nope || l.nope;
  const std::pair<bool, Op> needed[] = {{chunked, Op::ChunkedAttention},
                                        {nope && recipe_.attn_temp_floor > 0, Op::AttnTemperature},
                                        {recipe_.qk_norm_unit, Op::UnitNorm},
                                        {nope, Op::NoRope}};
  for (auto [want, op] : needed)
    if (want && !backend_.supports(op, DType::F32))
      throw Error("engine.unsupported_architecture",
                  fmt::format("the {} backend does not run {} layers' {} yet", backend_.device().str(), spec_.architecture,
                              op_name(op)),
                  {.hint = "run it on the CPU (--device cpu)"});
}

void Transformer::bind(const ModelLayout& layout) {
  dims_ = engine_dims(spec_);
  eps_ = spec_.norm_eps > 0 ? float(spec_.norm_eps) : 1e-5f;
  ModelBinding b = bind_modules(layout);
  embed_ = {b.embed, b.embed_at, {}};
  final_norm_ = {b.final_norm, b.final_norm_at, {}};
  head_ = {b.head, b.head_at, {}};
  const TensorView& emb = weights_.info(b.embed)[size_t(b.embed_at)];
  dims_.vocab = emb.shape.empty() ? 0 : emb.shape[0];
  const Role gate_role = recipe_.fused_gate_up ? Role::GateUp : Role::Gate;
  const TensorView* gate0 = nullptr;
  if (!b.layers.empty() && b.layers[0].at[size_t(gate_role)] >= 0)
    gate0 = &weights_.info(b.layers[0].module)[size_t(b.layers[0].at[size_t(gate_role)])];
  dims_.inter = gate0 && gate0->shape.size() == 2 ? gate0->shape[0] / (recipe_.fused_gate_up ? 2 : 1) : spec_.intermediate_size;
  dims_.layers = int64_t(b.layers.size());
  dense_inter_ = dims_.inter;
  for (const auto& l : b.layers)  // a dense layer's width (Llama 4's first layers may be MoE)
    if (int16_t g = l.at[size_t(gate_role)]; g >= 0 && l.at[size_t(Role::Router)] < 0) {
      const TensorView& t = weights_.info(l.module)[size_t(g)];
      if (t.shape.size() == 2) dims_.inter = dense_inter_ = t.shape[0] / (recipe_.fused_gate_up ? 2 : 1);
      break;
    }
  for (const auto& l : b.layers)
    if (l.at[size_t(Role::Router)] >= 0) {
      moe_dims(layout, l.module);
      break;
    }

  // An untied embedding in host memory the backend cannot read (a GPU run whose plan left it
  // on the CPU) is gathered on the host: only the batch's rows cross to the device.
  embed_on_host_ = b.head != SIZE_MAX && !backend_.can_read(emb.device) &&
                   (emb.device.kind == Device::Kind::Cpu || emb.device.kind == Device::Kind::Disk);
  embed_.w = matrix(emb, dims_.vocab, dims_.hidden, embed_on_host_ ? nullptr : &backend_);
  head_.w = head_.module == SIZE_MAX ? embed_.w : matrix(weights_.info(head_.module)[size_t(head_.at)], dims_.vocab, dims_.hidden, &backend_);
  check_vector(weights_.info(final_norm_.module)[size_t(final_norm_.at)], dims_.hidden, backend_);

  for (size_t l = 0; l < b.layers.size(); ++l) {
    Layer L;
    L.module = b.layers[l].module;
    L.at = b.layers[l].at;
    L.window = recipe_.layers[l].window;
    L.rope = recipe_.layers[l].nope ? -1 : recipe_.layers[l].rope;
    L.chunked = recipe_.layers[l].chunked;
    bind_layer(L, weights_.info(L.module), layout.modules[L.module].name);
    if (L.at[size_t(Role::Router)] >= 0)
      bind_moe(L, weights_.info(L.module), layout.modules[L.module].roles, layout.modules[L.module].name);
    layers_.push_back(std::move(L));
  }

  order_ = {embed_.module};
  for (const Layer& L : layers_) order_.push_back(L.module);
  order_.push_back(final_norm_.module);
  if (head_.module != SIZE_MAX && head_.module != final_norm_.module) order_.push_back(head_.module);
  else if (head_.module == SIZE_MAX) order_.push_back(embed_.module);  // tied head: the embedding again
}

// The layer's matrices (row ranges of the fused ones) and the checks of its vectors.
void Transformer::bind_layer(Layer& L, std::span<const TensorView> info, const std::string& module) {
  const int64_t H = dims_.hidden, q_dim = dims_.q_dim(), kv_dim = dims_.kv_dim(), I = dense_inter_;
  auto part = [&](Part& p, Role r, int64_t rows, int64_t cols, int64_t row0 = 0, int64_t total = 0) {
    p.at = L.at[size_t(r)];
    p.row0 = row0;
    p.w = matrix(info[size_t(p.at)], total ? total : rows, cols, &backend_);
    p.w.rows = rows;  // a row range of the tensor
  };
  if (recipe_.mla) {
    bind_mla(L, info, module);
  } else if (recipe_.fused_qkv) {
    const int64_t all = q_dim + 2 * kv_dim;
    part(L.q, Role::QKV, q_dim, H, 0, all);
    part(L.k, Role::QKV, kv_dim, H, q_dim, all);
    part(L.v, Role::QKV, kv_dim, H, q_dim + kv_dim, all);
  } else {
    part(L.q, Role::Q, q_dim, H);
    part(L.k, Role::K, kv_dim, H);
    part(L.v, Role::V, kv_dim, H);
  }
  part(L.o, Role::O, H, recipe_.mla ? dims_.heads * dims_.mla_v : q_dim);
  const bool sparse = L.at[size_t(Role::Router)] >= 0;  // bind_moe binds its MLP
  if (sparse) {
  } else if (recipe_.fused_gate_up) {
    part(L.gate, Role::GateUp, I, H, 0, 2 * I);
    part(L.up, Role::GateUp, I, H, I, 2 * I);
  } else {
    part(L.gate, Role::Gate, I, H);
    part(L.up, Role::Up, I, H);
  }
  if (!sparse) part(L.down, Role::Down, H, I);
  const int64_t qn = recipe_.qk_norm_full ? q_dim : dims_.head_dim, kn = recipe_.qk_norm_full ? kv_dim : dims_.head_dim;
  const std::pair<Role, int64_t> vecs[] = {{Role::AttnNorm, H},   {Role::FfnNorm, H},  {Role::QBias, q_dim},
                                           {Role::KBias, kv_dim}, {Role::VBias, kv_dim}, {Role::OBias, H},
                                           {Role::QNorm, qn}, {Role::KNorm, kn},
                                           {Role::GateBias, I},   {Role::UpBias, I},     {Role::DownBias, H},
                                           {Role::PostAttnNorm, H}, {Role::PostFfnNorm, H}, {Role::Sinks, dims_.heads}};
  for (auto [r, n] : vecs)
    if (L.at[size_t(r)] >= 0) check_vector(info[size_t(L.at[size_t(r)])], n, backend_);
  const std::pair<bool, Role> needed[] = {{recipe_.qk_norm, Role::QNorm}, {recipe_.qk_norm, Role::KNorm},
                                          {recipe_.attn_sinks, Role::Sinks},
                                          {recipe_.post_attn_norm, Role::PostAttnNorm},
                                          {recipe_.post_ffn_norm, Role::PostFfnNorm}};
  for (auto [want, r] : needed)
    if (want && L.at[size_t(r)] < 0)
      throw Error("engine.missing_tensor", fmt::format("{} layer without its {} weights", spec_.architecture, role_name(r)),
                  {.tensor = module});
}

int64_t Transformer::panel_cols() const {
  int64_t cols = 0;
  auto widen = [&](const WeightMatrix& w) { cols = cpu_gemm_uses_panel(w.dtype) ? std::max(cols, w.cols) : cols; };
  for (const Layer& L : layers_) {
    for (const Part* p : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down})
      if (p->at >= 0) widen(p->w);
    if (L.mla) {
      for (const Part* p : {&L.mla->qa, &L.mla->qb, &L.mla->kva})
        if (p->at >= 0) widen(p->w);
      for (const auto* ws : {&L.mla->k_up, &L.mla->v_up})
        for (const WeightMatrix& m : *ws)
          if (!m.input_major) widen(m);
    }
    if (L.moe) {
      for (const Part& p : L.moe->experts)
        if (p.at >= 0 && !p.w.input_major && p.w.dtype != DType::MXFP4) widen(p.w);  // gpt-oss's never take the GEMM
      widen(L.moe->router.w);
      if (L.moe->shared)
        for (const Part* p : {&L.moe->sh_gate, &L.moe->sh_up, &L.moe->sh_down}) widen(p->w);
    }
  }
  widen(head_.w);
  return cols;
}

void Transformer::compute_rope(const ModelLayout& layout) {
  rope_style_ = opts_.rope_style.value_or(default_rope_style(spec_, layout.naming));
  // A vector of llama.cpp's rope tensors by role (empty when the file has none).
  auto global_vector = [&](Role r, int64_t n) -> std::vector<float> {
    const size_t m = find_role(layout, r);
    if (m == SIZE_MAX) return {};
    auto views = weights_.acquire(m);
    const auto& roles = layout.modules[m].roles;
    std::vector<float> v = read_vector(views[size_t(std::find(roles.begin(), roles.end(), r) - roles.begin())], n);
    weights_.release(m);
    return v;
  };
  const std::vector<float> divisors = global_vector(Role::RopeFreqs, dims_.head_dim / 2);  // llama.cpp's llama3 scaling
  // Phi-3 longrope from GGUF: its factors are tensors (rope_inv_freq picks long or short).
  RopeRecipe full = recipe_.ropes[0];
  const int64_t half = (full.dims > 0 ? full.dims : dims_.head_dim) / 2;
  for (auto [role, key] : {std::pair{Role::RopeFactorsLong, "long_factor"}, std::pair{Role::RopeFactorsShort, "short_factor"}}) {
    std::vector<float> f = global_vector(role, half);
    if (f.empty()) continue;
    if (!full.scaling.is_object())  // factors without the keys: llama.cpp's defaults (original context = trained)
      full.scaling = {{"rope_type", "longrope"}, {"original_max_position_embeddings", spec_.max_context}};
    if (!full.scaling.contains(key)) full.scaling[key] = f;
  }
  inv_freq_ = rope_inv_freq(full, dims_.head_dim, divisors, cfg_.max_context);
  inv_freq_local_.clear();
  if (recipe_.ropes.size() > 1) inv_freq_local_ = rope_inv_freq(recipe_.ropes[1], dims_.head_dim, {}, cfg_.max_context);
}

// X[t] = embedding row id[t], dequantized on the host (exactly, as every backend's embed
// does) and written to the backend in one copy.
void Transformer::embed_here(int64_t T) {
  const size_t H = size_t(dims_.hidden);
  host_x_.resize(size_t(T) * H);  // grows to max_tokens x hidden once
  for (int64_t t = 0; t < T; ++t) dequant_row(embed_.w, tok_id_[size_t(t)], host_x_.data() + size_t(t) * H);
  if (recipe_.embed_scale != 1.0f)
    for (float& v : host_x_) v *= recipe_.embed_scale;  // as the backends' embed(table, scale)
  backend_.write(Buf::X, {host_x_.data(), size_t(T) * H});
}

uint64_t Transformer::state_bytes() const {
  return backend_.allocated_bytes() +
         (slot_len_.size() + tok_pos_.size() + sel_rows_.size()) * 8 + (tok_id_.size() + tok_slot_.size()) * 4;
}

std::string Transformer::describe() const {
  const std::string ffn = dims_.experts > 0 ? fmt::format("{} (experts {} x {}, top {})", dims_.inter, dims_.experts,
                                                          dims_.expert_inter, dims_.top_k)
                                            : std::to_string(dims_.inter);
  return fmt::format("{}, {}, hidden {}, heads {}/{} x {}, ffn {} ({}), norm {}, vocab {}, weights {}, rope {}, kv {}, {}, {}",
                     spec_.architecture, plural(layers_.size(), "layer"), dims_.hidden, dims_.heads, dims_.kv_heads, dims_.head_dim,
                     ffn, expert_activation_name(recipe_), norm_kind_name(recipe_.norm), dims_.vocab,
                     dtype_name(layers_.empty() ? embed_.w.dtype : layers_[0].q.w.dtype),
                     rope_style_ == RopeStyle::NeoX ? "neox" : "interleaved", dtype_name(cfg_.kv_dtype),
                     weights_.describe(), backend_.describe());
}

int64_t Transformer::validate(std::span<const SeqChunk> chunks) {
  int64_t T = 0, R = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const SeqChunk& ch = chunks[c];
    if (ch.slot < 0 || ch.slot >= cfg_.max_batch)
      throw Error("engine.bad_batch", fmt::format("slot {} outside [0, {})", ch.slot, cfg_.max_batch));
    for (size_t d = 0; d < c; ++d)
      if (chunks[d].slot == ch.slot) throw Error("engine.bad_batch", fmt::format("slot {} twice in one batch", ch.slot));
    if (ch.tokens.empty()) throw Error("engine.bad_batch", "empty chunk");
    if (ch.start < 0 || ch.start + int64_t(ch.tokens.size()) > cfg_.max_context)
      throw Error("engine.context_full", fmt::format("positions {}..{} do not fit a context of {}", ch.start,
                                                     ch.start + int64_t(ch.tokens.size()), cfg_.max_context));
    if (ch.start > slot_len_[size_t(ch.slot)])
      throw Error("engine.bad_batch", fmt::format("slot {} holds {} positions; a chunk starting at {} would attend to "
                                                  "unwritten ones", ch.slot, slot_len_[size_t(ch.slot)], ch.start));
    T += int64_t(ch.tokens.size());
    R += ch.all_logits ? int64_t(ch.tokens.size()) : 1;
  }
  if (T > cfg_.max_tokens)
    throw Error("engine.bad_batch", fmt::format("{} in one forward, the engine holds {}", plural(uint64_t(T), "token"), cfg_.max_tokens));
  if (R > cfg_.logit_rows)
    throw Error("engine.bad_batch", fmt::format("{} logit rows wanted, the engine holds {}", R, cfg_.logit_rows));
  int64_t t = 0, r = 0;
  for (const SeqChunk& ch : chunks) {
    const int64_t n = int64_t(ch.tokens.size());
    for (int64_t i = 0; i < n; ++i, ++t) {
      int32_t id = ch.tokens[size_t(i)];
      if (id < 0 || id >= dims_.vocab)
        throw Error("engine.bad_token", fmt::format("token id {} outside the vocabulary [0, {})", id, dims_.vocab));
      tok_id_[size_t(t)] = id;
      tok_slot_[size_t(t)] = ch.slot;
      tok_pos_[size_t(t)] = ch.start + i;
      if (ch.all_logits || i == n - 1) sel_rows_[size_t(r++)] = t;
    }
  }
  return T;
}

// Acquires the module of step `step` of a forward pass and asks for the ones after it.
std::span<const TensorView> Transformer::acquire(size_t step) {
  for (int d = 1; d <= opts_.prefetch_depth; ++d) weights_.prefetch(order_[(step + size_t(d)) % order_.size()]);
  return weights_.acquire(order_[step]);
}

Norm Transformer::norm_of(std::span<const TensorView> w, const Layer& L, Role r) const {
  return {vector_ref(w, L.at[size_t(r)]), recipe_.norm, {}};
}

// The attention half of the block, up to the residual stream's update and the MLP's input
// norm in XN.
void Transformer::run_attention(Layer& L, int64_t l, std::span<const TensorView> w) {
  auto vec = [&](Role r) { return vector_ref(w, L.at[size_t(r)]); };
  Backend& be = backend_;
  be.norm(Buf::X, Buf::XN, norm_of(w, L, Role::AttnNorm));
  if (L.mla) {
    run_mla(L, l, w);
    be.add_norm(Buf::X, Buf::Tmp, Buf::XN, norm_of(w, L, Role::FfnNorm));
    return;
  }
  const MatmulJob qkv[3] = {{&L.q.w, Buf::Q, vec(Role::QBias)}, {&L.k.w, Buf::K, vec(Role::KBias)}, {&L.v.w, Buf::V, vec(Role::VBias)}};
  be.matmul(qkv, Buf::XN);
  const bool nope = L.rope < 0;
  if (recipe_.qk_norm_unit && !nope) {  // Llama 4: weightless, on the rotary layers only
    const Norm unit{{nullptr, DType::F32, dims_.head_dim}, NormKind::Rms, {}};
    be.rope_and_cache(l, unit, unit, L.rope);
  } else {
    be.rope_and_cache(l, norm_of(w, L, Role::QNorm), norm_of(w, L, Role::KNorm), L.rope);
  }
  const MatmulJob o[1] = {{&L.o.w, Buf::Tmp, vec(Role::OBias)}};
  be.prefetch(o);
  Attention a{L.window, recipe_.attn_scale, recipe_.attn_softcap, vec(Role::Sinks)};
  a.chunked = L.chunked;
  if (nope) a.temp_floor = recipe_.attn_temp_floor, a.temp_scale = recipe_.attn_temp_scale;
  be.attention(l, a);
  be.matmul(o, Buf::Att);
  if (recipe_.post_attn_norm) be.norm(Buf::Tmp, Buf::Tmp, norm_of(w, L, Role::PostAttnNorm));
  be.add_norm(Buf::X, Buf::Tmp, Buf::XN, norm_of(w, L, Role::FfnNorm));
}

void Transformer::run_layer(Layer& L, int64_t l) {
  auto w = acquire(size_t(l) + 1);
  auto vec = [&](Role r) { return vector_ref(w, L.at[size_t(r)]); };
  for (Part* p : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down})
    if (p->at >= 0) p->w.data = static_cast<const uint8_t*>(w[size_t(p->at)].data) + size_t(p->row0) * p->w.row_bytes;
  Backend& be = backend_;
  be.begin_layer(l);
  run_attention(L, l, w);
  if (L.moe) {
    run_moe(L, w);
    if (recipe_.post_ffn_norm) be.norm(Buf::Tmp, Buf::Tmp, norm_of(w, L, Role::PostFfnNorm));
    be.add(Buf::X, Buf::Tmp);
    weights_.release(L.module);
    return;
  }
  be.matmul_act({&L.gate.w, Buf::Gate, vec(Role::GateBias)}, {&L.up.w, Buf::Up, vec(Role::UpBias)}, Buf::XN, recipe_.act);
  const MatmulJob down{&L.down.w, Buf::Tmp, vec(Role::DownBias)};
  if (recipe_.post_ffn_norm) {
    be.matmul({&down, 1}, Buf::Gate);
    be.norm(Buf::Tmp, Buf::Tmp, norm_of(w, L, Role::PostFfnNorm));
    be.add(Buf::X, Buf::Tmp);
  } else {
    be.matmul_add(down, Buf::Gate, Buf::X);
  }
  weights_.release(L.module);
}

std::span<const float> Transformer::forward(std::span<const SeqChunk> chunks) {
  const int64_t T = validate(chunks);
  if (T == 0) return {};
  int64_t R = 0;
  for (const SeqChunk& ch : chunks) R += ch.all_logits ? int64_t(ch.tokens.size()) : 1;
  for (const SeqChunk& ch : chunks) slot_len_[size_t(ch.slot)] = ch.start + int64_t(ch.tokens.size());
  Backend& be = backend_;
  be.set_tokens({{tok_id_.data(), size_t(T)}, {tok_slot_.data(), size_t(T)}, {tok_pos_.data(), size_t(T)}});

  size_t step = 0;
  {
    auto w = acquire(step++);
    embed_.w.data = static_cast<const uint8_t*>(w[size_t(embed_.at)].data);
    if (embed_on_host_) embed_here(T);
    else be.embed(embed_.w, recipe_.embed_scale);
    weights_.release(embed_.module);
  }
  for (size_t l = 0; l < layers_.size(); ++l, ++step) run_layer(layers_[l], int64_t(l));
  {
    auto w = acquire(step++);
    be.select_rows({sel_rows_.data(), size_t(R)}, Norm{vector_ref(w, final_norm_.at), recipe_.norm, {}});
    if (head_.module == final_norm_.module) {
      head_.w.data = static_cast<const uint8_t*>(w[size_t(head_.at)].data);
      be.head(head_.w, R);
    }
    weights_.release(final_norm_.module);
  }
  if (head_.module != final_norm_.module) {
    auto w = acquire(step++);
    const bool tied = head_.module == SIZE_MAX;
    head_.w.data = static_cast<const uint8_t*>(w[size_t(tied ? embed_.at : head_.at)].data);
    be.head(head_.w, R);
    weights_.release(tied ? embed_.module : head_.module);
  }
  if (recipe_.final_softcap > 0) be.softcap(Buf::Logits, recipe_.final_softcap);
  // A weight file that shrank under its mapping faulted some reads (zeros were read
  // instead): exit 2 naming file and offset, never logits computed from garbage.
  check_mapped_reads();
  return be.logits(R);
}

}  // namespace nunchaku::engine
