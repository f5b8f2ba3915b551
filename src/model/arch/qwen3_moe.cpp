// qwen3_moe: Qwen3MoeForCausalLM (Qwen3-30B-A3B, 235B-A22B): 128 routed experts, top 8, no
// shared expert; mlp_only_layers stay dense. GGUF "qwen3moe".
#include "model/arch/record.hpp"
#include "model/arch/tensor_rules.hpp"
#include "model/recipe.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"qwen3_moe", "qwen3moe"};
void hf(const ConfigFields& f, ModelSpec& s) {
  apply_defaults(f, s, {.hidden = 2048, .intermediate = 6144, .layers = 24, .heads = 32, .kv_heads = 4,
                        .head_dim = 128, .vocab = 151936, .context = 32768, .rope_theta = 10000, .norm_eps = 1e-6,
                        .experts = 128, .experts_per_tok = 8});
  pattern_qwen(f, s);
}
void recipe(const ModelSpec& s, BlockRecipe& r) {
  recipe_moe(s, r);
  r.qk_norm = true;
}
constexpr ArchEntry kTensors[] = {
    {"qwen3_moe", Naming::HF, tensor_rules::kModelRoots, "layers.", tensor_rules::kLlamaGlobalsHF, tensor_rules::kQwen3MoeHF},
    {"qwen3_moe", Naming::GGUF, tensor_rules::kGGUFRoots, "blk.", tensor_rules::kLlamaGlobalsGGUF, tensor_rules::kQwen3MoeGGUF},
};
}  // namespace
extern const ArchRecord kQwen3Moe{.family = "qwen3_moe", .names = kNames, .hf_class = "Qwen3MoeForCausalLM",
                           .hf_rotary_module = true, .hf_config = hf, .recipe = recipe, .tensors = kTensors, .gguf_arch = "qwen3moe", .norm_topk_gguf = true};
}  // namespace nunchaku::arch
