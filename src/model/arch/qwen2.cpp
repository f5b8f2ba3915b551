// qwen2: Qwen2ForCausalLM; also the language model of Qwen2-VL / Qwen2.5-VL (GGUF "qwen2vl").
// Sliding windows only with use_sliding_window, on layers >= max_window_layers.
#include "model/arch/record.hpp"
#include "model/arch/tensor_rules.hpp"
#include "model/recipe.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"qwen2", "qwen2vl", "qwen2_vl_text", "qwen2_5_vl_text"};
void hf(const ConfigFields& f, ModelSpec& s) {
  apply_defaults(f, s, {.hidden = 4096, .intermediate = 22016, .layers = 32, .heads = 32, .vocab = 151936,
                        .context = 32768, .rope_theta = 10000, .norm_eps = 1e-6});
  pattern_qwen(f, s);
}
constexpr ArchEntry kTensors[] = {
    {"qwen2", Naming::HF, tensor_rules::kModelRoots, "layers.", tensor_rules::kLlamaGlobalsHF, tensor_rules::kQwen2HF},
    {"qwen2", Naming::GGUF, tensor_rules::kGGUFRoots, "blk.", tensor_rules::kLlamaGlobalsGGUF, tensor_rules::kQwen2GGUF},
};
constexpr NameMark kMarks[] = {{"q_proj.bias"}, {"attn_q.bias"}};
}  // namespace
extern const ArchRecord kQwen2{.family = "qwen2", .names = kNames, .hf_class = "Qwen2ForCausalLM", .engine_runs = true,
                        .hf_rotary_module = true, .hf_config = hf, .recipe = recipe_llama, .tensors = kTensors, .gguf_arch = "qwen2", .hf_head_dim_key = false, .marks = kMarks, .guess_rank = 6};
}  // namespace nunchaku::arch
