// jamba: JambaForCausalLM (AI21 Jamba), a hybrid: one attention layer in attn_layer_period
// (at attn_layer_offset), Mamba layers otherwise. A Mamba layer keeps per sequence a conv
// state d_inner × (d_conv - 1) and an SSM state d_inner × d_state (d_inner = expand × H),
// whatever the context; no positional embeddings. MoE every expert_layer_period layers.
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
}  // namespace
extern const ArchRecord kJamba{.family = "jamba", .names = kNames, .hf_class = "JambaForCausalLM", .rope = false,
                        .hf_config = hf, .gguf_arch = "jamba"};
}  // namespace nunchaku::arch
