// gemma3 (text): Gemma3ForCausalLM / the language model of Gemma3ForConditionalGeneration.
// Gemma3TextConfig's defaults fill the Hub's sparse text_config: head_dim 256, rope_theta 1e6
// (local layers 1e4), 131072 positions, sliding_window_pattern 6 (5 sliding : 1 full).
// llama.cpp hard-codes the same pattern (set_swa_pattern(6)) and writes no pattern key; as
// for gemma2, it scales q by 1/sqrt(head_dim), by 1/sqrt(hidden / heads) for the 62-layer
// 27B (src/models/gemma3.cpp; Gemma 3's configs: 256 = head_dim, 168 = 5376 / 32 for 27B).
#include "model/arch/record.hpp"
#include "model/arch/tensor_rules.hpp"
#include "model/recipe.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"gemma3_text", "gemma3"};
void hf(const ConfigFields& f, ModelSpec& s) {
  apply_defaults(f, s, {.hidden = 2304, .intermediate = 9216, .layers = 26, .heads = 8, .kv_heads = 4, .head_dim = 256,
                        .vocab = 262208, .context = 131072, .rope_theta = 1e6, .norm_eps = 1e-6,
                        .sliding_window = 4096});
  if (pattern_from_layer_types(f, s, s.sliding_window) || s.sliding_window <= 0) return;
  pattern_every_nth_full(s, f.integer({"sliding_window_pattern"}, kMaxConfigLayers).value_or(6));
}
void gguf(const ConfigFields&, const std::string&, ModelSpec& s) {
  if (s.rope_local_theta == 0) s.rope_local_theta = 10000.0;  // llama.cpp: freq_base_swa default
  if (s.sliding_window > 0 && s.layer_attn.empty()) pattern_every_nth_full(s, 6);
  if (s.num_layers == 62 && s.num_heads > 0) s.query_pre_attn_scalar = double(s.hidden_size / s.num_heads);
}
// q/k norms; sliding layers rotate with rope_local_theta (10k), full ones with rope_theta.
void recipe(const ModelSpec& s, BlockRecipe& r) {
  recipe_gemma(s, r, true);
  r.qk_norm = r.sliding_rope = true;
}
constexpr ArchEntry kTensors[] = {
    {"gemma3", Naming::HF, tensor_rules::kWrappedRoots, "layers.", tensor_rules::kLlamaGlobalsHF, tensor_rules::kGemma3HF},
    {"gemma3", Naming::GGUF, tensor_rules::kGGUFRoots, "blk.", tensor_rules::kLlamaGlobalsGGUF, tensor_rules::kGemma3GGUF},
};
}  // namespace
extern const ArchRecord kGemma3{.family = "gemma3", .names = kNames, .hf_class = "Gemma3ForCausalLM",
                         .hf_rotary_module = true, .ties_by_default = true, .hf_config = hf, .gguf = gguf, .recipe = recipe, .tensors = kTensors, .gguf_arch = "gemma3"};
}  // namespace nunchaku::arch
