// mistral: MistralForCausalLM (MistralConfig: sliding_window 4096 unless the config says
// null, on every layer). GGUF files say "llama"; the spec reports them as llama. The language
// model of Mistral-Small-3.x (Mistral3ForConditionalGeneration) is GGUF "mistral3"
// (convert_hf_to_gguf's Ministral3Model): a llama block with no window, read as this record.
#include "model/arch/record.hpp"
#include "model/arch/tensor_rules.hpp"
#include "model/recipe.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"mistral", "mistral3"};
void hf(const ConfigFields& f, ModelSpec& s) {
  apply_defaults(f, s, {.hidden = 4096, .intermediate = 14336, .layers = 32, .heads = 32, .kv_heads = 8,
                        .vocab = 32000, .context = 131072, .rope_theta = 10000, .norm_eps = 1e-6,
                        .sliding_window = 4096});
  if (!pattern_from_layer_types(f, s, s.sliding_window) && s.sliding_window > 0)
    pattern_all(s, AttnKind::Sliding, s.sliding_window);
}
constexpr ArchEntry kTensors[] = {
    {"mistral", Naming::HF, tensor_rules::kModelOrWrappedRoots, "layers.", tensor_rules::kLlamaGlobalsHF, tensor_rules::kLlamaHF},
    {"mistral", Naming::GGUF, tensor_rules::kGGUFRoots, "blk.", tensor_rules::kLlamaGlobalsGGUF, tensor_rules::kLlamaGGUF},
};
}  // namespace
extern const ArchRecord kMistral{.family = "mistral", .names = kNames, .hf_class = "MistralForCausalLM",
                          .engine_runs = true, .permutes_qk = true, .hf_rotary_module = true, .hf_config = hf, .recipe = recipe_llama, .tensors = kTensors, .gguf_arch = "llama", .llamacpp_drops_window = kNoWindowInLlama};
}  // namespace nunchaku::arch
