// olmoe: OlmoeForCausalLM (OLMoE-1B-7B): 64 experts, top 8, on every layer.
#include "model/arch/record.hpp"
#include "model/arch/tensor_rules.hpp"
#include "model/recipe.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"olmoe"};
void hf(const ConfigFields& f, ModelSpec& s) {
  apply_defaults(f, s, {.hidden = 2048, .intermediate = 2048, .layers = 16, .heads = 16, .vocab = 50304,
                        .context = 4096, .rope_theta = 10000, .norm_eps = 1e-5, .experts = 64, .experts_per_tok = 8});
}
void recipe(const ModelSpec& s, BlockRecipe& r) {  // q/k norms over all of q and k, not per head
  recipe_moe(s, r);
  r.qk_norm = r.qk_norm_full = true;
}
constexpr ArchEntry kTensors[] = {
    {"olmoe", Naming::HF, tensor_rules::kModelRoots, "layers.", tensor_rules::kLlamaGlobalsHF, tensor_rules::kOlmoeHF},
    {"olmoe", Naming::GGUF, tensor_rules::kGGUFRoots, "blk.", tensor_rules::kLlamaGlobalsGGUF, tensor_rules::kOlmoeGGUF},
};
}  // namespace
extern const ArchRecord kOlmoe{.family = "olmoe", .names = kNames, .hf_class = "OlmoeForCausalLM", .hf_rotary_module = true,
                        .hf_config = hf, .recipe = recipe, .tensors = kTensors, .gguf_arch = "olmoe"};
}  // namespace nunchaku::arch
