// llama.cpp's memory for a workload, as its own log names the buffers (docs/estimate.md,
// "llama.cpp"): the weights it maps (CPU_Mapped) and the copies it repacks (CPU_REPACK), the
// KV cache (n_ctx cells in one stream per sequence; sliding-window layers sized by the window
// unless --swa-full), the output buffer and the compute buffer ggml-alloc plans for the graph
// it reserves (one micro-batch of min(n_ubatch, n_batch, n_ctx) tokens over the whole cache).
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "memory/estimate_detail.hpp"
#include "memory/ggml_graph.hpp"
#include "memory/llamacpp_graph.hpp"
#include "model/arch/record.hpp"
#include "core/units.hpp"

namespace nunchaku::estimate_detail {
namespace {

constexpr uint64_t kCtxPad = 256;  // llama_context pads n_ctx (and n_ctx_seq) to 256 cells

bool has(std::string_view name, std::string_view part) { return name.find(part) != std::string_view::npos; }

// What the reserved graph's buffer depends on, from the spec and the tensors' shapes
// (llama.cpp's GGUF names, or Hugging Face's for a what-if on a safetensors checkpoint).
struct Graph {
  uint64_t h = 0, a = 0, q_dim = 0, kv_dim = 0, I = 0, V = 0;
  uint64_t experts = 0, used = 0, I_exp = 0, I_shared = 0;
  bool dense_layers = true;  // any layer with a dense FFN
  bool mla = false;
  uint64_t kv_lora = 0, rope = 0, nope = 0, v_head = 0;
  bool keeps_residual = false;  // the record's llamacpp_keeps_residual
  // For the rebuilt graph (memory/llamacpp_graph.hpp): llama.cpp's architecture, the layers,
  // the KV heads and their width, biases on q/k/v.
  std::string gguf_arch;
  uint64_t layers = 0, a_kv = 0, head_dim = 0, q_lora = 0;
  bool qkv_bias = false, o_bias = false, router_bias = false, expert_bias = false;
  std::vector<bool> swa_layer;  // per layer: a sliding-window (or chunked) layer of the second cache
  // Routing as DeepSeek's files state it (llama.cpp reads expert_weights_norm / _scale,
  // expert_gating_func and expert_group_count for deepseek2), and exp_probs_b's presence.
  bool norm_topk = false, sigmoid = false, probs_bias = false;
  double w_scale = 0;
  uint64_t groups = 0, groups_used = 0;
  std::vector<bool> dense_ffn;  // per layer: a dense FFN's tensors are there
};

// The layer a tensor belongs to ("blk.N." in GGUF, "layers.N." in Hugging Face names), or -1.
int64_t layer_of(std::string_view n) {
  for (std::string_view key : {std::string_view("blk."), std::string_view("layers.")}) {
    const size_t at = n.find(key);
    if (at == std::string_view::npos) continue;
    int64_t v = 0;
    size_t i = at + key.size();
    if (i >= n.size() || n[i] < '0' || n[i] > '9') continue;
    for (; i < n.size() && n[i] >= '0' && n[i] <= '9' && v < (int64_t(1) << 40); ++i) v = v * 10 + (n[i] - '0');
    return v;
  }
  return -1;
}

uint64_t dim(const TensorInfo& t, size_t from_end) {
  return t.shape.size() > from_end ? uint64_t(std::max<int64_t>(t.shape[t.shape.size() - 1 - from_end], 0)) : 0;
}

void dense_at(Graph& g, std::string_view name) {
  const int64_t l = layer_of(name);
  if (l >= 0 && uint64_t(l) < g.dense_ffn.size()) g.dense_ffn[size_t(l)] = true;
}

Graph graph_of(const Estimate& e, const Checkpoint& ck) {
  const ModelSpec& s = e.spec;
  Graph g;
  g.h = uint64_t(s.hidden_size);
  g.a = uint64_t(s.num_heads);
  g.V = uint64_t(s.vocab_size);
  const ArchRecord* rec = find_record(s.architecture);
  g.keeps_residual = rec && rec->llamacpp_keeps_residual;
  if (rec) g.gguf_arch = std::string(rec->gguf_arch);
  g.layers = uint64_t(std::max<int64_t>(s.num_layers, 0));
  g.a_kv = uint64_t(std::max<int64_t>(s.num_kv_heads, 0));
  g.head_dim = uint64_t(std::max<int64_t>(s.head_dim, 0));
  g.q_lora = uint64_t(std::max<int64_t>(s.q_lora_rank, 0));
  // A Hugging Face DeepSeek with softmax routing, as convert_hf_to_gguf writes it: the norm only
  // where its config says norm_topk_prob true (V2 and V2-Lite say false; a config without
  // the key gets the class default here, which the converter does not write).
  g.norm_topk = s.moe_norm_topk && (s.moe_sigmoid || s.source == "gguf" || s.kv_lora_rank == 0);
  g.w_scale = s.routed_scaling;
  g.sigmoid = s.moe_sigmoid;
  if (s.moe_groups > 1) g.groups = uint64_t(s.moe_groups), g.groups_used = uint64_t(std::max<int64_t>(s.moe_groups_used, 0));
  g.dense_ffn.assign(size_t(std::min<uint64_t>(g.layers, uint64_t(1) << 20)), false);
  g.swa_layer.assign(g.dense_ffn.size(), false);
  for (size_t l = 0; l < g.swa_layer.size(); ++l) {
    const AttnKind k = s.attn_kind(int64_t(l));
    const int64_t win = l < s.layer_windows.size() ? s.layer_windows[l] : s.layer_windows.empty() ? s.sliding_window : 0;
    g.swa_layer[l] = (k == AttnKind::Sliding || k == AttnKind::Chunked || s.layer_attn.empty()) && win > 0;
  }
  g.q_dim = g.a * uint64_t(s.head_dim);
  g.kv_dim = uint64_t(s.num_kv_heads) * uint64_t(s.head_dim);
  g.I = uint64_t(std::max<int64_t>(s.intermediate_size, 0));
  g.experts = uint64_t(std::max<int64_t>(s.num_experts, 0));
  g.used = uint64_t(std::max<int64_t>(s.num_experts_per_tok, 0));
  // The record's expert widths (HF moe_intermediate_size / GGUF expert_feed_forward_length;
  // a shared expert's own size or n_shared × the routed one's); the tensors' rows override.
  g.I_exp = s.moe_intermediate_size > 0 ? uint64_t(s.moe_intermediate_size) : g.I;
  g.I_shared = s.shared_expert_intermediate_size > 0 ? uint64_t(s.shared_expert_intermediate_size)
                                                      : uint64_t(std::max<int64_t>(s.num_shared_experts, 0)) * g.I_exp;
  uint64_t gate_rows = 0, up_rows = 0, fused_rows = 0;  // the first dense FFN's
  for (const auto& t : ck.tensors) {
    const std::string_view n = t.name;
    const auto dense = [&](uint64_t& rows) {  // a dense FFN's matrix: the first one's rows, and its layer
      if (rows == 0) rows = dim(t, 1);
      dense_at(g, n);
    };
    if (has(n, "ffn_gate_exps.weight") || has(n, "ffn_up_exps.weight")) g.I_exp = dim(t, 1);  // [E, I_exp, h] (not the biases: [E, I_exp])
    else if (has(n, ".experts.0.gate_proj.") || has(n, ".experts.0.up_proj.")) g.I_exp = dim(t, 1);  // [I_exp, h]
    else if (has(n, "ffn_gate_shexp") || has(n, "shared_experts.gate_proj")) g.I_shared = dim(t, 1);
    else if (has(n, "ffn_gate.weight") || has(n, "mlp.gate_proj.weight")) dense(gate_rows);
    else if (has(n, "ffn_up.weight") || has(n, "mlp.up_proj.weight")) dense(up_rows);
    else if (has(n, "mlp.gate_up_proj.weight")) dense(fused_rows);
    else if (has(n, "attn_k_b.weight")) g.nope = dim(t, 0);   // [a, kv_lora, nope]
    else if (has(n, "attn_v_b.weight")) g.v_head = dim(t, 1);   // [a, v_head, kv_lora]
    else if (has(n, "attn_q.bias") || has(n, "self_attn.q_proj.bias")) g.qkv_bias = true;
    else if (has(n, "attn_output.bias") || has(n, "self_attn.o_proj.bias")) g.o_bias = true;
    else if (has(n, "ffn_gate_inp.bias") || has(n, "mlp.router.bias")) g.router_bias = true;
    else if (has(n, "ffn_gate_exps.bias") || has(n, "experts.gate_up_proj_bias")) g.expert_bias = true;
    else if (has(n, "exp_probs_b") || has(n, "e_score_correction_bias")) g.probs_bias = true;
  }
  // Gate and up fused in one matrix (phi3: GGUF ffn_up of 2·I rows and no ffn_gate; HF
  // gate_up_proj): the graph splits its output, so the FFN is I wide.
  if (gate_rows == 0 && up_rows > 0 && up_rows == 2 * g.I) fused_rows = up_rows, up_rows = 0;
  if (gate_rows > 0) g.I = gate_rows;
  else if (up_rows > 0) g.I = up_rows;
  else if (fused_rows > 0) g.I = fused_rows / 2;
  g.dense_layers = g.experts == 0 || gate_rows > 0 || up_rows > 0 || fused_rows > 0;
  if (s.kv_lora_rank > 0) {
    g.mla = true;
    g.kv_lora = uint64_t(s.kv_lora_rank);
    g.rope = uint64_t(s.qk_rope_head_dim);
    if (g.nope == 0) g.nope = s.qk_nope_head_dim > 0 ? uint64_t(s.qk_nope_head_dim) : 128;  // DeepSeek-V2/V3's: 128
    if (g.v_head == 0) g.v_head = s.v_head_dim > 0 ? uint64_t(s.v_head_dim) : 128;
  }
  return g;
}

// CPU_REPACK (ggml-cpu's repack.cpp, ggml_repack_get_optimal_repack_type on x86): Q4_0,
// Q4_K, IQ4_NL and MXFP4 with AVX2, Q2_K with AVX-512, when the rows (ne[1]) are a multiple
// of 8; only weights of a matrix multiplication (2-D, or 3-D expert stacks), so not the token
// embedding (get_rows), norms or MLA's per-head k_b / v_b.
// This CPU's instructions (the estimate assumes the run is on the machine it runs on).
struct CpuIsa {
  bool avx2 = false, avx512 = false;
};
CpuIsa this_cpu() {
  CpuIsa c;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  c.avx2 = __builtin_cpu_supports("avx2");
  c.avx512 = __builtin_cpu_supports("avx512f");
#endif
  return c;
}

bool repack_type(DType t, bool avx2, bool avx512) {
  switch (t) {
    case DType::Q4_0:
    case DType::Q4_K:
    case DType::IQ4_NL:
    case DType::MXFP4: return avx2;
    case DType::Q2_K: return avx512;
    default: return false;
  }
}

bool repacked(const TensorInfo& t, bool avx2, bool avx512) {
  if (!repack_type(t.dtype, avx2, avx512) || dim(t, 1) % 8 != 0) return false;
  const std::string_view n = t.name;
  if (t.shape.size() == 3) return has(n, "_exps") || has(n, ".experts.");
  return t.shape.size() == 2 && !has(n, "token_embd") && !has(n, "embed_tokens");
}

struct Weights {
  uint64_t mapped = 0, repack = 0, repack_tensors = 0;
  bool tied_copy = false;  // the output layer repacks a copy of the tied token embedding
};

// The mapped span (first to last byte of the tensors left in the file mapping, per file) and
// the repacked bytes, for a GGUF file read as stored.
Weights weights_of(const Checkpoint& ck, CpuIsa isa) {
  Weights w;
  const bool avx2 = isa.avx2, avx512 = isa.avx512, repack = avx2 || avx512;
  std::vector<std::pair<uint64_t, uint64_t>> span(ck.files.size() + 1, {UINT64_MAX, 0});
  bool head = false;
  // The output layer's own matrix (not blk.N.attn_output.weight).
  for (const auto& t : ck.tensors) head = head || t.name == "output.weight" || has(t.name, "lm_head.");
  for (const auto& t : ck.tensors) {
    const bool embd = has(t.name, "token_embd") || has(t.name, "embed_tokens");
    if (embd && !head && repack && t.shape.size() == 2 && repack_type(t.dtype, avx2, avx512) && dim(t, 1) % 8 == 0) {
      w.repack = add(w.repack, t.nbytes);  // tied: llama.cpp's output layer is a repacked duplicate
      w.tied_copy = true;
    }
    if (repacked(t, avx2, avx512)) {
      w.repack = add(w.repack, t.nbytes);
      ++w.repack_tensors;
      continue;
    }
    auto& [lo, hi] = span[std::min<size_t>(t.file, ck.files.size())];
    lo = std::min(lo, t.offset);
    hi = std::max(hi, t.offset + t.nbytes);
  }
  for (auto [lo, hi] : span)
    if (hi > lo) w.mapped = add(w.mapped, hi - lo);
  return w;
}

// What the reserved graph's size depends on besides the model: its tokens, the cache cells
// attention spans (full and sliding-window) and whether flash attention is on.
struct Reserved {
  uint64_t u = 0, n_kv = 0, n_kv_swa = 0, n_stream = 1;
  uint64_t outputs = 0;  // the rows the last layer keeps: 0 = all u (the graph llama.cpp reserves)
  bool flash = true, kv_quantized = false;
};

// ggml-alloc's plan of llama.cpp's graph for this micro-batch, where the architecture's graph
// is rebuilt (memory/llamacpp_graph.hpp); nullopt otherwise (and with sliding windows, which
// the rebuilt graphs do not hold).
std::optional<Component> planned_compute(const Graph& g, const Reserved& r) {
  if (!llamacpp_graph::has_graph(g.gguf_arch)) return std::nullopt;
  llamacpp_graph::Dims d;
  d.n_stream = int64_t(std::max<uint64_t>(r.n_stream, 1));
  d.outputs = int64_t(r.outputs > 0 ? std::min(r.outputs, r.u) : r.u);
  d.u = (int64_t(r.u) + d.n_stream - 1) / d.n_stream * d.n_stream;  // graph_reserve: a multiple of the sequences
  d.n_kv = int64_t(r.n_kv);
  d.n_kv_swa = int64_t(r.n_kv_swa);
  if (r.n_kv_swa > 0) d.swa_layer = g.swa_layer;
  d.flash = r.flash;
  d.kv_quantized = r.kv_quantized;
  d.h = int64_t(g.h), d.V = int64_t(g.V), d.layers = int64_t(g.layers);
  d.a = int64_t(g.a), d.a_kv = int64_t(g.a_kv), d.d_k = d.d_v = int64_t(g.head_dim);
  d.I = int64_t(g.I), d.qkv_bias = g.qkv_bias, d.o_bias = g.o_bias, d.router_bias = g.router_bias, d.expert_bias = g.expert_bias;
  if (g.experts > 0) {
    d.E = int64_t(g.experts), d.k = int64_t(g.used), d.I_exp = int64_t(g.I_exp), d.I_shexp = int64_t(g.I_shared);
    // Routed experts where a layer has no dense FFN (DeepSeek's first layers are dense).
    d.moe_layer.resize(g.dense_ffn.size());
    for (size_t l = 0; l < g.dense_ffn.size(); ++l) d.moe_layer[l] = !g.dense_ffn[l];
  }
  if (g.mla) {
    d.kv_lora = int64_t(g.kv_lora), d.rope = int64_t(g.rope), d.nope = int64_t(g.nope), d.v_head = int64_t(g.v_head);
    d.q_lora = int64_t(g.q_lora), d.norm_topk = g.norm_topk ? 1 : 0, d.w_scale = g.w_scale;
    d.sigmoid = g.sigmoid, d.probs_bias = g.probs_bias, d.groups = int64_t(g.groups), d.groups_used = int64_t(g.groups_used);
  }
  const std::optional<ggml_sim::Graph> graph = llamacpp_graph::build(g.gguf_arch, d);
  if (!graph) return std::nullopt;
  const ggml_sim::Plan p = ggml_sim::plan(*graph);
  uint64_t alive = 0;
  for (const auto& x : p.at_peak) alive += x.bytes;
  return Component{"activations", p.size,
                   fmt::format("compute buffer: ggml-alloc's plan of llama.cpp's {} graph for one micro-batch of u = {} tokens "
                               "({} sequences, {} cache cells each{}, {} of output): {} tensors alive at its peak ({} B), {} B of "
                               "holes under it",
                               g.gguf_arch, d.u, d.n_stream, d.n_kv, d.flash ? ", flash attention" : "",
                               d.outputs == d.u ? std::string("every token") : plural(uint64_t(d.outputs), "row"), p.at_peak.size(),
                               alive, p.size > alive ? p.size - alive : 0)};
}

// The compute buffer: the largest set of tensors ggml-alloc keeps alive at once in the
// reserved graph (f32), with the holes the llama block leaves in its FFN; not the holes other
// graphs leave under their peak (docs/measured_llamacpp.md, "What the compute buffer is made
// of"). Graph inputs: the KQ masks (f16 with flash attention, f32 without), one per cache
// kind, alive through every layer.
Component compute_buffer(const Graph& g, const Reserved& r, const Workload& w) {
  const uint64_t u = r.u, n_kv = r.n_kv, n_kv_swa = r.n_kv_swa;
  const bool flash = r.flash, windows = n_kv_swa > 0;
  const uint64_t mask = mul({u, add(n_kv, n_kv_swa), flash ? 2u : 4u});
  const uint64_t kq = flash ? 0 : mul({g.a, u, std::max(n_kv, n_kv_swa), 4});
  uint64_t attn = 0;
  if (g.mla) {
    // Absorbed MLA, per head: the query as projected (nope + rope), in the compressed space
    // (kv_lora + rope), the attention output there (kv_lora) and its projection to v_head;
    // with 4·h of residual and norms (DeepSeek-V3's log: 408 MiB at u = 512 besides the mask).
    attn = mul({add(mul({g.a, add(add(add(g.nope, g.rope), add(g.kv_lora, g.rope)), add(g.kv_lora, g.v_head))}), mul({4, g.h})), u, 4});
  } else {
    attn = mul({add(add(mul({3, g.h}), mul({2, g.q_dim})), mul({2, g.kv_dim})), u, 4});
  }
  attn = add(attn, kq);
  const uint64_t ffn_dense = g.dense_layers ? mul({add(mul({3, g.I}), mul({4, g.h})), u, 4}) : 0;
  // MoE: the routed experts' gate, up and their product [I_exp, k, u] alive together, with
  // the residual, the embeddings input and the FFN norm's output (alive, or its hole when no
  // shared expert reads it later); a shared expert runs after them, as a dense FFN.
  const uint64_t ffn_moe = g.experts > 0 ? mul({add(mul({3, g.used, g.I_exp}), mul({3, g.h})), u, 4}) : 0;
  const uint64_t ffn_shared = g.experts > 0 && g.I_shared > 0 ? mul({add(mul({3, g.I_shared}), mul({4, g.h})), u, 4}) : 0;
  const uint64_t layer = std::max({attn, ffn_dense, ffn_moe, ffn_shared});
  // After the last layer: the logits u·V beside the final norm's input and output (u·h each),
  // and the last residual where the graph keeps it as an output (gpt-oss).
  const uint64_t o = r.outputs > 0 ? std::min(r.outputs, u) : u;
  const uint64_t out = mul({o, add(g.V, mul({g.keeps_residual ? 3u : 2u, g.h})), 4});
  std::string ffn = g.dense_layers ? "dense (3·I + 4·h)" : "";
  if (g.experts > 0) {
    ffn += fmt::format("{}routed (3·k·I_exp + 3·h)", ffn.empty() ? "" : ", ");
    if (g.I_shared > 0) ffn += ", shared (3·I_shared + 4·h)";
  }
  return {"activations", std::max(add(layer, mask), out),
          fmt::format("compute buffer for one micro-batch u = min(n_ubatch {}, n_batch {}, n_ctx) = {} (f32): max(layer + KQ mask{} "
                      "u·n_kv({}{})·{} B, output {} rows·(V+{}·h)·4 B); layer = max(attention {}{}, ffn {})·u·4 B",
                      w.ubatch > 0 ? w.ubatch : kLlamaCppUbatch, w.prefill_chunk, u, windows ? "s" : "", n_kv,
                      windows ? fmt::format(" + {}", n_kv_swa) : "", flash ? "2 (f16, flash)" : "4 (f32)", o,
                      g.keeps_residual ? 3 : 2, g.mla ? "(a·(nope + 2·rope + 2·kv_lora + v_head) + 4·h) (MLA)" : "(3·h + 2·q_dim + 2·kv_dim)",
                      flash ? "" : " + KQ a·n_kv", ffn)};
}

// A Hugging Face checkpoint as llama.cpp runs its GGUF: without the sliding window the
// record says llama.cpp drops (every layer's cache and mask span the whole stream).
void drop_windows_llamacpp_drops(Estimate& e, const Checkpoint& ck) {
  ModelSpec& s = e.spec;
  const ArchRecord* r = find_record(s.architecture);
  const bool windowed = s.sliding_window > 0 || !s.layer_windows.empty() ||
                        std::find(s.layer_attn.begin(), s.layer_attn.end(), AttnKind::Sliding) != s.layer_attn.end();
  if (ck.format == Format::GGUF || !r || r->llamacpp_drops_window.empty() || !windowed) return;
  e.notes.push_back(fmt::format("llama.cpp runs {} without its sliding window of {} ({}): every layer's KV cache holds the "
                                "whole context, as its GGUF would", s.architecture, s.sliding_window, r->llamacpp_drops_window));
  s.sliding_window = 0;
  s.layer_attn.clear();
  s.layer_windows.clear();
}

// On the CPU the compute buffer is memory the kernel gives pages to as the run first writes
// them: a run that asks for the last token's logits of each sequence (llama-cli, llama-server,
// llama-cpp-python's Llama) computes graphs whose last layer keeps those rows only, and the
// reserve's u·V logits are never written; --all-logits writes the whole reserve
// (docs/measured_llamacpp.md, "The whole process").
template <class Plan>
Component resident_compute(const Plan& plan_of, Reserved r, const Component& reserve, const Workload& w) {
  if (w.all_logits) {
    Component c = reserve;
    c.formula = "--all-logits: the whole reserve is written; " + c.formula;
    return c;
  }
  r.outputs = r.n_stream;
  Component c = plan_of(r).first;
  c.formula = fmt::format("the pages of llama.cpp's compute buffer ({}, its log line) the run writes: {}", format_bytes(reserve.bytes),
                          c.formula);
  return c;
}

// The output buffer: one row of logits per sequence, as the context reserves it; with
// --all-logits llama.cpp grows it to one row per token of a llama_decode call (n_batch).
Component output_buffer(const Estimate& e, const Graph& g, const Workload& w, uint64_t n_batch) {
  const uint64_t b = uint64_t(std::max<int64_t>(w.batch, 1));
  if (w.all_logits && e.target == Target::Cpu)
    return {"logits", mul({std::max(b, n_batch), g.V, 4}),
            fmt::format("--all-logits: output buffer grown to n_batch({}) rows × vocab({}) × 4 B (one row per token of a "
                        "llama_decode call)", n_batch, g.V)};
  return {"logits", mul({b, g.V, 4}), fmt::format("output buffer n_seq_max({}) × vocab({}) × 4 B", w.batch, g.V)};
}

// A metadata array's length (the GGUF reader summarises long ones as {"array", "length"}).
uint64_t array_length(const nlohmann::json& md, const char* key) {
  const auto it = md.find(key);
  if (it == md.end()) return 0;
  if (it->is_array()) return it->size();
  return it->is_object() && it->contains("length") && (*it)["length"].is_number_unsigned() ? (*it)["length"].get<uint64_t>() : 0;
}

// Bytes per value of the type ggml-cpu converts a matmul's f32 input to for weights of type t
// (its vec_dot_type): Q8_0 for the 32-value blocks, Q8_K for the k-quants, the 16-bit float
// itself; 0 for f32 weights (no conversion).
double input_bytes_per_value(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16:
    case DType::BF16: return 2;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return 292.0 / 256;  // block_q8_K
    default: return 34.0 / 32;             // block_q8_0
  }
}

// ggml-cpu's work buffer (the cplan's work_data, kept at its largest): a matmul's f32 input
// converted to its weights' dot-product type, for u rows (the output layer: one row per
// sequence), and without flash attention the softmaxed scores a·u·n_kv converted to f16 for
// the product with V.
uint64_t work_buffer(const Checkpoint& ck, const Graph& g, const Reserved& r, uint64_t rows_out, std::string* f) {
  uint64_t most = 0;
  std::string what = "none";
  for (const auto& t : ck.tensors) {
    if (t.shape.size() < 2 || has(t.name, "token_embd") || has(t.name, "embed_tokens") || has(t.name, "norm")) continue;
    const bool head = t.name == "output.weight" || has(t.name, "lm_head.");
    const bool experts = t.shape.size() == 3;
    const uint64_t rows = head ? rows_out : experts && (has(t.name, "down") || has(t.name, "w2")) ? mul({r.u, g.used}) : r.u;
    const uint64_t b = uint64_t(input_bytes_per_value(t.dtype) * double(mul({rows, dim(t, 0)})));
    if (b > most) most = b, what = fmt::format("{}: {} rows × {} inputs as {:.4g} B", t.name, rows, dim(t, 0), input_bytes_per_value(t.dtype));
  }
  const uint64_t scores = r.flash ? 0 : mul({g.a, r.u, r.n_kv, 2});
  if (scores > most) most = scores, what = fmt::format("scores a({}) × u({}) × n_kv({}) × 2 B (no flash attention)", g.a, r.u, r.n_kv);
  *f = what;
  return most;
}

// What llama.cpp keeps beside the buffers it logs (measured, docs/measured_llamacpp.md, "The
// whole process"): the vocabulary the loader keeps (vocab-only loads of six SPM and BPE
// vocabularies: a fixed part, per token, per merge), the context's graph metadata (llama.cpp
// sizes its graphs at 8 nodes per tensor of the model), the file pages of llama.cpp's code and
// of the GGUF outside the mapped span (2.6-2.9 MiB in every case), ggml-cpu's work buffer.
constexpr uint64_t kLoaderFixed = 870 << 10, kPerToken = 148, kPerMerge = 161;
constexpr uint64_t kContextFixed = 300 << 10, kPerTensor = 7 << 10, kCodePages = 2816 << 10;

uint64_t llamacpp_state(const Checkpoint& ck, const Graph& g, const Reserved& r, uint64_t rows_out, std::string* f) {
  // A Hugging Face what-if has no GGUF vocabulary: its vocab_size tokens, no merges counted.
  const uint64_t listed = array_length(ck.metadata, "tokenizer.ggml.tokens"), tokens = listed > 0 ? listed : g.V;
  const uint64_t merges = array_length(ck.metadata, "tokenizer.ggml.merges");
  const uint64_t vocab = add(add(kLoaderFixed, mul({kPerToken, tokens})), mul({kPerMerge, merges}));
  const uint64_t graph = add(kContextFixed, mul({kPerTensor, ck.tensors.size()}));
  std::string work_f;
  const uint64_t work = work_buffer(ck, g, r, rows_out, &work_f);
  *f = fmt::format("vocabulary {} ({} + {} B × {} tokens + {} B × {} merges) + the context's graph metadata {} ({} + {} × {} "
                   "tensors) + code and file pages {} + ggml-cpu's work buffer {} ({}); measured, docs/measured_llamacpp.md",
                   format_bytes(vocab), format_bytes(kLoaderFixed), kPerToken, tokens, kPerMerge, merges, format_bytes(graph),
                   format_bytes(kContextFixed), format_bytes(kPerTensor), ck.tensors.size(), format_bytes(kCodePages),
                   format_bytes(work), work_f);
  return add(add(vocab, graph), add(kCodePages, work));
}

}  // namespace

