// phi3: Phi3ForCausalLM (Phi-3, Phi-3.5, Phi-4): fused qkv_proj and gate_up_proj; a window
// (phi-3-mini 2047) applies to every layer. llama.cpp's phi3 (GGUF "phi3", Phi-4 too) reads
// the window convert_hf_to_gguf writes and turns it off ("Phi SWA is currently disabled",
// src/models/phi3.cpp): every layer of a GGUF holds every position. GGUF longrope
// (convert_hf_to_gguf's Phi3MiniModel) is the tensors rope_factors_long/short,
// rope.scaling.attn_factor and rope.scaling.original_context_length, with no scaling type;
// llama.cpp (llama_model::get_rope_factors) takes the long factors when its context exceeds
// the original one.
#include "model/arch/record.hpp"
#include "model/arch/tensor_rules.hpp"
#include "model/recipe.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"phi3", "phi4"};
void hf(const ConfigFields& f, ModelSpec& s) {
  apply_defaults(f, s, {.hidden = 3072, .intermediate = 8192, .layers = 32, .heads = 32, .vocab = 32064,
                        .context = 4096, .rope_theta = 10000, .norm_eps = 1e-5});
  if (!pattern_from_layer_types(f, s, s.sliding_window) && s.sliding_window > 0)
    pattern_all(s, AttnKind::Sliding, s.sliding_window);
}
void gguf(const ConfigFields& f, const std::string& arch, ModelSpec& s) {
  s.sliding_window = 0;
  s.layer_attn.clear();
  s.layer_windows.clear();
  const auto attn = f.number({arch + ".rope.scaling.attn_factor"});
  if (!attn || s.rope_scaling.is_object()) return;
  const auto orig = f.integer({arch + ".rope.scaling.original_context_length"}, kMaxConfigDim);
  s.rope_scaling = {{"rope_type", "longrope"}, {"attention_factor", *attn},
                    {"original_max_position_embeddings", orig.value_or(s.max_context)}};  // factors: the tensors
}
void recipe(const ModelSpec&, BlockRecipe& r) { r.fused_qkv = r.fused_gate_up = true; }  // qkv_proj, gate_up_proj
constexpr ArchEntry kTensors[] = {
    {"phi3", Naming::HF, tensor_rules::kModelRoots, "layers.", tensor_rules::kLlamaGlobalsHF, tensor_rules::kPhi3HF},
    {"phi3", Naming::GGUF, tensor_rules::kGGUFRoots, "blk.", tensor_rules::kPhi3GlobalsGGUF, tensor_rules::kPhi3GGUF},
};
constexpr NameMark kMarks[] = {{"qkv_proj."}, {"attn_qkv.", true}};
}  // namespace
extern const ArchRecord kPhi3{.family = "phi3", .names = kNames, .hf_class = "Phi3ForCausalLM", .hf_rotary_module = true,
                       .hf_config = hf, .gguf = gguf, .recipe = recipe, .tensors = kTensors, .gguf_arch = "phi3", .llamacpp_drops_window = "llama.cpp turns it off", .hf_head_dim_key = false,
                       .marks = kMarks, .guess_rank = 5};
}  // namespace nunchaku::arch
