// llama.cpp's reserved graphs, rebuilt in the order its model files add tensors (see the header).
// Each op below keeps what ggml gives its result (shape, type, sources, view or not) and what
// ggml-alloc may do with it (in place or not); weights and caches are external tensors.
#include "memory/llamacpp_graph.hpp"

#include <algorithm>
#include <array>
#include <utility>

namespace nunchaku::llamacpp_graph {
namespace {

using ggml_sim::Graph;
using ggml_sim::Kind;
using ggml_sim::Shape;
using ggml_sim::Type;

// ggml's ops as far as the plan sees them.
class Ops {
 public:
  Graph g;

  int weight() { return g.external({1, 1, 1, 1}); }
  Shape ne(int t) const { return g[t].ne; }

  // ggml_mul_mat(w, x): [rows of w, x's other dims], f32.
  int mm(int64_t rows, int x) { return g.op(Kind::Compute, Type::F32, {rows, ne(x)[1], ne(x)[2], ne(x)[3]}, {weight(), x}); }
  // ggml_mul_mat(a, b) of two activations: [a.ne1, b.ne1, b.ne2, b.ne3].
  int mm2(int a, int b) { return g.op(Kind::Compute, Type::F32, {ne(a)[1], ne(b)[1], ne(b)[2], ne(b)[3]}, {a, b}); }
  // ggml_mul_mat_id(experts, x, ids): [rows, ids.ne0, x.ne2].
  int mm_id(int64_t rows, int x, int ids) { return g.op(Kind::Compute, Type::F32, {rows, ne(ids)[0], ne(x)[2], 1}, {weight(), x, ids}); }
  int inplace(int a, std::vector<int> more = {}) {
    std::vector<int> src{a};
    src.insert(src.end(), more.begin(), more.end());
    return g.op(Kind::Inplace, g[a].type, ne(a), std::move(src));
  }
  int rms_norm(int x) { return inplace(x); }
  int norm_w(int x) { return inplace(rms_norm(x), {weight()}); }  // build_norm: rms_norm, then × weight
  int add(int a, int b) { return inplace(a, {b}); }
  int add_w(int a) { return inplace(a, {weight()}); }  // + a bias
  int mul(int a, int b) { return inplace(a, {b}); }
  int rope(int x, int pos) { return inplace(x, {pos, weight()}); }
  int unary(int x) { return inplace(x); }  // silu, sigmoid, scale, clamp, soft_max without mask
  int soft_max_ext(int x, int mask) { return inplace(x, {mask}); }
  int compute(Shape s, std::vector<int> src, Type t = Type::F32) { return g.op(Kind::Compute, t, s, std::move(src)); }
  int glu(int a, int b) { return compute(ne(a), {a, b}); }  // swiglu_split and the like
  int cont(int x, Shape s) { return compute(s, {x}, g[x].type); }
  int get_rows(int a, int ids) {
    return g.op(Kind::Compute, g[a].type == Type::I32 ? Type::I32 : Type::F32, {ne(a)[0], ne(ids)[0], ne(ids)[1], ne(ids)[2]}, {a, ids});
  }
  int get_rows_w(int ids, int64_t cols) { return g.op(Kind::Compute, Type::F32, {cols, ne(ids)[0], ne(ids)[1], ne(ids)[2]}, {weight(), ids}); }
  int reshape(int x, Shape s) { return g.view(x, s); }
  int view(int x, Shape s, bool contiguous) { return g.view(x, s, contiguous); }
  int permute_0213(int x) { return g.view(x, {ne(x)[0], ne(x)[2], ne(x)[1], ne(x)[3]}, false); }
  int set_rows(int dst, int src, int idx) { return g.write_into(dst, {src, idx, dst}); }
  // ggml_mul_mat(w, x) with a weight of shape wne (a per-head stack): [wne[1], x's other dims].
  int mmw(Shape wne, int x) { return g.op(Kind::Compute, Type::F32, {wne[1], ne(x)[1], ne(x)[2], ne(x)[3]}, {g.external(wne), x}); }
  int concat0(int a, int b) { return compute({ne(a)[0] + ne(b)[0], ne(a)[1], ne(a)[2], ne(a)[3]}, {a, b}); }
};

// The graph of a decoder built from llama.cpp's blocks (src/models/llama.cpp, qwen2.cpp,
// qwen3.cpp, qwen3moe.cpp, olmoe.cpp, phi3.cpp, qwen2moe.cpp, deepseek2.cpp, openai-moe.cpp,
// llama4.cpp, gemma*.cpp, olmo2.cpp): the same blocks in the same order, what differs in Traits.
class Decoder : Ops {
 public:
  Decoder(const Dims& d, const Traits& t) : d_(d), t_(t) {}

