// qwen3: Qwen3ForCausalLM (q/k RMSNorm over head_dim, explicit head_dim 128).
#include "model/arch/record.hpp"
#include "model/arch/tensor_rules.hpp"
#include "model/recipe.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"qwen3"};
void hf(const ConfigFields& f, ModelSpec& s) {
  apply_defaults(f, s, {.hidden = 4096, .intermediate = 22016, .layers = 32, .heads = 32, .kv_heads = 32,
                        .head_dim = 128, .vocab = 151936, .context = 32768, .rope_theta = 10000, .norm_eps = 1e-6});
  pattern_qwen(f, s);
}
void recipe(const ModelSpec&, BlockRecipe& r) { r.qk_norm = true; }
constexpr ArchEntry kTensors[] = {
    {"qwen3", Naming::HF, tensor_rules::kModelRoots, "layers.", tensor_rules::kLlamaGlobalsHF, tensor_rules::kQwen3HF},
    {"qwen3", Naming::GGUF, tensor_rules::kGGUFRoots, "blk.", tensor_rules::kLlamaGlobalsGGUF, tensor_rules::kQwen3GGUF},
};
constexpr NameMark kMarks[] = {{"q_norm."}};
}  // namespace
extern const ArchRecord kQwen3{.family = "qwen3", .names = kNames, .hf_class = "Qwen3ForCausalLM", .engine_runs = true,
                        .hf_rotary_module = true, .hf_config = hf, .recipe = recipe, .tensors = kTensors, .gguf_arch = "qwen3", .marks = kMarks, .guess_rank = 4};
}  // namespace nunchaku::arch
