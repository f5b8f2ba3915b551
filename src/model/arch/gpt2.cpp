// gpt2: GPT2LMHeadModel: learned positions (no rope), Conv1D weights, tied head, n_inner = 4H.
#include "model/arch/record.hpp"
#include "model/arch/tensor_rules.hpp"

namespace nunchaku::arch {
namespace {
constexpr std::string_view kNames[] = {"gpt2"};
void hf(const ConfigFields& f, ModelSpec& s) {
  apply_defaults(f, s, {.hidden = 768, .layers = 12, .heads = 12, .vocab = 50257, .context = 1024, .norm_eps = 1e-5});
  if (s.intermediate_size == 0) s.intermediate_size = 4 * s.hidden_size;
}
constexpr ArchEntry kTensors[] = {
    {"gpt2", Naming::HF, tensor_rules::kGpt2Roots, "h.", tensor_rules::kGpt2GlobalsHF, tensor_rules::kGpt2HF},
    {"gpt2", Naming::GGUF, tensor_rules::kGGUFRoots, "blk.", tensor_rules::kGpt2GlobalsGGUF, tensor_rules::kGpt2GGUF},
};
// config.json beside a converted GGUF: GPT2Config's own key names.
void write_config(const ModelSpec& s, nlohmann::ordered_json& c) {
  auto put = [&](const char* k, int64_t v) { if (v > 0) c[k] = v; };
  put("n_embd", s.hidden_size);
  put("n_layer", s.num_layers);
  put("n_head", s.num_heads);
  put("n_positions", s.max_context);
  put("n_ctx", s.max_context);
  if (s.intermediate_size != 4 * s.hidden_size) put("n_inner", s.intermediate_size);
  put("vocab_size", s.vocab_size);
  if (s.norm_eps > 0) c["layer_norm_epsilon"] = s.norm_eps;
}
constexpr NameMark kMarks[] = {{"c_attn."}, {"position_embd.", true}};
}  // namespace
extern const ArchRecord kGpt2{.family = "gpt2", .names = kNames, .hf_class = "GPT2LMHeadModel", .rope = false,
                       .ties_by_default = true, .hf_config = hf, .tensors = kTensors,
                       .gguf_arch = "gpt2", .write_hf_config = write_config, .marks = kMarks, .guess_rank = 1};
}  // namespace nunchaku::arch