  Graph build() {
    inputs_embd();
    for (int64_t il = 0; il < d_.layers; ++il) layer(il);
    int cur = inpL_;
    if (t_.nextn_output) {
      g.set_output(cur);
      cur = get_rows(cur, out_ids_);
    }
    cur = norm_w(cur);
    g.set_output(cur);
    cur = mm(d_.V, cur);
    g.set_output(cur);
    g.expand(cur);
    return std::move(g);
  }

 private:
  const Dims& d_;
  const Traits& t_;
  // The inputs of one cache (the full-attention layers' and the sliding-window layers').
  struct CacheInputs {
    int k_idxs = -1, v_idxs = -1, mask = -1;
  };
  int inpL_ = -1, pos_ = -1, k_rot_ = -1, v_rot_ = -1, out_ids_ = -1, attn_scale_ = -1;
  CacheInputs base_, swa_;

  // build_inp_embd: the token rows, with the embeddings input beside them (both in the graph).
  void inputs_embd() {
    const int tokens = g.input(Type::I32, {d_.u, 1, 1, 1}, "inp_tokens");
    const int rows = get_rows_w(tokens, d_.h);
    const int embd = g.input(Type::F32, {d_.h, d_.u, 1, 1}, "inp_embd");
    g.expand(rows);
    g.expand(embd);
    inpL_ = t_.embd_scale ? unary(rows) : rows;
    pos_ = g.input(Type::I32, {d_.u, 1, 1, 1}, "inp_pos");
    attn_scale_ = g.input(Type::F32, {1, 1, d_.u, 1}, "inp_attn_scale");
    const int64_t ns = d_.n_stream, u = d_.u;
    const Type mt = d_.flash ? Type::F16 : Type::F32;
    for (CacheInputs* c : {&base_, &swa_}) {
      c->k_idxs = g.input(Type::I64, {u, 1, 1, 1}, "k_idxs");
      c->v_idxs = g.input(Type::I64, {d_.flash ? u : u * d_.a_kv * d_.d_v, 1, 1, 1}, "v_idxs");
      c->mask = g.input(mt, {c == &base_ ? d_.n_kv : d_.n_kv_swa, u / ns, 1, ns}, "kq_mask");
    }
    out_ids_ = g.input(Type::I32, {d_.outputs > 0 ? d_.outputs : u, 1, 1, 1}, "out_ids");
    // A quantized cache is written and read rotated when the heads are whole multiples of 64:
    // K by the largest power of two (from 128) dividing the head, V by 64 (llama-kv-cache.cpp).
    if (d_.kv_quantized && d_.d_k % 64 == 0) {
      int64_t n = 128;
      while (d_.d_k % n == 0) n *= 2;
      n = std::max<int64_t>(n / 2, 64);
      k_rot_ = g.input(Type::F32, {n, n, 1, 1}, "k_rot");
    }
    if (d_.kv_quantized && d_.d_v % 64 == 0) v_rot_ = g.input(Type::F32, {64, 64, 1, 1}, "v_rot");
  }

  bool moe(int64_t il) const { return d_.E > 0 && (d_.moe_layer.empty() || d_.moe_layer[size_t(il)]); }
  bool swa(int64_t il) const { return !d_.swa_layer.empty() && d_.swa_layer[size_t(il)]; }

