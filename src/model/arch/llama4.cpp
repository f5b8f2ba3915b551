// llama4 (text): Llama4ForCausalLM / the language model of Llama4ForConditionalGeneration
// (Scout, Maverick). Three chunked-attention layers (attention_chunk_size 8192, with rope)
// then one global NoPE layer (no_rope_layers[i] == 0); llama.cpp: chunked swa, n_swa 8192,
// pattern 4. MoE every interleave_moe_layer_step layers, one shared expert each; the dense
// layers' MLP is intermediate_size_mlp wide, the experts' (and the shared one's)
// intermediate_size (transformers 5.25 models/llama4/modeling_llama4.py).
#include "model/arch/record.hpp"
#include "model/arch/tensor_rules.hpp"
#include "model/recipe.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"llama4_text", "llama4"};

// Llama4TextConfig's moe_layers: listed, else every interleave_moe_layer_step-th layer
// (step - 1, 2 * step - 1, ...). Whether some layer is dense.
bool has_dense_layer(const ConfigFields& f, const ModelSpec& s) {
  if (const nlohmann::json* ml = f.find({"moe_layers"}); ml && ml->is_array()) return int64_t(ml->size()) < s.num_layers;
  return f.integer({"interleave_moe_layer_step"}, kMaxConfigLayers).value_or(1) != 1;
}

// no_rope_layers (1 = rope) when listed, else a NoPE layer every no_rope_layer_interval.
void nope_layers(const ConfigFields& f, ModelSpec& s) {
  if (s.num_layers <= 0 || s.num_layers > kMaxConfigLayers) return;
  const nlohmann::json* nr = f.find({"no_rope_layers"});
  const bool listed = nr && nr->is_array() && !nr->empty();
  const int64_t every = f.integer({"no_rope_layer_interval"}, kMaxConfigLayers).value_or(4);
  s.layer_nope.assign(size_t(s.num_layers), 0);
  for (size_t i = 0; i < s.layer_nope.size(); ++i)
    s.layer_nope[i] = listed ? i < nr->size() && (*nr)[i].is_number() && (*nr)[i].get<double>() == 0
                             : every > 0 && (static_cast<int64_t>(i) + 1) % every == 0;
}

void hf(const ConfigFields& f, ModelSpec& s) {
  apply_defaults(f, s, {.hidden = 5120, .intermediate = 8192, .layers = 48, .heads = 40, .kv_heads = 8, .head_dim = 128,
                        .vocab = 202048, .context = 131072, .rope_theta = 500000, .norm_eps = 1e-5, .experts = 16,
                        .experts_per_tok = 1});
  s.num_shared_experts = 1;
  s.moe_intermediate_size = s.shared_expert_intermediate_size = s.intermediate_size;
  if (has_dense_layer(f, s)) s.intermediate_size = f.integer({"intermediate_size_mlp"}).value_or(16384);
  s.rope_interleaved = true;  // the complex rotation of apply_rotary_emb: pairs (2i, 2i + 1)
  s.qk_norm_unit = f.boolean({"use_qk_norm"}).value_or(true);
  if (f.boolean({"attn_temperature_tuning"}).value_or(true)) {
    s.attn_temp_floor = f.integer({"floor_scale"}).value_or(8192);
    s.attn_temp_scale = f.number({"attn_scale"}).value_or(0.1);
  }
  nope_layers(f, s);
  // attention_chunk_size null: no chunked layer (Llama4TextConfig's layer_types all full).
  const bool unchunked = f.has({"attention_chunk_size"}) && !f.find({"attention_chunk_size"});
  const int64_t chunk = unchunked ? 0 : f.integer({"attention_chunk_size"}).value_or(8192);
  if (pattern_from_layer_types(f, s, chunk) || s.num_layers <= 0 || chunk <= 0) return;
  pattern_all(s, AttnKind::Chunked, chunk);
  for (size_t i = 0; i < s.layer_attn.size() && i < s.layer_nope.size(); ++i)
    if (s.layer_nope[i]) s.layer_attn[i] = AttnKind::Full, s.layer_windows[i] = 0;
}

// llama.cpp (src/models/llama4.cpp) fixes what the converter does not write: chunks of 8192,
// the temperature (floor 8192, scale 0.1) and a NoPE layer every 4 unless the file states
// sliding_window 0 (then none of them); q/k norms except with 128 experts (Maverick). Rope
// pairs (2i, 2i + 1) over the unpermuted weights; the converter writes intermediate_size_mlp
// as feed_forward_length and the experts' (the shared one's too) as expert_feed_forward_length.
void gguf(const ConfigFields& f, const std::string& arch, ModelSpec& s) {
  s.rope_interleaved = true;
  s.num_shared_experts = 1;
  s.qk_norm_unit = s.num_experts != 128;
  const nlohmann::json* ff = f.find({arch + ".feed_forward_length"});
  if (ff && ff->is_number_integer() && f.integer({arch + ".interleave_moe_layer_step"}, kMaxConfigLayers).value_or(1) != 1)
    s.intermediate_size = ff->get<int64_t>();
  s.shared_expert_intermediate_size = f.integer({arch + ".expert_feed_forward_length"}).value_or(0);
  // llama-model.cpp: a stated sliding_window of 0 turns chunking off.
  if (f.has({arch + ".attention.sliding_window"}) && s.sliding_window == 0) return;
  s.attn_temp_floor = 8192;
  s.attn_temp_scale = 0.1;
  if (s.num_layers > 0 && s.num_layers <= kMaxConfigLayers) {
    s.layer_nope.assign(size_t(s.num_layers), 0);
    for (size_t i = 0; i < s.layer_nope.size(); ++i) s.layer_nope[i] = (i + 1) % 4 == 0;
  }
  if (!s.layer_attn.empty()) return;  // the file stated its pattern
  const int64_t chunk = s.sliding_window > 0 ? s.sliding_window : 8192;
  s.sliding_window = chunk;
  pattern_every_nth_full(s, 4);
  for (auto& k : s.layer_attn)
    if (k == AttnKind::Sliding) k = AttnKind::Chunked;
}

// Routed experts: the top k router logits, sigmoid of each, the experts' input scaled by it;
// the shared expert added as is. Weightless q/k norms, NoPE layers with the query temperature.
void recipe(const ModelSpec& s, BlockRecipe& r) {
  recipe_moe(s, r);
  r.routing = Routing::SigmoidTopk;
  r.norm_topk = false;
  r.expert_input_weighted = true;
  r.qk_norm_unit = s.qk_norm_unit;
  r.attn_temp_floor = s.attn_temp_floor;
  r.attn_temp_scale = float(s.attn_temp_scale);
}

constexpr ArchEntry kTensors[] = {
    {"llama4", Naming::HF, tensor_rules::kModelOrWrappedRoots, "layers.", tensor_rules::kLlamaGlobalsHF, tensor_rules::kLlama4HF},
    {"llama4", Naming::GGUF, tensor_rules::kGGUFRoots, "blk.", tensor_rules::kLlamaGlobalsGGUF, tensor_rules::kLlama4GGUF},
};
}  // namespace
extern const ArchRecord kLlama4{.family = "llama4", .names = kNames, .hf_class = "Llama4ForCausalLM",
                         .hf_rotary_module = true, .hf_config = hf, .gguf = gguf, .recipe = recipe, .tensors = kTensors,
                         .gguf_arch = "llama4"};
}  // namespace nunchaku::arch
