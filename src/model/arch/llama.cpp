// llama: LlamaForCausalLM (transformers LlamaConfig), GGUF "llama". LLaVA's text_config
// names only what differs from LlamaConfig, so the class defaults matter.
#include "model/arch/record.hpp"
#include "model/arch/tensor_rules.hpp"
#include "model/recipe.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"llama", "codellama", "vicuna"};
void hf(const ConfigFields& f, ModelSpec& s) {
  apply_defaults(f, s, {.hidden = 4096, .intermediate = 11008, .layers = 32, .heads = 32, .vocab = 32000,
                        .context = 2048, .rope_theta = 10000, .norm_eps = 1e-6});
}
constexpr ArchEntry kTensors[] = {
    {"llama", Naming::HF, tensor_rules::kModelOrWrappedRoots, "layers.", tensor_rules::kLlamaGlobalsHF, tensor_rules::kLlamaHF},
    {"llama", Naming::GGUF, tensor_rules::kGGUFRoots, "blk.", tensor_rules::kLlamaGlobalsGGUF, tensor_rules::kLlamaGGUF},
};
constexpr NameMark kMarks[] = {{"q_proj."}, {"attn_q."}};
}  // namespace
extern const ArchRecord kLlama{.family = "llama", .names = kNames, .hf_class = "LlamaForCausalLM", .engine_runs = true,
                        .permutes_qk = true, .hf_rotary_module = true, .hf_config = hf, .recipe = recipe_llama, .tensors = kTensors, .gguf_arch = "llama", .gguf_with_experts = "mixtral", .marks = kMarks, .guess_rank = 7};
}  // namespace nunchaku::arch