  void layer(int64_t il) {
    int inpSA = inpL_;
    int cur = t_.no_pre_norms ? inpL_ : norm_w(inpL_);
    cur = d_.kv_lora > 0 ? mla_attention(cur) : attention(cur, il);
    if (il == d_.layers - 1 && !t_.nextn_output) {
      cur = get_rows(cur, out_ids_);
      inpSA = get_rows(inpSA, out_ids_);
    }
    if (t_.post_norms) cur = norm_w(cur);
    const int ffn_inp = add(cur, inpSA);
    cur = t_.no_pre_norms ? ffn_inp : norm_w(ffn_inp);
    cur = moe(il) ? moe_ffn(cur) : ffn(cur, d_.I);
    if (t_.post_norms) cur = norm_w(cur);
    inpL_ = t_.residual_first ? add(ffn_inp, cur) : add(cur, ffn_inp);
  }

  // build_qkv, the rope, then build_attn.
  int attention(int cur, int64_t il) {
    const int64_t u = d_.u, qd = d_.a * d_.d_k, kd = d_.a_kv * d_.d_k;
    int Q, K, V;
    if (t_.fused_qkv) {
      const int qkv = mm(qd + kd + d_.a_kv * d_.d_v, cur);
      Q = view(qkv, {d_.d_k, d_.a, u, 1}, false);
      K = view(qkv, {d_.d_k, d_.a_kv, u, 1}, false);
      V = view(qkv, {d_.d_v, d_.a_kv, u, 1}, false);
    } else {
      Q = mm(qd, cur);
      if (d_.qkv_bias) Q = add_w(Q);
      K = mm(kd, cur);
      if (d_.qkv_bias) K = add_w(K);
      V = mm(d_.a_kv * d_.d_v, cur);
      if (d_.qkv_bias) V = add_w(V);
      if (t_.qk_norm_flat) Q = norm_w(Q), K = norm_w(K);
      Q = reshape(Q, {d_.d_k, d_.a, u, 1});
      K = reshape(K, {d_.d_k, d_.a_kv, u, 1});
      V = reshape(V, {d_.d_v, d_.a_kv, u, 1});
    }
    if (t_.qk_norm) Q = norm_w(Q), K = norm_w(K);
    if (t_.nope_on_full && !swa(il)) {
      Q = mul(Q, attn_scale_);
    } else {
      Q = rope(Q, pos_);
      K = rope(K, pos_);
      if (t_.kq_norm_after_rope) Q = rms_norm(Q), K = rms_norm(K);
    }
    if (t_.q_scale) Q = unary(Q);  // phi3 scales Q by 1/sqrt(head_dim) after the rope
    return attn_kv(Q, K, V, il);
  }

  int attn_kv(int Q, int K, int V, int64_t il) {
    const int64_t u = d_.u, ns = d_.n_stream, kd = d_.a_kv * d_.d_k, vd = d_.a_kv * d_.d_v;
    const int64_t n_kv = swa(il) ? d_.n_kv_swa : d_.n_kv;
    const CacheInputs& in = swa(il) ? swa_ : base_;
    if (k_rot_ >= 0) Q = hadamard(Q, k_rot_), K = hadamard(K, k_rot_);
    if (v_rot_ >= 0) V = hadamard(V, v_rot_);
    // build_attn adds q, v, k in that order; its sliding-window twin (a model with two caches) q, k, v.
    g.expand(Q);
    g.expand(d_.n_kv_swa > 0 ? K : V);
    g.expand(d_.n_kv_swa > 0 ? V : K);
    const int kcache = g.external({kd, n_kv, ns, 1}), vcache = g.external({vd, n_kv, ns, 1});
    g.expand(set_rows(kcache, view(K, {kd, u, 1, 1}, true), in.k_idxs));
    if (d_.flash) {
      g.expand(set_rows(vcache, view(V, {vd, u, 1, 1}, true), in.v_idxs));
    } else {
      const int vflat = reshape(vcache, {1, vd * n_kv * ns, 1, 1});
      const int vcur = reshape(reshape(V, {vd, u, 1, 1}), {1, vd * u, 1, 1});
      g.expand(set_rows(vflat, vcur, in.v_idxs));
    }
    const int q = permute_0213(view(Q, {d_.d_k, d_.a, u / ns, ns}, true));
    int cur;
    if (d_.flash) {
      const int k = permute_0213(view(kcache, {d_.d_k, d_.a_kv, n_kv, ns}, false));
      const int v = permute_0213(view(vcache, {d_.d_v, d_.a_kv, n_kv, ns}, false));
      cur = compute({d_.d_v, d_.a, u / ns, ns}, {q, k, v, in.mask});
      cur = reshape(cur, {d_.d_v * d_.a, u, 1, 1});
    } else {
      const int k = permute_0213(view(kcache, {d_.d_k, d_.a_kv, n_kv, ns}, false));
      const int v = permute_0213(view(vcache, {n_kv, d_.a_kv, d_.d_v, ns}, false));
      int kq = mm2(k, q);
      kq = soft_max_ext(kq, in.mask);
      const int kqv = mm2(v, kq);
      cur = cont(permute_0213(kqv), {d_.d_v * d_.a, u, 1, 1});
    }
    g.expand(cur);
    if (v_rot_ >= 0) cur = hadamard(cur, v_rot_);
    cur = mm(d_.h, cur);
    return d_.o_bias ? add_w(cur) : cur;
  }

