#include "model/recipe.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "model/arch/record.hpp"

namespace nunchaku {
namespace {

std::string rope_type(const nlohmann::json& rs) {
  if (!rs.is_object()) return "default";
  for (const char* k : {"rope_type", "type"})
    if (auto it = rs.find(k); it != rs.end() && it->is_string()) return it->get<std::string>();
  return "default";
}

double number_or(const nlohmann::json& j, const char* key, double fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

// longrope's attention factor (transformers' _compute_longrope_parameters): cos and sin are
// scaled by it, so the rotated values of q and k are (the others are not: partial rotary).
double longrope_attention_factor(const ModelSpec& s) {
  const double orig = number_or(s.rope_scaling, "original_max_position_embeddings", 0);
  double factor = number_or(s.rope_scaling, "factor", 0);
  if (factor <= 0 && orig > 0 && s.max_context > 0) factor = double(s.max_context) / orig;
  const double given = number_or(s.rope_scaling, "attention_factor", 0);
  if (given > 0) return given;
  return factor > 1.0 && orig > 1 ? std::sqrt(1 + std::log(factor) / std::log(orig)) : 1.0;
}

// hidden_act as the engine runs it; `error` says why not.
Activation activation_of(const ModelSpec& s, std::string& error) {
  const std::string& a = s.hidden_act;
  if (a.empty() || a == "silu" || a == "swish") return Activation::Silu;
  if (a == "gelu_pytorch_tanh" || a == "gelu_tanh" || a == "gelu_new") return Activation::GeluTanh;
  error = "activation '" + a + "' is not supported by the engine (supported: silu, gelu_pytorch_tanh)";
  return Activation::Silu;
}

}  // namespace

double yarn_mscale(double factor, double m) { return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; }

std::string_view norm_kind_name(NormKind k) {
  switch (k) {
    case NormKind::Rms: return "rms";
    case NormKind::RmsOnePlus: return "rms(1+w)";
    case NormKind::Layer: return "layer";
  }
  return "?";
}

std::string_view activation_name(Activation a) { return a == Activation::Silu ? "silu" : "gelu-tanh"; }

std::string_view expert_activation_name(const BlockRecipe& r) {
  return r.clamped_swiglu ? "clamped-swiglu" : activation_name(r.act);
}

double yarn_attention_factor(const nlohmann::json& rs, int64_t max_context) {
  const double given = number_or(rs, "attention_factor", 0);
  if (given > 0) return given;
  double factor = number_or(rs, "factor", 0);
  const double orig = number_or(rs, "original_max_position_embeddings", 0);
  if (factor <= 0 && orig > 0 && max_context > 0) factor = double(max_context) / orig;
  const double m = number_or(rs, "mscale", 0), all = number_or(rs, "mscale_all_dim", 0);
  if (m != 0 && all != 0) return yarn_mscale(factor, m) / yarn_mscale(factor, all);
  return yarn_mscale(factor, 1);
}

int64_t kv_positions(const LayerRecipe& l, int64_t max_context, int64_t max_tokens) {
  if (l.window <= 0) return max_context;
  return std::min(max_context, l.window + std::max<int64_t>(1, max_tokens) - 1);
}

std::string engine_families() {
  std::string out;
  for (const ArchRecord* r : all_records())
    if (r->recipe && !r->wrapper) out += (out.empty() ? "" : ", ") + std::string(r->family);
  return out;
}

void recipe_llama(const ModelSpec&, BlockRecipe&) {}

void recipe_moe(const ModelSpec& s, BlockRecipe& r) {
  r.experts = s.num_experts;
  r.top_k = s.num_experts_per_tok;
  r.norm_topk = s.moe_norm_topk;
  if (r.experts <= 0 || r.top_k <= 0 || r.top_k > std::min<int64_t>(r.experts, 64))
    r.unsupported = fmt::format("'{}' with {} experts and {} per token cannot be routed (at most 64 per token)", s.architecture,
                                s.num_experts, s.num_experts_per_tok);
}

void recipe_gemma(const ModelSpec& s, BlockRecipe& r, bool post_norms) {
  r.norm = s.source == "gguf" ? NormKind::Rms : NormKind::RmsOnePlus;  // convert_hf_to_gguf stores 1 + w
  r.embed_scale = float(std::sqrt(double(s.hidden_size)));
  r.post_attn_norm = r.post_ffn_norm = post_norms;
  // transformers runs every gemma with the tanh GELU, whatever hidden_act says (Gemma 1 configs
  // on the Hub say "gelu"); only hidden_activation overrides it.
  r.act = Activation::GeluTanh;
  r.act_fixed = true;
}

BlockRecipe recipe_for(const ModelSpec& s) {
  BlockRecipe r;
  const std::string& fam = s.architecture;
  const int64_t heads = s.num_heads, hd = s.head_dim > 0 ? s.head_dim : (heads > 0 ? s.hidden_size / heads : 0);
  std::string act_error;
  r.act = activation_of(s, act_error);
  r.tied_head = s.tie_word_embeddings;
  r.attn_softcap = float(s.attn_logit_softcap);
  r.final_softcap = float(s.final_logit_softcap);
  r.attn_scale = s.query_pre_attn_scalar > 0 ? float(1.0 / std::sqrt(s.query_pre_attn_scalar)) : 1.0f / std::sqrt(float(hd));
  const ArchRecord* rec = find_record(fam);
  if (rec && rec->recipe) rec->recipe(s, r);
  if (!rec || !rec->recipe)
    r.unsupported = "architecture '" + fam + "' is not supported by the engine";
  else if (!r.act_fixed && !act_error.empty())
    r.unsupported = act_error;
  else if (s.num_experts > 0 && r.experts == 0)
    r.unsupported = "mixture-of-experts layers of '" + fam + "' are not supported by the engine";

  int64_t dims = s.partial_rotary_factor > 0 && s.partial_rotary_factor < 1 ? int64_t(double(hd) * s.partial_rotary_factor) : hd;
  if (r.rope_dims > 0) dims = r.rope_dims;
  dims -= dims % 2;
  const bool longrope = rope_type(s.rope_scaling) == "longrope" || rope_type(s.rope_scaling) == "su";
  nlohmann::json scaling = s.rope_scaling.is_object() ? s.rope_scaling : r.rope_scaling_default;
  const bool yarn = rope_type(scaling) == "yarn";
  if (yarn && !scaling.contains("original_max_position_embeddings") && s.max_context > 0)
    scaling["original_max_position_embeddings"] = s.max_context;  // transformers' standardize_rope_params
  const float mscale = longrope ? float(longrope_attention_factor(s)) : yarn ? float(yarn_attention_factor(scaling, s.max_context)) : 1.0f;
  r.ropes.push_back({s.rope_theta > 0 ? s.rope_theta : 10000.0, scaling, dims, mscale});
  const bool local_rope = r.sliding_rope && s.rope_local_theta > 0;
  if (local_rope) r.ropes.push_back({s.rope_local_theta, nullptr, dims});

  r.layers.resize(size_t(std::max<int64_t>(0, s.num_layers)));
  for (size_t l = 0; l < r.layers.size(); ++l) {
    LayerRecipe& L = r.layers[l];
    L.window = s.layer_windows.size() == r.layers.size() ? s.layer_windows[l] : s.sliding_window;
    L.rope = local_rope && L.window > 0 ? 1 : 0;
    L.chunked = L.window > 0 && l < s.layer_attn.size() && s.layer_attn[l] == AttnKind::Chunked;
    L.nope = l < s.layer_nope.size() && s.layer_nope[l] != 0;
  }
  return r;
}

}  // namespace nunchaku
