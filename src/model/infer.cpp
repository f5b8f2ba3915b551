// Best-effort ModelSpec from tensor names and shapes alone (no config.json, no GGUF
// metadata). What cannot be read off a shape stays 0: notably the head count, which needs
// head_dim, and head_dim appears in a shape only with q/k norms (qwen3) or a saved rotary
// inv_freq buffer. describe_model reports the gaps as warnings.
#include <algorithm>
#include <map>
#include <set>

#include "model/arch/record.hpp"
#include "model/arch_table.hpp"
#include "model/model.hpp"

namespace nunchaku {

namespace {

bool ends_with(std::string_view s, std::string_view suf) { return s.ends_with(suf); }

// First tensor whose name ends with one of `suffixes` (in the order given) at a component
// boundary, either among global tensors (layer == -1) or within layer `layer`.
// `layer_of` holds each tensor's layer index (-1 = global), computed once.
const TensorInfo* find_suffix(const Checkpoint& ck, const std::vector<int64_t>& layer_of,
                              std::initializer_list<std::string_view> suffixes, int64_t layer = -1) {
  for (auto suf : suffixes)
    for (size_t i = 0; i < ck.tensors.size(); ++i) {
      const auto& n = ck.tensors[i].name;
      if (layer_of[i] != layer || !ends_with(n, suf)) continue;
      if (n.size() > suf.size() && n[n.size() - suf.size() - 1] != '.') continue;  // "xwte.weight"
      return &ck.tensors[i];
    }
  return nullptr;
}

// The family whose record marks a tensor name first (records by guess_rank), else "unknown".
std::string guess_family(const Checkpoint& ck, bool gguf_names) {
  std::vector<const ArchRecord*> ranked;
  for (const ArchRecord* r : all_records())
    if (r->guess_rank > 0) ranked.push_back(r);
  std::sort(ranked.begin(), ranked.end(), [](auto* a, auto* b) { return a->guess_rank < b->guess_rank; });
  for (const ArchRecord* r : ranked)
    for (const NameMark& m : r->marks) {
      if (m.gguf_only && !gguf_names) continue;
      for (const TensorInfo& t : ck.tensors)
        if (t.name.find(m.part) != std::string::npos) return std::string(r->family);
    }
  return "unknown";
}

}  // namespace

std::optional<ModelSpec> spec_from_tensors(const Checkpoint& ck) {
  ModelSpec s;
  s.source = "inferred";

  std::set<int64_t> layers;
  std::vector<int64_t> layer_of(ck.tensors.size(), -1);
  for (size_t i = 0; i < ck.tensors.size(); ++i)
    if (auto lp = layer_path(ck.tensors[i].name)) {
      layers.insert(lp->index);
      layer_of[i] = lp->index;
    }
  const int64_t first_layer = layers.empty() ? -1 : *layers.begin();
  const TensorInfo* embed = find_suffix(ck, layer_of, {"embed_tokens.weight", "wte.weight", "token_embd.weight",
                                             "tok_embeddings.weight", "word_embeddings.weight", "embed_in.weight"});
  if (layers.empty() && !embed) return std::nullopt;
  // Highest index + 1, unless a name claims an absurd index: then the count actually present,
  // so a hostile name cannot make later stages size per-layer tables from it.
  s.num_layers = layers.empty() ? 0 : *layers.rbegin() + 1;
  if (s.num_layers > (1 << 16)) s.num_layers = static_cast<int64_t>(layers.size());

  if (embed && embed->shape.size() == 2) {
    s.vocab_size = embed->shape[0];
    s.hidden_size = embed->shape[1];
  }
  const TensorInfo* head = find_suffix(ck, layer_of, {"lm_head.weight", "output.weight", "embed_out.weight"});
  s.tie_word_embeddings = embed && !head;
  if (const TensorInfo* wpe = find_suffix(ck, layer_of, {"wpe.weight", "position_embd.weight"}); wpe && wpe->shape.size() == 2)
    s.max_context = wpe->shape[0];

  const int64_t L = first_layer;
  auto in_layer = [&](std::initializer_list<std::string_view> sufs) { return find_suffix(ck, layer_of, sufs, L); };
  bool gguf_names = std::any_of(ck.tensors.begin(), ck.tensors.end(),
                                [](const TensorInfo& t) { return t.name.starts_with("blk."); });

  // Intermediate size from the first layer's MLP (Linear: (I, H); GPT-2 Conv1D: (H, I)).
  if (auto* t = in_layer({"mlp.gate_proj.weight", "mlp.up_proj.weight", "ffn_gate.weight", "w1.weight",
                          "ffn_gate_exps.weight"});
      t && t->shape.size() >= 2)
    s.intermediate_size = t->shape[t->shape.size() - 2];
  else if (auto* c = in_layer({"mlp.c_fc.weight"}); c && c->shape.size() == 2)
    s.intermediate_size = c->shape[1];
  else if (auto* gu = in_layer({"mlp.gate_up_proj.weight"}); gu && gu->shape.size() == 2)
    s.intermediate_size = gu->shape[0] / 2;
  else if (auto* fu = in_layer({"mlp.experts.gate_up_proj"}); fu && fu->shape.size() == 3)
    s.intermediate_size = fu->shape[1] / 2;
  else if (auto* up = in_layer({"ffn_up.weight"}); up && up->shape.size() == 2)
    s.intermediate_size = up->shape[0];
  if (s.hidden_size == 0)
    if (auto* n = in_layer({"input_layernorm.weight", "attn_norm.weight", "ln_1.weight"}); n && n->shape.size() == 1)
      s.hidden_size = n->shape[0];

  // Experts: the router is (E, H).
  if (auto* r = in_layer({"block_sparse_moe.gate.weight", "mlp.gate.weight", "ffn_gate_inp.weight"});
      r && r->shape.size() == 2)
    s.num_experts = r->shape[0];

  // head_dim from q_norm (HD) or a rotary inv_freq buffer (HD/2); then heads from q/k rows.
  if (auto* qn = in_layer({"self_attn.q_norm.weight", "attn_q_norm.weight"}); qn && qn->shape.size() == 1)
    s.head_dim = qn->shape[0];
  else if (auto* rot = in_layer({"rotary_emb.inv_freq"}); rot && rot->shape.size() == 1)
    s.head_dim = 2 * rot->shape[0];
  if (s.head_dim > 0) {
    auto* q = in_layer({"self_attn.q_proj.weight", "attn_q.weight"});
    auto* k = in_layer({"self_attn.k_proj.weight", "attn_k.weight"});
    if (q && q->shape.size() == 2) s.num_heads = q->shape[0] / s.head_dim;
    if (k && k->shape.size() == 2) s.num_kv_heads = k->shape[0] / s.head_dim;
  }

  // Family from the tensor naming: the records' marks, in their guess_rank order (llama,
  // mistral and gemma are indistinguishable by names; llama is tried last).
  s.architecture = guess_family(ck, gguf_names);
  // Storage dtype: the one holding the most parameters.
  std::map<std::string, uint64_t> by_dtype;
  for (const auto& t : ck.tensors) by_dtype[std::string(dtype_name(t.dtype))] += t.numel();
  uint64_t best = 0;
  for (const auto& [name, n] : by_dtype)
    if (n > best) best = n, s.dtype = name;
  return s;
}

}  // namespace nunchaku