  // llama_mul_mat_hadamard: the rows rotated n values at a time (a quantized cache's K and V).
  int hadamard(int x, int rot) {
    const int64_t n = ne(rot)[0], all = ne(x)[0] * ne(x)[1] * ne(x)[2] * ne(x)[3];
    const int flat = g[x].contiguous ? reshape(x, {n, all / n, 1, 1}) : cont(x, {n, all / n, 1, 1});
    return reshape(mm2(rot, flat), ne(x));
  }

  // deepseek2's MLA with the absorbed query: the cache holds the normed latent and the rotated
  // key part; attention runs in the latent, then v_b takes each head to v_head.
  int mla_attention(int cur) {
    const int64_t u = d_.u, ns = d_.n_stream, a = d_.a, lat = d_.kv_lora + d_.rope, qh = d_.nope + d_.rope;
    int q = d_.q_lora > 0 ? mm(a * qh, norm_w(mm(d_.q_lora, cur))) : mm(a * qh, cur);
    q = reshape(q, {qh, a, u, 1});
    const int q_nope = permute_0213(view(q, {d_.nope, a, u, 1}, false));
    const int q_abs = permute_0213(mmw({d_.nope, d_.kv_lora, a, 1}, q_nope));
    const int q_pe = rope(view(q, {d_.rope, a, u, 1}, false), pos_);
    const int Q = concat0(q_abs, q_pe);
    const int kv_pe = mm(lat, cur);
    const int kv = norm_w(view(kv_pe, {d_.kv_lora, u, 1, 1}, false));
    const int V = reshape(kv, {d_.kv_lora, 1, u, 1});
    const int k_pe = rope(view(kv_pe, {d_.rope, 1, u, 1}, false), pos_);
    const int K = concat0(V, k_pe);
    g.expand(Q);
    g.expand(V);
    g.expand(K);
    const int kcache = g.external({lat, d_.n_kv, ns, 1});
    g.expand(set_rows(kcache, view(K, {lat, u, 1, 1}, true), base_.k_idxs));
    const int qv = permute_0213(view(Q, {lat, a, u / ns, ns}, true));
    const int k = permute_0213(view(kcache, {lat, 1, d_.n_kv, ns}, false));
    const int v = permute_0213(view(kcache, {d_.kv_lora, 1, d_.n_kv, ns}, false));
    if (d_.flash) {
      int o = compute({d_.kv_lora, a, u / ns, ns}, {qv, k, v, base_.mask});
      o = permute_0213(mmw({d_.kv_lora, d_.v_head, a, 1}, permute_0213(o)));
      o = reshape(cont(o, ne(o)), {d_.v_head * a, u, 1, 1});
      g.expand(o);
      return mm(d_.h, o);
    }
    const int v_cont = compute({d_.n_kv * ns, d_.kv_lora, 1, 1}, {v}, Type::F16);
    int kq = soft_max_ext(mm2(k, qv), base_.mask);
    const int kqv = mmw({d_.kv_lora, d_.v_head, a, 1}, mm2(v_cont, kq));
    const int o = cont(permute_0213(kqv), {d_.v_head * a, u, 1, 1});
    g.expand(o);
    return mm(d_.h, o);
  }

