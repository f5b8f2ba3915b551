// gemma2: Gemma2ForCausalLM. Layers alternate sliding (even, window 4096) and global (odd),
// as Gemma2Config builds layer_types; llama.cpp's default pattern is the same (2). A GGUF
// holds no query_pre_attn_scalar: llama.cpp (src/models/gemma2.cpp) scales q by
// 1/sqrt(head_dim), by 1/sqrt(hidden / heads) for the 46-layer 27B (Gemma 2's own configs:
// 256 = head_dim for 2B/9B, 144 = 4608 / 32 for 27B).
#include "model/arch/record.hpp"
#include "model/arch/tensor_rules.hpp"
#include "model/recipe.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"gemma2"};
void hf(const ConfigFields& f, ModelSpec& s) {
  apply_defaults(f, s, {.hidden = 2304, .intermediate = 9216, .layers = 26, .heads = 8, .kv_heads = 4, .head_dim = 256,
                        .vocab = 256000, .context = 8192, .rope_theta = 10000, .norm_eps = 1e-6,
                        .sliding_window = 4096});
  if (!pattern_from_layer_types(f, s, s.sliding_window) && s.sliding_window > 0) pattern_alternate(s);
}
void gguf(const ConfigFields& f, const std::string& arch, ModelSpec& s) {
  // llama.cpp: n_swa 4096 unless the file says otherwise (src/models/gemma2.cpp).
  if (!f.has({arch + ".attention.sliding_window"})) s.sliding_window = 4096;
  if (s.sliding_window > 0 && s.layer_attn.empty()) pattern_alternate(s);
  if (s.num_layers == 46 && s.num_heads > 0) s.query_pre_attn_scalar = double(s.hidden_size / s.num_heads);
}
void recipe(const ModelSpec& s, BlockRecipe& r) { recipe_gemma(s, r, true); }
constexpr ArchEntry kTensors[] = {
    {"gemma2", Naming::HF, tensor_rules::kModelRoots, "layers.", tensor_rules::kLlamaGlobalsHF, tensor_rules::kGemma2HF},
    {"gemma2", Naming::GGUF, tensor_rules::kGGUFRoots, "blk.", tensor_rules::kLlamaGlobalsGGUF, tensor_rules::kGemma2GGUF},
};
constexpr NameMark kMarks[] = {{"pre_feedforward_layernorm."}, {"post_ffw_norm."}};
}  // namespace
extern const ArchRecord kGemma2{.family = "gemma2", .names = kNames, .hf_class = "Gemma2ForCausalLM",
                         .hf_rotary_module = true, .ties_by_default = true, .hf_config = hf, .gguf = gguf, .recipe = recipe, .tensors = kTensors, .gguf_arch = "gemma2", .marks = kMarks, .guess_rank = 3};
}  // namespace nunchaku::arch
