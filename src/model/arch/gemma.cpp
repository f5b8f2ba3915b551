// gemma: GemmaForCausalLM (GemmaConfig: head_dim 256, tied head, embeddings scaled by sqrt(H)).
#include "model/arch/record.hpp"
#include "model/arch/tensor_rules.hpp"
#include "model/recipe.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"gemma"};
void hf(const ConfigFields& f, ModelSpec& s) {
  apply_defaults(f, s, {.hidden = 3072, .intermediate = 24576, .layers = 28, .heads = 16, .kv_heads = 16,
                        .head_dim = 256, .vocab = 256000, .context = 8192, .rope_theta = 10000, .norm_eps = 1e-6});
}
void recipe(const ModelSpec& s, BlockRecipe& r) { recipe_gemma(s, r, false); }
constexpr ArchEntry kTensors[] = {
    {"gemma", Naming::HF, tensor_rules::kModelRoots, "layers.", tensor_rules::kLlamaGlobalsHF, tensor_rules::kLlamaHF},
    {"gemma", Naming::GGUF, tensor_rules::kGGUFRoots, "blk.", tensor_rules::kLlamaGlobalsGGUF, tensor_rules::kLlamaGGUF},
};
}  // namespace
extern const ArchRecord kGemma{.family = "gemma", .names = kNames, .hf_class = "GemmaForCausalLM",
                        .hf_rotary_module = true, .ties_by_default = true, .hf_config = hf, .recipe = recipe, .tensors = kTensors, .gguf_arch = "gemma"};
}  // namespace nunchaku::arch