  // build_ffn: up, gate (in parallel), swiglu, down; phi3's one matrix split by views.
  int ffn(int cur, int64_t I) {
    if (t_.fused_gate_up) {  // ggml_swiglu of the one [2·I] product: its halves in one op
      const int up = mm(2 * I, cur);
      return mm(d_.h, compute({I, ne(cur)[1], 1, 1}, {up}));
    }
    const int up = mm(I, cur);
    const int gate = mm(I, cur);
    return mm(d_.h, glu(gate, up));
  }

  // build_moe_ffn's group limit: each group's score is the sum of its two best; the experts of
  // all but the best groups_used groups are set to -inf (ggml_fill, then ggml_set_rows of the
  // kept groups' rows into it).
  int best_groups(int scores) {
    const int64_t u = ne(scores)[1], G = d_.groups, per = d_.E / d_.groups;
    const int grouped = reshape(scores, {per, G, u, 1});
    int best = view(compute({per, G, u, 1}, {grouped}, Type::I32), {2, G, u, 1}, false);  // argsort_top_k
    best = get_rows(reshape(grouped, {1, per, G, u}), best);  // [1, 2, G, u]
    int group_scores = compute({1, G, u, 1}, {reshape(best, {2, G, u, 1})});  // sum_rows
    group_scores = reshape(group_scores, {G, u, 1, 1});
    const int chosen = view(compute({G, u, 1, 1}, {group_scores}, Type::I32), {d_.groups_used, u, 1, 1}, false);
    const int kept = get_rows(grouped, chosen);  // [per, groups_used, u]
    const int masked = set_rows(unary(grouped), kept, chosen);  // fill(-inf), then the kept rows
    return reshape(masked, {d_.E, u, 1, 1});
  }

