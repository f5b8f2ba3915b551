// bert: BertModel and its relatives (RoBERTa, XLM-R, sentence-transformers encoders): an
// encoder only, so no layer keeps a cache; learned positions.
#include "model/arch/record.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"bert", "roberta", "xlm-roberta", "xlm_roberta", "distilbert"};
void hf(const ConfigFields& f, ModelSpec& s) {
  apply_defaults(f, s, {.hidden = 768, .intermediate = 3072, .layers = 12, .heads = 12, .vocab = 30522, .context = 512,
                        .norm_eps = 1e-12});
  pattern_all(s, AttnKind::None, 0);
}
}  // namespace
extern const ArchRecord kBert{.family = "bert", .names = kNames, .hf_class = "BertModel", .rope = false, .hf_config = hf, .gguf_arch = "bert"};
}  // namespace nunchaku::arch
