// qwen2_moe: Qwen2MoeForCausalLM (Qwen1.5-MoE, Qwen2-57B-A14B): routed experts plus one
// shared expert with a sigmoid gate on every decoder_sparse_step-th layer; GGUF "qwen2moe".
#include "model/arch/record.hpp"
#include "model/arch/tensor_rules.hpp"
#include "model/recipe.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"qwen2_moe", "qwen2moe"};
void hf(const ConfigFields& f, ModelSpec& s) {
  apply_defaults(f, s, {.hidden = 2048, .intermediate = 5632, .layers = 24, .heads = 16, .vocab = 151936,
                        .context = 32768, .rope_theta = 10000, .norm_eps = 1e-6, .experts = 60, .experts_per_tok = 4});
  if (f.integer({"shared_expert_intermediate_size"}).value_or(5632) > 0) s.num_shared_experts = 1;
  pattern_qwen(f, s);
}
constexpr ArchEntry kTensors[] = {
    {"qwen2_moe", Naming::HF, tensor_rules::kModelRoots, "layers.", tensor_rules::kLlamaGlobalsHF, tensor_rules::kQwen2MoeHF},
    {"qwen2_moe", Naming::GGUF, tensor_rules::kGGUFRoots, "blk.", tensor_rules::kLlamaGlobalsGGUF, tensor_rules::kQwen2MoeGGUF},
};
}  // namespace
extern const ArchRecord kQwen2Moe{.family = "qwen2_moe", .names = kNames, .hf_class = "Qwen2MoeForCausalLM",
                           .hf_rotary_module = true, .hf_config = hf, .recipe = recipe_moe, .tensors = kTensors, .gguf_arch = "qwen2moe"};
}  // namespace nunchaku::arch
