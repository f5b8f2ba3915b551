// olmo2: Olmo2ForCausalLM (OLMo 2): norms after attention and MLP, q/k RMSNorm over the
// whole projection. GGUF "olmo2" (OLMo 3 too): with a window, llama.cpp's default pattern is
// 3 sliding : 1 full (src/models/olmo2.cpp load_swa_pattern(ml, 4)); without one, all full.
#include "model/arch/record.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"olmo2"};
void hf(const ConfigFields& f, ModelSpec& s) {
  apply_defaults(f, s, {.hidden = 4096, .intermediate = 11008, .layers = 32, .heads = 32, .vocab = 50304,
                        .context = 2048, .rope_theta = 10000, .norm_eps = 1e-5});
}
void gguf(const ConfigFields&, const std::string&, ModelSpec& s) {
  if (s.sliding_window > 0 && s.layer_attn.empty()) pattern_every_nth_full(s, 4);
}
}  // namespace
extern const ArchRecord kOlmo2{.family = "olmo2", .names = kNames, .hf_class = "Olmo2ForCausalLM", .hf_rotary_module = true,
                        .hf_config = hf, .gguf = gguf, .gguf_arch = "olmo2"};
}  // namespace nunchaku::arch
