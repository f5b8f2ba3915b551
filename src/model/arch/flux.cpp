// flux: diffusers FluxTransformer2DModel (FLUX.1 dev/schnell), a diffusion transformer:
// num_layers double-stream blocks (transformer_blocks.N) and num_single_layers single-stream
// blocks (single_transformer_blocks.N), hidden = heads × attention_head_dim. No KV cache and no
// vocabulary: estimate charges the weights and names the activations (they grow with the
// image resolution) as a guessed term.
#include "model/arch/record.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"fluxtransformer2d", "flux"};
void hf(const ConfigFields& f, ModelSpec& s) {
  s.num_heads = f.integer({"num_attention_heads"}).value_or(24);
  s.num_kv_heads = s.num_heads;
  s.head_dim = f.integer({"attention_head_dim"}).value_or(128);
  s.hidden_size = s.num_heads * s.head_dim;
  s.num_layers = f.integer({"num_layers"}, kMaxConfigLayers).value_or(19) +
                 f.integer({"num_single_layers"}, kMaxConfigLayers).value_or(38);
  s.intermediate_size = 4 * s.hidden_size;
  pattern_all(s, AttnKind::None, 0);
  s.guessed.push_back("diffusion transformer: activations grow with the image resolution and are not modelled");
}
}  // namespace
extern const ArchRecord kFlux{.family = "flux", .names = kNames, .hf_class = "FluxTransformer2DModel", .rope = false,
                       .diffusion = true, .hf_config = hf};
}  // namespace nunchaku::arch
