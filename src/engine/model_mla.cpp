// The Transformer's multi-head latent attention (DeepSeek-V2/V3; recipe mla), as llama.cpp's
// deepseek2 graph computes it (src/llama-model.cpp, "MLA with the absorption optimization")
// and transformers' modeling_deepseek_v3.py defines it:
//
//   q      = q_proj(x), or q_b(norm(q_a(x)))            per head [nope | rope]
//   latent = kv_a(x) = [c (rank) | k_rope (rope)]       c normed (kv_a_layernorm), k_rope rotated
//   score  = scale * (q_nope . W_k,h c + q_rope' . k_rope')  = scale * ([W_k,h^T q_nope | q_rope'] . latent)
//   out_h  = W_v,h (sum_p softmax_p c_p);  o_proj(out)
//
// so the cache holds the latent row alone (kv_lora_rank + qk_rope_head_dim per position, one
// cache per layer, the values its first kv_lora_rank), and attention runs over it as one kv
// head of rank + rope; W_k,h and W_v,h are head h's rows of kv_b_proj (HF) or llama.cpp's
// k_b (transposed) and v_b.
#include <fmt/format.h>

#include "core/error.hpp"
#include "engine/bind.hpp"
#include "engine/model.hpp"

namespace nunchaku::engine {

void Transformer::bind_mla(Layer& L, std::span<const TensorView> info, const std::string& module) {
  const int64_t H = dims_.hidden, heads = dims_.heads, r = dims_.mla_rank, rope = dims_.mla_rope,
                nope = dims_.mla_nope, v = dims_.mla_v, ql = dims_.q_rank, qk = nope + rope;
  Mla m;
  auto part = [&](Part& p, Role role, int64_t rows, int64_t cols) {
    p.at = L.at[size_t(role)];
    p.w = matrix(info[size_t(p.at)], rows, cols, &backend_);
  };
  if (L.at[size_t(Role::Q)] >= 0) {
    part(L.q, Role::Q, heads * qk, H);
  } else {
    if (ql <= 0) throw Error("engine.bad_shape", fmt::format("{}: q_a_proj without a q_lora_rank in the config", module), {.tensor = module});
    part(m.qa, Role::QA, ql, H);
    check_vector(info[size_t(L.at[size_t(Role::QANorm)])], ql, backend_);
    part(m.qb, Role::QB, heads * qk, ql);
  }
  part(m.kva, Role::KVA, r + rope, H);
  check_vector(info[size_t(L.at[size_t(Role::KVANorm)])], r, backend_);
  m.k_up.resize(size_t(heads));
  m.v_up.resize(size_t(heads));
  m.k_off.resize(size_t(heads));
  m.v_off.resize(size_t(heads));
  if (const int16_t at = L.at[size_t(Role::KVB)]; at >= 0) {
    // kv_b_proj [heads * (nope + v), rank]: head h's first nope rows give k_nope = W c, read
    // input-major (nope inputs, rank outputs) to absorb q_nope; its next v rows its values.
    const WeightMatrix kvb = matrix(info[size_t(at)], heads * (nope + v), r, &backend_);
    if (!expert_matrix_supports(kvb.dtype, true, false))
      throw Error("engine.unsupported_dtype",
                  fmt::format("{}: kv_b_proj in {} (the absorbed attention reads it transposed: F32, F16 or BF16)",
                              module, dtype_name(kvb.dtype)), {.tensor = kvb.name});
    m.kb_at = m.vb_at = at;
    for (int64_t h = 0; h < heads; ++h) {
      WeightMatrix& k = m.k_up[size_t(h)];
      k = kvb;
      k.rows = r, k.cols = nope, k.input_major = true;
      m.k_off[size_t(h)] = size_t(h * (nope + v)) * kvb.row_bytes;
      WeightMatrix& vm = m.v_up[size_t(h)];
      vm = kvb;
      vm.rows = v;
      m.v_off[size_t(h)] = size_t(h * (nope + v) + nope) * kvb.row_bytes;
    }
  } else {  // llama.cpp: k_b [heads, rank, nope] (per head rank outputs of nope inputs), v_b [heads, v, rank]
    m.kb_at = L.at[size_t(Role::KB)];
    m.vb_at = L.at[size_t(Role::VB)];
    const TensorView &kt = info[size_t(m.kb_at)], &vt = info[size_t(m.vb_at)];
    for (const TensorView* t : {&kt, &vt})
      if (t->shape.size() != 3 || t->shape[0] != heads)
        throw Error("engine.bad_shape", fmt::format("{}: shape [{}] where the model needs {} heads stacked", module,
                                                    fmt::join(t->shape, ", "), heads), {.tensor = t->name});
    const WeightMatrix kb = matrix(as_rows(kt, heads * r, nope), heads * r, nope, &backend_);
    const WeightMatrix vb = matrix(as_rows(vt, heads * v, r), heads * v, r, &backend_);
    for (int64_t h = 0; h < heads; ++h) {
      m.k_up[size_t(h)] = kb;
      m.k_up[size_t(h)].rows = r;
      m.k_off[size_t(h)] = size_t(h * r) * kb.row_bytes;
      m.v_up[size_t(h)] = vb;
      m.v_up[size_t(h)].rows = v;
      m.v_off[size_t(h)] = size_t(h * v) * vb.row_bytes;
    }
  }
  L.mla = std::move(m);
}

void Transformer::run_mla(Layer& L, int64_t l, std::span<const TensorView> w) {
  Mla& m = *L.mla;
  Backend& be = backend_;
  auto data = [&](int16_t at) { return static_cast<const uint8_t*>(w[size_t(at)].data); };
  for (Part* p : {&m.qa, &m.qb, &m.kva})
    if (p->at >= 0) p->w.data = data(p->at);
  for (size_t h = 0; h < m.k_up.size(); ++h) {
    m.k_up[h].data = data(m.kb_at) + m.k_off[h];
    m.v_up[h].data = data(m.vb_at) + m.v_off[h];
  }
  const int64_t heads = dims_.heads, hd = dims_.head_dim, qk = dims_.mla_nope + dims_.mla_rope;
  // q as projected into QH (the low rank through Lat), the latent row into K.
  if (m.qa.at >= 0) {
    const MatmulJob a[2] = {{&m.qa.w, Buf::Lat, {}}, {&m.kva.w, Buf::K, {}}};
    be.matmul(a, Buf::XN);
    Norm qn = norm_of(w, L, Role::QANorm);
    qn.span = dims_.q_rank;
    be.norm(Buf::Lat, Buf::Lat, qn);
    const MatmulJob b[1] = {{&m.qb.w, Buf::QH, {}}};
    be.matmul(b, Buf::Lat);
  } else {
    const MatmulJob a[2] = {{&L.q.w, Buf::QH, {}}, {&m.kva.w, Buf::K, {}}};
    be.matmul(a, Buf::XN);
  }
  Norm kn = norm_of(w, L, Role::KVANorm);
  kn.span = dims_.mla_rank;
  be.norm(Buf::K, Buf::K, kn);
  be.matmul_heads(m.k_up, Buf::QH, qk, Buf::Q, hd);  // Q[h] = [W_k,h^T q_nope | ...]
  be.mla_rope_cache(l);                             // ... | q_rope rotated]; the latent cached
  const MatmulJob o[1] = {{&L.o.w, Buf::Tmp, {}}};
  be.prefetch(o);
  be.attention(l, {0, recipe_.attn_scale, 0, {}});
  be.matmul_heads(m.v_up, Buf::Att, hd, Buf::Lat, dims_.mla_v);  // out[h] = W_v,h . att[h]
  be.matmul(o, Buf::Lat);
  (void)heads;
}

}  // namespace nunchaku::engine
