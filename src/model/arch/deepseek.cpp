// deepseek: DeepSeek-V2/V2-Lite/V3/R1 and Kimi K2 (DeepseekV2/V3ForCausalLM, GGUF "deepseek2").
// Multi-head latent attention: the cache vLLM, SGLang and llama.cpp keep is the compressed
// latent, kv_lora_rank + qk_rope_head_dim per position per layer (transformers keeps the
// expanded K and V instead: the estimator's transformers model says so). Routed experts with
// shared experts after first_k_dense_replace dense layers; num_nextn_predict_layers MTP layers
// are stored after the stack and loaded by no runtime unless speculative decoding asks.
#include "model/arch/record.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"deepseek_v2", "deepseek_v3", "deepseekv2", "deepseekv3", "deepseek2", "kimi_k2"};
void hf(const ConfigFields& f, ModelSpec& s) {
  const bool v3 = f.string({"model_type"}).value_or("") != "deepseek_v2";
  if (v3)
    apply_defaults(f, s, {.hidden = 7168, .intermediate = 18432, .layers = 61, .heads = 128, .kv_heads = 128,
                          .vocab = 129280, .context = 4096, .rope_theta = 10000, .norm_eps = 1e-6, .experts = 256,
                          .experts_per_tok = 8});
  else
    apply_defaults(f, s, {.hidden = 5120, .intermediate = 12288, .layers = 60, .heads = 128, .kv_heads = 128,
                          .vocab = 102400, .context = 2048, .rope_theta = 10000, .norm_eps = 1e-6, .experts = 160,
                          .experts_per_tok = 6});
  if (s.kv_lora_rank == 0) s.kv_lora_rank = 512;
  if (s.qk_rope_head_dim == 0) s.qk_rope_head_dim = 64;
  // Attention heads are qk_nope + qk_rope wide (192); values v_head_dim (128).
  if (!f.has({"head_dim"})) s.head_dim = f.integer({"qk_nope_head_dim"}).value_or(128) + s.qk_rope_head_dim;
  s.num_shared_experts = f.integer({"n_shared_experts"}).value_or(v3 ? 1 : 2);
  s.mtp_layers = f.integer({"num_nextn_predict_layers"}, kMaxConfigLayers).value_or(0);
  pattern_all(s, AttnKind::Mla, 0);
}
void gguf(const ConfigFields& f, const std::string& arch, ModelSpec& s) {
  s.num_shared_experts = f.integer({arch + ".expert_shared_count"}).value_or(0);
  s.mtp_layers = f.integer({arch + ".nextn_predict_layers"}, kMaxConfigLayers).value_or(0);
  if (s.kv_lora_rank > 0 && s.layer_attn.empty()) pattern_all(s, AttnKind::Mla, 0);
}
}  // namespace
extern const ArchRecord kDeepseek{.family = "deepseek", .names = kNames, .hf_class = "DeepseekV3ForCausalLM",
                           .hf_rotary_module = true, .hf_config = hf, .gguf = gguf, .gguf_arch = "deepseek2"};
}  // namespace nunchaku::arch
