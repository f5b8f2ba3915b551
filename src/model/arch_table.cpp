#include "model/arch_table.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

#include "model/arch/record.hpp"
#include "model/arch/tensor_rules.hpp"

namespace nunchaku {

namespace {

using tensor_rules::Rules;

// Every family record's rows (ArchRecord::tensors), in the registry's order.
const std::vector<ArchEntry>& table() {
  static const std::vector<ArchEntry> t = [] {
    std::vector<ArchEntry> v;
    for (const ArchRecord* r : all_records()) v.insert(v.end(), r->tensors.begin(), r->tensors.end());
    return v;
  }();
  return t;
}

}  // namespace

std::span<const ArchEntry> arch_table() { return table(); }

std::string_view role_name(Role r) {
  static constexpr std::string_view kNames[kRoleCount] = {
      "none",   "embed",  "final_norm", "head",    "rope_freqs", "attn_norm", "q",        "k",
      "v",      "o",      "q_bias",     "k_bias",  "v_bias",     "o_bias",    "q_norm",   "k_norm",
      "ffn_norm", "gate", "up",         "down",    "gate_bias",  "up_bias",   "down_bias",
      "post_attn_norm", "post_ffn_norm", "qkv", "gate_up",
      "router", "expert_gate", "expert_up", "expert_down", "expert_gate_up",
      "shared_gate", "shared_up", "shared_down", "shared_expert_gate",
      "sinks", "router_bias", "expert_gate_up_mixed", "expert_gate_up_bias", "expert_down_bias",
      "expert_gate_up_scales", "expert_down_scales", "rope_factors_long", "rope_factors_short",
      "expert_gate_bias", "expert_up_bias",
      "q_a", "q_a_norm", "q_b", "kv_a", "kv_a_norm", "kv_b", "k_b", "v_b", "exp_probs_bias",
      "expert_gate_up_in"};
  return kNames[size_t(r)];
}

namespace {

Role role_in(Rules rules, std::string_view rest) {
  for (const auto& r : rules)
    if (r.role != Role::None && match_rule(r.name, rest)) return r.role;
  return Role::None;
}

// The tensor's name relative to a module named `prefix` ("" when it is not inside it).
std::optional<std::string_view> inside(std::string_view tensor, std::string_view prefix) {
  if (tensor.size() <= prefix.size() + 1 || !tensor.starts_with(prefix) || tensor[prefix.size()] != '.')
    return std::nullopt;
  return tensor.substr(prefix.size() + 1);
}

}  // namespace

Role tensor_role(std::string_view family, const Module& m, std::string_view tensor_name, Naming* naming) {
  auto rest = inside(tensor_name, m.name);
  if (!rest) return Role::None;
  auto found = [naming](const ArchEntry& e, Role r) {
    if (naming) *naming = e.naming;
    return r;
  };
  for (const ArchEntry& e : table()) {
    if (e.family != family) continue;
    for (std::string_view root : e.roots) {
      if (m.kind == ModuleKind::Layer) {
        const std::string stack = std::string(root) + std::string(e.layers);
        if (!m.name.starts_with(stack) || m.name != stack + std::to_string(m.layer)) continue;
        for (const LayerSlot& slot : e.layer)
          for (Rules alt : slot.alternatives)
            if (Role r = role_in(alt, *rest); r != Role::None) return found(e, r);
      } else {
        for (const GlobalModule& g : e.globals) {
          const std::string full = (g.under_root ? std::string(root) : outside_prefix(root)) + std::string(g.name);
          if (g.kind == m.kind && m.name == full)
            if (Role r = role_in(g.tensors, *rest); r != Role::None) return found(e, r);
        }
      }
    }
  }
  return Role::None;
}

std::optional<std::string> tensor_name_for(std::string_view family, Naming naming, ModuleKind kind, int64_t layer,
                                           Role r) {
  if (r == Role::None) return std::nullopt;
  for (const ArchEntry& e : table()) {
    if (e.family != family || e.naming != naming) continue;
    const std::string root(e.roots.front());
    if (kind == ModuleKind::Layer) {
      for (const LayerSlot& slot : e.layer)
        for (Rules alt : slot.alternatives)
          for (const TensorRule& t : alt)
            if (t.role == r) return root + std::string(e.layers) + std::to_string(layer) + "." + std::string(t.name);
    } else {
      for (const GlobalModule& g : e.globals)
        if (g.kind == kind)
          for (const TensorRule& t : g.tensors)
            if (t.role == r) return (g.under_root ? root : std::string()) + std::string(g.name) + "." + std::string(t.name);
    }
  }
  return std::nullopt;
}

std::string outside_prefix(std::string_view root) { return root == "language_model.model." ? "language_model." : ""; }

void assign_roles(const Checkpoint& ck, ModelLayout& layout) {
  const std::string family = layout.spec ? layout.spec->architecture : "";
  for (Module& m : layout.modules) {
    m.roles.assign(m.tensors.size(), Role::None);
    if (family.empty()) continue;
    for (size_t i = 0; i < m.tensors.size(); ++i)
      m.roles[i] = tensor_role(family, m, ck.tensors[m.tensors[i]].name, &layout.naming);
  }
}

bool is_known_family(std::string_view family) {
  return std::any_of(table().begin(), table().end(),
                     [&](const ArchEntry& e) { return e.family == family; });
}

std::optional<std::vector<int64_t>> eval_shape(std::string_view shape, const ModelSpec& s) {
  if (shape == "*") return std::nullopt;
  const int64_t q = s.num_heads * s.head_dim, kv = s.num_kv_heads * s.head_dim;
  std::vector<int64_t> out;
  size_t i = 0;
  while (i < shape.size()) {
    size_t j = shape.find(' ', i);
    if (j == std::string_view::npos) j = shape.size();
    std::string_view sym = shape.substr(i, j - i);
    i = j + 1;
    int64_t v = 0;
    if (sym == "H") v = s.hidden_size;
    else if (sym == "I") v = s.intermediate_size;
    else if (sym == "2I") v = 2 * s.intermediate_size;
    else if (sym == "V") v = s.vocab_size;
    else if (sym == "CTX") v = s.max_context;
    else if (sym == "HD") v = s.head_dim;
    else if (sym == "Q") v = q;
    else if (sym == "KV") v = kv;
    else if (sym == "QKV") v = (s.num_heads && s.num_kv_heads && s.head_dim) ? q + 2 * kv : 0;
    else if (sym == "3H") v = 3 * s.hidden_size;
    else if (sym == "E") v = s.num_experts;
    else if (sym == "1") v = 1;
    else if (sym == "EI") v = s.moe_intermediate_size;
    else if (sym == "2EI") v = 2 * s.moe_intermediate_size;
    else if (sym == "SI") v = s.shared_expert_intermediate_size;
    // MLA (0 where the spec does not know the width: unchecked)
    else if (sym == "NH") v = s.num_heads;
    else if (sym == "QL") v = s.q_lora_rank;
    else if (sym == "KVL") v = s.kv_lora_rank;
    else if (sym == "KVR") v = s.kv_lora_rank && s.qk_rope_head_dim ? s.kv_lora_rank + s.qk_rope_head_dim : 0;
    else if (sym == "NOPE") v = s.qk_nope_head_dim;
    else if (sym == "VHD") v = s.v_head_dim;
    else if (sym == "KVB") v = s.qk_nope_head_dim && s.v_head_dim ? s.num_heads * (s.qk_nope_head_dim + s.v_head_dim) : 0;
    else if (sym == "OV") v = s.num_heads * s.v_head_dim;
    out.push_back(v);
  }
  return out;
}

bool match_rule(std::string_view rule, std::string_view name, int64_t* expert) {
  size_t hash = rule.find('#');
  if (hash == std::string_view::npos) {
    if (expert) *expert = -1;
    return rule == name;
  }
  std::string_view pre = rule.substr(0, hash), post = rule.substr(hash + 1);
  if (name.size() < pre.size() + post.size() + 1 || !name.starts_with(pre) || !name.ends_with(post))
    return false;
  std::string_view digits = name.substr(pre.size(), name.size() - pre.size() - post.size());
  if (digits.empty() || digits.size() > 9) return false;
  int64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (expert) *expert = v;
  return true;
}

std::optional<LayerPath> layer_path(std::string_view name) {
  size_t start = 0;
  while (start < name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) break;
    std::string_view word = name.substr(start, dot - start);
    if (word == "layers" || word == "block" || word == "h" || word == "blocks" || word == "blk" || word == "layer" ||
        word == "transformer_blocks" || word == "single_transformer_blocks") {
      size_t end = dot + 1;
      int64_t v = 0;
      while (end < name.size() && name[end] >= '0' && name[end] <= '9' && end - dot <= 9) {
        v = v * 10 + (name[end] - '0');
        ++end;
      }
      // "N" must be a whole component followed by more path ("layers.3.attn"), not "layers.3"
      // alone nor "layers.3x".
      if (end > dot + 1 && end < name.size() && name[end] == '.')
        return LayerPath{std::string(name.substr(0, end)), v};
    }
    start = dot + 1;
  }
  return std::nullopt;
}

std::string module_of(std::string_view name) {
  size_t dot = name.rfind('.');
  return std::string(dot == std::string_view::npos ? name : name.substr(0, dot));
}

ModuleKind guess_global_kind(std::string_view module) {
  size_t dot = module.rfind('.');
  std::string_view last = dot == std::string_view::npos ? module : module.substr(dot + 1);
  for (std::string_view e : {"embed_tokens", "wte", "wpe", "token_embd", "position_embd", "tok_embeddings",
                             "word_embeddings", "embed_in"})
    if (last == e) return ModuleKind::Embedding;
  for (std::string_view e : {"norm", "ln_f", "output_norm", "final_layernorm", "final_layer_norm",
                             "final_norm"})
    if (last == e) return ModuleKind::FinalNorm;
  for (std::string_view e : {"lm_head", "output", "embed_out"})
    if (last == e) return ModuleKind::Head;
  return ModuleKind::Other;
}

}  // namespace nunchaku
