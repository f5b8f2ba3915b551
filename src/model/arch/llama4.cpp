// llama4 (text): Llama4ForCausalLM / the language model of Llama4ForConditionalGeneration
// (Scout, Maverick). Three chunked-attention layers (attention_chunk_size 8192, with rope)
// then one global NoPE layer (no_rope_layers[i] == 0); llama.cpp: chunked swa, n_swa 8192,
// pattern 4. MoE every interleave_moe_layer_step layers, one shared expert each.
#include "model/arch/record.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"llama4_text", "llama4"};
void hf(const ConfigFields& f, ModelSpec& s) {
  apply_defaults(f, s, {.hidden = 5120, .intermediate = 8192, .layers = 48, .heads = 40, .kv_heads = 8, .head_dim = 128,
                        .vocab = 202048, .context = 131072, .rope_theta = 500000, .norm_eps = 1e-5, .experts = 16,
                        .experts_per_tok = 1});
  s.num_shared_experts = 1;
  const int64_t chunk = f.integer({"attention_chunk_size"}).value_or(8192);
  if (pattern_from_layer_types(f, s, chunk) || s.num_layers <= 0) return;
  pattern_all(s, AttnKind::Chunked, chunk);
  const nlohmann::json* nr = f.find({"no_rope_layers"});
  const bool listed = nr && nr->is_array() && nr->size() == s.layer_attn.size();
  const int64_t every = f.integer({"no_rope_layer_interval"}, kMaxConfigLayers).value_or(4);
  for (size_t i = 0; i < s.layer_attn.size(); ++i) {
    const bool nope = listed ? ((*nr)[i].is_number() && (*nr)[i].get<double>() == 0)
                             : every > 0 && (static_cast<int64_t>(i) + 1) % every == 0;
    if (nope) s.layer_attn[i] = AttnKind::Full, s.layer_windows[i] = 0;
  }
}
void gguf(const ConfigFields& f, const std::string& arch, ModelSpec& s) {
  if (!s.layer_attn.empty()) return;  // the file stated its pattern
  // llama-model.cpp: a stated sliding_window of 0 turns chunking off.
  if (f.has({arch + ".attention.sliding_window"}) && s.sliding_window == 0) return;
  const int64_t chunk = s.sliding_window > 0 ? s.sliding_window : 8192;
  s.sliding_window = chunk;
  pattern_every_nth_full(s, 4);
  for (auto& k : s.layer_attn)
    if (k == AttnKind::Sliding) k = AttnKind::Chunked;
}
}  // namespace
extern const ArchRecord kLlama4{.family = "llama4", .names = kNames, .hf_class = "Llama4ForCausalLM",
                         .hf_rotary_module = true, .hf_config = hf, .gguf = gguf, .gguf_arch = "llama4"};
}  // namespace nunchaku::arch