  // build_moe_ffn: router, top-k, routed experts weighted and summed; then a shared expert.
  // Over cur's rows (n_tokens = cur->ne[1]): the last layer's are the output rows only.
  int moe_ffn(int cur) {
    const int64_t u = ne(cur)[1], E = d_.E, k = d_.k;
    int logits = mm(E, cur);
    if (d_.router_bias) logits = add_w(logits);
    const int probs = t_.softmax_weight ? logits : unary(logits);  // soft_max (sigmoid) over all experts
    int by = t_.sigmoid_select_logits ? logits : d_.probs_bias ? add_w(probs) : probs;
    if (d_.groups > 1) by = best_groups(by);
    const int selected = view(compute({E, u, 1, 1}, {by}, Type::I32), {k, u, 1, 1}, false);
    int weights = get_rows(reshape(probs, {1, E, u, 1}), selected);
    if (t_.softmax_weight) weights = reshape(unary(reshape(weights, {k, u, 1, 1})), {1, k, u, 1});
    if (d_.norm_topk == 1 || (d_.norm_topk < 0 && t_.norm_topk)) {
      weights = reshape(weights, {k, u, 1, 1});
      int sum = compute({1, u, 1, 1}, {weights});
      sum = unary(sum);  // clamp
      weights = inplace(weights, {sum});  // div
      weights = reshape(weights, {1, k, u, 1});
    }
    if (d_.w_scale != 0 && d_.w_scale != 1) weights = unary(weights);
    g.expand(weights);
    int x = reshape(cur, {d_.h, 1, u, 1});
    if (t_.weight_before_ffn) x = mul(compute({d_.h, k, u, 1}, {x}), weights);  // ggml_repeat_4d, then × weights
    const auto biased = [&](int t) { return d_.expert_bias ? inplace(t, {weight(), selected}) : t; };  // ggml_add_id
    const int up = biased(mm_id(d_.I_exp, x, selected));
    const int gate = biased(mm_id(d_.I_exp, x, selected));
    int experts = biased(mm_id(d_.h, glu(gate, up), selected));
    if (!t_.weight_before_ffn) experts = mul(experts, weights);
    g.expand(experts);
    std::vector<int> each;
    for (int64_t i = 0; i < k; ++i) {
      each.push_back(view(experts, {d_.h, u, 1, 1}, false));
      g.expand(each.back());
    }
    int out = each[0];
    for (int64_t i = 1; i < k; ++i) {
      out = add(out, each[size_t(i)]);
      g.expand(out);
    }
    if (k == 1) out = cont(out, {d_.h, u, 1, 1});
    if (d_.I_shexp > 0) {
      int sh = ffn(cur, d_.I_shexp);
      if (t_.shexp_gate) sh = mul(sh, unary(mm(1, cur)));
      out = add(out, sh);
    }
    return out;
  }
};

// The architectures rebuilt here: llama's block and the model files that differ from it only
// in the traits above (each checked against llama.cpp's logged buffer by the golden cases).
std::optional<Traits> traits_of(const std::string& arch) {
  if (arch == "llama" || arch == "mistral3" || arch == "qwen2" || arch == "qwen2vl" || arch == "qwen3") return Traits{.qk_norm = arch == "qwen3"};
  if (arch == "qwen3moe") return Traits{.qk_norm = true};
  if (arch == "olmoe") return Traits{.qk_norm = true, .norm_topk = false};
  if (arch == "qwen2moe") return Traits{.norm_topk = false, .shexp_gate = true};
  if (arch == "phi3") return Traits{.fused_qkv = true, .fused_gate_up = true, .q_scale = true, .residual_first = true};
  if (arch == "deepseek2") return Traits{};
  if (arch == "gpt-oss") return Traits{.norm_topk = false, .softmax_weight = true, .nextn_output = true};
  // gemma: Q scaled after the rope (query_pre_attn_scalar); gemma3 RMS-norms q and k first.
  if (arch == "gemma") return Traits{.q_scale = true, .embd_scale = true};
  if (arch == "gemma2") return Traits{.q_scale = true, .embd_scale = true, .post_norms = true};
  if (arch == "gemma3") return Traits{.q_scale = true, .qk_norm = true, .embd_scale = true, .post_norms = true};
  if (arch == "olmo2") return Traits{.post_norms = true, .no_pre_norms = true, .qk_norm_flat = true};
  if (arch == "llama4")
    return Traits{.norm_topk = false, .nope_on_full = true, .kq_norm_after_rope = true, .sigmoid_select_logits = true, .weight_before_ffn = true};
  return std::nullopt;
}

}  // namespace

bool has_graph(const std::string& arch) { return traits_of(arch).has_value(); }

// Dimensions a graph can be built from, in bounded time and memory: a header's nonsense
// (no heads, more experts used than there are, thousands of layers) is not rebuilt.
bool buildable(const Dims& d) {
  const auto in = [](int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; };
  constexpr int64_t kDim = int64_t(1) << 31;
  if (!in(d.u, 1, 1 << 24) || !in(d.n_stream, 1, d.u) || d.u % d.n_stream != 0 || !in(d.layers, 1, 4096)) return false;
  if (!in(d.n_kv, 1, kDim) || !in(d.n_kv_swa, 0, kDim) || !in(d.h, 1, kDim) || !in(d.V, 1, kDim) || !in(d.a, 1, 1 << 16)) return false;
  if (d.E > 0 && (!in(d.E, 1, 1 << 16) || !in(d.k, 1, std::min<int64_t>(d.E, 1024)) || !in(d.I_exp, 1, kDim))) return false;
  if (d.groups > 1 && (d.E % d.groups != 0 || d.E / d.groups < 2 || !in(d.groups_used, 1, d.groups - 1))) return false;
  if (!d.moe_layer.empty() && int64_t(d.moe_layer.size()) != d.layers) return false;
  if (!d.swa_layer.empty() && int64_t(d.swa_layer.size()) != d.layers) return false;
  if (d.kv_lora > 0) return in(d.rope, 1, kDim) && in(d.nope, 1, kDim) && in(d.v_head, 1, kDim) && in(d.q_lora, 0, kDim);
  return in(d.a_kv, 1, d.a) && in(d.d_k, 1, kDim) && in(d.d_v, 1, kDim) && in(d.I, 0, kDim);
}

std::optional<ggml_sim::Graph> build(const std::string& arch, const Dims& d) {
  const std::optional<Traits> t = traits_of(arch);
  if (!t || !buildable(d)) return std::nullopt;
  return Decoder(d, *t).build();
}

}  // namespace nunchaku::llamacpp_graph
