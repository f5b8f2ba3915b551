// jamba: JambaForCausalLM (AI21 Jamba), a hybrid: one attention layer in attn_layer_period
// (at attn_layer_offset), Mamba layers otherwise. A Mamba layer keeps per sequence a conv
// state d_inner × (d_conv - 1) and an SSM state d_inner × d_state (d_inner = expand × H),
// whatever the context; no positional embeddings. MoE every expert_layer_period layers.
#include <algorithm>

#include "model/arch/record.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"jamba"};
void hf(const ConfigFields& f, ModelSpec& s) {
  apply_defaults(f, s, {.hidden = 4096, .intermediate = 14336, .layers = 32, .heads = 32, .kv_heads = 8,
                        .vocab = 65536, .context = 262144, .norm_eps = 1e-6, .experts = 16, .experts_per_tok = 2});
  const int64_t period = f.integer({"attn_layer_period"}, kMaxConfigLayers).value_or(8);
  const int64_t offset = f.integer({"attn_layer_offset"}, kMaxConfigLayers).value_or(4);
  const int64_t d_inner = f.integer({"mamba_expand"}).value_or(2) * s.hidden_size;
  s.recurrent_state_elems = d_inner * (f.integer({"mamba_d_conv"}).value_or(4) - 1) +
                            d_inner * f.integer({"mamba_d_state"}).value_or(16);
  pattern_all(s, AttnKind::Recurrent, 0);
  for (size_t i = 0; i < s.layer_attn.size(); ++i)
    if (period > 0 && static_cast<int64_t>(i) % period == offset) s.layer_attn[i] = AttnKind::Full;
}
// GGUF "jamba" (convert_hf_to_gguf): head_count_kv per layer, 0 on a Mamba layer (llama.cpp's
// is_recr); the state per sequence is n_embd_r = (d_conv - 1) × (d_inner + 2 × groups ×
// d_state) plus n_embd_s = d_state × d_inner (llama-hparams.cpp).
void gguf(const ConfigFields& f, const std::string& arch, ModelSpec& s) {
  const int64_t d_inner = f.integer({arch + ".ssm.inner_size"}).value_or(0);
  const int64_t d_conv = f.integer({arch + ".ssm.conv_kernel"}).value_or(0);
  const int64_t d_state = f.integer({arch + ".ssm.state_size"}).value_or(0);
  const int64_t groups = f.integer({arch + ".ssm.group_count"}).value_or(0);
  s.recurrent_state_elems = std::max<int64_t>(d_conv - 1, 0) * (d_inner + 2 * groups * d_state) + d_state * d_inner;
  if (s.layer_kv_heads.size() != static_cast<size_t>(s.num_layers)) return;  // every layer attention
  pattern_all(s, AttnKind::Recurrent, 0);
  for (size_t i = 0; i < s.layer_attn.size(); ++i)
    if (s.layer_kv_heads[i] > 0) s.layer_attn[i] = AttnKind::Full;
}
}  // namespace
extern const ArchRecord kJamba{.family = "jamba", .names = kNames, .hf_class = "JambaForCausalLM", .rope = false,
                        .hf_config = hf, .gguf = gguf, .gguf_arch = "jamba"};
}  // namespace nunchaku::arch