uint64_t add_llamacpp(Estimate& e, const Checkpoint& ck) {
  drop_windows_llamacpp_drops(e, ck);
  const Workload& w = e.workload;
  const ModelSpec& s = e.spec;
  const uint64_t b = uint64_t(std::max<int64_t>(w.batch, 1)), asked = mul({b, uint64_t(w.context)});
  // n_ctx = b × context padded to 256; one stream per sequence of n_ctx / b cells, padded again.
  const uint64_t n_seq_ctx = round_up(round_up(asked, kCtxPad) / b, kCtxPad), n_ctx = mul({n_seq_ctx, b});
  const uint64_t n_batch = std::min<uint64_t>(uint64_t(w.prefill_chunk), asked);
  const uint64_t n_ubatch = std::min<uint64_t>(uint64_t(w.ubatch > 0 ? w.ubatch : kLlamaCppUbatch), n_batch);
  const uint64_t u = std::min(n_ubatch, n_ctx);  // the reserved graph's tokens
  const bool flash = w.attention != Attention::Eager;
  const uint64_t n = gpus(e);

  // KV: sliding-window layers hold min(n_seq_ctx, window + n_ubatch) padded to 256 cells per
  // stream (llama_kv_cache_iswa), all n_seq_ctx with --swa-full. Recurrent layers: one f32
  // state per sequence (llama_memory_recurrent, its r and s rows).
  const KvCells cells{.window_extra = int64_t(n_ubatch), .window_pad = kCtxPad, .full_windows = w.swa_full,
                      .state_dtype = DType::F32};
  set_layer_kv(e, int64_t(n_seq_ctx), int64_t(b), cells);
  const auto swa_of = [&](int64_t win) { return w.swa_full ? n_seq_ctx : std::min(n_seq_ctx, round_up(uint64_t(win) + n_ubatch, kCtxPad)); };
  bool windows = false;
  uint64_t swa_cells = 0;
  int64_t recurrent = 0;
  for (int64_t l = 0; l < s.num_layers; ++l) {
    const AttnKind k = s.attn_kind(l);
    recurrent += k == AttnKind::Recurrent;
    int64_t win = l < int64_t(s.layer_windows.size()) ? s.layer_windows[size_t(l)] : s.layer_windows.empty() ? s.sliding_window : 0;
    if ((k == AttnKind::Sliding || k == AttnKind::Chunked || s.layer_attn.empty()) && win > 0) {
      windows = true;
      swa_cells = std::max(swa_cells, swa_of(win));
    }
  }
  e.gpu.push_back({"kv_cache", sum_kv(e) / n,
                   fmt::format("n_ctx = batch({}) × context({}) padded to {} = {} cells in {} ({} each) × Σ_layers row bytes of "
                               "{} ({}){}{}{}",
                               w.batch, w.context, kCtxPad, n_ctx, plural(b, "stream"), n_seq_ctx, dtype_name(e.kv_dtype),
                               dtype_info(e.kv_dtype).block_elems > 1
                                   ? fmt::format("{} B per {} values", dtype_info(e.kv_dtype).block_bytes, dtype_info(e.kv_dtype).block_elems)
                                   : fmt::format("{} B per value", elem_bytes(e.kv_dtype)),
                               windows ? fmt::format("; sliding-window layers {} cells per stream{}", swa_cells,
                                                     w.swa_full ? " (--swa-full)" : " (window + n_ubatch, padded)")
                                       : "",
                               recurrent > 0 ? fmt::format("; + {} recurrent layers × {} f32 state values per sequence (RS buffer)",
                                                           recurrent, s.recurrent_state_elems)
                                             : "",
                               split_note(e))});

  const Graph g = graph_of(e, ck);
  const Reserved reserved{.u = u, .n_kv = n_seq_ctx, .n_kv_swa = windows ? swa_cells : 0, .n_stream = b, .flash = flash,
                          .kv_quantized = dtype_info(e.kv_dtype).block_elems > 1};
  // The rebuilt graph, where there is one, replaces the formula; the formula first bounds what
  // is planned (a hostile header's dimensions never reach the planner).
  const auto plan_of = [&](const Reserved& r) {
    const Component formula = compute_buffer(g, r, w);
    const std::optional<Component> planned =
        formula.bytes < (uint64_t(1) << 40) && g.layers <= 4096 ? planned_compute(g, r) : std::nullopt;
    return std::pair{planned ? *planned : formula, planned.has_value()};
  };
  const auto [compute, planned] = plan_of(reserved);
  e.llamacpp_compute_buffer = compute.bytes;
  e.gpu.push_back(e.target == Target::Cpu ? resident_compute(plan_of, reserved, compute, w) : compute);
  e.activation_bytes = e.gpu.back().bytes;
  e.gpu.push_back(output_buffer(e, g, w, n_batch));
  e.logits_bytes = e.gpu.back().bytes;
  if (e.target == Target::Cpu)
    e.llamacpp_state = llamacpp_state(ck, g, reserved, w.all_logits ? u : b, &e.llamacpp_state_formula);

  const bool as_stored = ck.format == Format::GGUF && !w.dtype && w.quant.scheme == QuantScheme::None;
  if (e.target == Target::Cpu && as_stored) {
    // nullopt: as this CPU qualifies; true: as an AVX-512 CPU (the golden's machine); false: --no-repack.
    const Weights wt = weights_of(ck, !w.repack ? this_cpu() : *w.repack ? CpuIsa{true, true} : CpuIsa{});
    for (auto& c : e.gpu)
      if (c.name == "weights") {
        c.bytes = wt.mapped;
        c.formula = "CPU_Mapped: the file's span from the first to the last byte of the tensors left in the mapping";
      }
    if (wt.repack > 0)
      e.gpu.push_back({"weights_repacked", wt.repack,
                       fmt::format("CPU_REPACK: {} matrices of a type this CPU's kernels interleave (Q4_0/Q4_K/IQ4_NL/MXFP4 with "
                                   "AVX2, Q2_K with AVX-512), copied at load{}; --no-repack drops it",
                                   wt.repack_tensors + (wt.tied_copy ? 1 : 0), wt.tied_copy ? ", the tied output layer's included" : "")});
  }
  if (e.target == Target::Cuda) {
    // Token embeddings stay in host memory (llama.cpp's input layer is on the CPU).
    for (auto& m : e.modules)
      if (m.kind == ModuleKind::Embedding && m.parameters > 0) {
        const bool tied = std::none_of(e.modules.begin(), e.modules.end(), [](const ModuleCost& x) { return x.kind == ModuleKind::Head && x.parameters > 0; });
        if (tied) continue;  // the output layer reuses it on the GPU
        e.host.push_back({"token_embeddings", m.weight_bytes, "llama.cpp keeps token embeddings in host memory"});
        for (auto& c : e.gpu)
          if (c.name == "weights") c.bytes -= std::min(c.bytes, m.weight_bytes / n);
      }
  }
  e.runtime_model = {
      fmt::format("llama.cpp: flash attention {}, n_ubatch {} (--ubatch), n_batch {} (--prefill-chunk), n_ctx padded to {}",
                  flash ? "on" : "off", n_ubatch, n_batch, kCtxPad),
      fmt::format("KV: {} cells at {} preallocated{}; compute buffer planned once by ggml-alloc{}", n_ctx,
                  dtype_name(e.kv_dtype), windows ? (w.swa_full ? ", sliding-window layers full size (--swa-full)" : ", sliding-window layers window + n_ubatch") : "",
                  planned ? fmt::format(" for {}'s graph as rebuilt here, holes included", g.gguf_arch)
                          : fmt::format(" (llama.cpp's {} graph is not rebuilt here: the tensors alive at its peak are charged, not the holes "
                                        "the plan leaves under it, up to 13 % measured: docs/measured_llamacpp.md)",
                                        g.gguf_arch.empty() ? "unknown" : g.gguf_arch))};
  return 0;
}

}  // namespace nunchaku::estimate_detail
