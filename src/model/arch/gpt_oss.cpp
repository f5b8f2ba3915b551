// gpt_oss: GptOssForCausalLM (gpt-oss-20b/120b, GGUF "gpt-oss"). Layers alternate sliding
// (window 128) and full attention, each with learned attention sinks; experts ship as MXFP4
// (*_blocks / *_scales, counted by the values they hold). llama.cpp: set_swa_pattern(2).
#include "model/arch/record.hpp"
#include "model/arch/tensor_rules.hpp"
#include "model/recipe.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"gpt_oss", "gptoss", "gpt-oss"};
void hf(const ConfigFields& f, ModelSpec& s) {
  apply_defaults(f, s, {.hidden = 2880, .intermediate = 2880, .layers = 36, .heads = 64, .kv_heads = 8, .head_dim = 64,
                        .vocab = 201088, .context = 131072, .rope_theta = 150000, .norm_eps = 1e-5, .experts = 128,
                        .experts_per_tok = 4, .sliding_window = 128});
  if (!pattern_from_layer_types(f, s, s.sliding_window) && s.sliding_window > 0) pattern_alternate(s);
  // The experts' clamped SwiGLU (transformers' GptOssConfig defaults).
  s.swiglu_alpha = f.number({"swiglu_alpha"}).value_or(1.702);
  s.swiglu_limit = f.number({"swiglu_limit"}).value_or(7.0);
}
void gguf(const ConfigFields&, const std::string&, ModelSpec& s) {
  if (s.sliding_window > 0 && s.layer_attn.empty()) pattern_alternate(s);
  s.swiglu_alpha = 1.702, s.swiglu_limit = 7.0;  // llama.cpp's constants for the arch
}
// Attention sinks, a router with bias (top-k of the logits, then softmax over them), clamped
// SwiGLU experts with biases; rope defaults to GptOssConfig's yarn.
void recipe(const ModelSpec& s, BlockRecipe& r) {
  recipe_moe(s, r);
  r.routing = Routing::TopkSoftmax;
  r.router_bias = r.attn_sinks = r.clamped_swiglu = true;
  r.swiglu_alpha = float(s.swiglu_alpha > 0 ? s.swiglu_alpha : 1.702);
  r.swiglu_limit = float(s.swiglu_limit > 0 ? s.swiglu_limit : 7.0);
  r.rope_scaling_default = {{"rope_type", "yarn"}, {"factor", 32.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
                            {"truncate", false}, {"original_max_position_embeddings", 4096}};
}
constexpr ArchEntry kTensors[] = {
    {"gpt_oss", Naming::HF, tensor_rules::kModelRoots, "layers.", tensor_rules::kLlamaGlobalsHF, tensor_rules::kGptOssHF},
    {"gpt_oss", Naming::GGUF, tensor_rules::kGGUFRoots, "blk.", tensor_rules::kLlamaGlobalsGGUF, tensor_rules::kGptOssGGUF},
};
}  // namespace
extern const ArchRecord kGptOss{.family = "gpt_oss", .names = kNames, .hf_class = "GptOssForCausalLM",
                         .hf_rotary_module = true, .hf_config = hf, .gguf = gguf, .recipe = recipe, .tensors = kTensors, .gguf_arch = "gpt-oss", .llamacpp_keeps_residual = true};
}  // namespace nunchaku::arch
