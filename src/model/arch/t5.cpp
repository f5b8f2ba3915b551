// t5: T5ForConditionalGeneration (T5, mT5, Flan-T5): an encoder stack (no KV cache) and a
// decoder stack whose self-attention caches every generated position. The cross-attention
// K/V over the encoder output (2 × heads × d_kv per source token per decoder layer) is not
// charged: estimate names it as a guessed term.
#include "model/arch/record.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"t5", "mt5", "umt5"};
constexpr ArchComponent kParts[] = {{"encoder.", "encoder"}};
void hf(const ConfigFields& f, ModelSpec& s) {
  const int64_t enc = f.integer({"num_layers"}, kMaxConfigLayers).value_or(6);
  s.num_layers = f.integer({"num_decoder_layers"}, kMaxConfigLayers).value_or(enc);
  s.num_heads = f.integer({"num_heads"}).value_or(8);
  s.num_kv_heads = s.num_heads;
  s.head_dim = f.integer({"d_kv"}).value_or(64);
  s.intermediate_size = f.integer({"d_ff"}).value_or(2048);
  apply_defaults(f, s, {.hidden = 512, .vocab = 32128, .context = 512, .norm_eps = 1e-6});
  pattern_all(s, AttnKind::Full, 0);
  s.guessed.push_back("t5: the decoder's cross-attention K/V over the encoder output is not charged");
}
}  // namespace
extern const ArchRecord kT5{.family = "t5", .names = kNames, .hf_class = "T5ForConditionalGeneration", .components = kParts,
                     .rope = false, .ties_by_default = true, .hf_config = hf, .gguf_arch = "t5"};
}  // namespace nunchaku::arch
