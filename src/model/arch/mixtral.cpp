// mixtral: MixtralForCausalLM (sparse MoE on every layer); GGUF "llama" with expert_count.
#include "model/arch/record.hpp"
#include "model/arch/tensor_rules.hpp"
#include "model/recipe.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"mixtral"};
void hf(const ConfigFields& f, ModelSpec& s) {
  apply_defaults(f, s, {.hidden = 4096, .intermediate = 14336, .layers = 32, .heads = 32, .kv_heads = 8,
                        .vocab = 32000, .context = 131072, .rope_theta = 1e6, .norm_eps = 1e-5, .experts = 8,
                        .experts_per_tok = 2});
  if (!pattern_from_layer_types(f, s, s.sliding_window) && s.sliding_window > 0)
    pattern_all(s, AttnKind::Sliding, s.sliding_window);
}
constexpr ArchEntry kTensors[] = {
    {"mixtral", Naming::HF, tensor_rules::kModelRoots, "layers.", tensor_rules::kLlamaGlobalsHF, tensor_rules::kMixtralHF},
    {"mixtral", Naming::GGUF, tensor_rules::kGGUFRoots, "blk.", tensor_rules::kLlamaGlobalsGGUF, tensor_rules::kMixtralGGUF},
};
// transformers 5 loads block_sparse_moe.gate as mlp.gate and the experts fused as mlp.experts
// (conversion_mapping.py, "mixtral").
constexpr Rename kParts[] = {{".block_sparse_moe.", ".mlp."}};
constexpr NameMark kMarks[] = {{"block_sparse_moe."}, {"mlp.experts."}, {"ffn_gate_exps."}, {"ffn_gate_inp."}};
}  // namespace
extern const ArchRecord kMixtral{.family = "mixtral", .names = kNames, .hf_class = "MixtralForCausalLM", .transformers_parts = kParts, .permutes_qk = true,
                          .hf_rotary_module = true, .hf_config = hf, .recipe = recipe_moe, .tensors = kTensors, .gguf_arch = "llama", .llamacpp_drops_window = kNoWindowInLlama, .norm_topk_hf = true, .norm_topk_gguf = true, .hf_head_dim_key = false, .marks = kMarks, .guess_rank = 2};
}  // namespace nunchaku::arch
