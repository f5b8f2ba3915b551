#include "convert/names.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "model/arch_table.hpp"

namespace nunchaku::convert {

namespace {

bool engine_family(const std::string& f) { return f == "llama" || f == "mistral" || f == "qwen2" || f == "qwen3"; }

// convert_hf_to_gguf's LlamaModel.permute applies to llama and mistral only.
bool permutes_qk(const std::string& f) { return f == "llama" || f == "mistral"; }

std::string rope_type(const ModelSpec& s) {
  if (!s.rope_scaling.is_object()) return "";
  for (const char* k : {"rope_type", "type"})
    if (auto it = s.rope_scaling.find(k); it != s.rope_scaling.end() && it->is_string()) return it->get<std::string>();
  return "";
}

}  // namespace

uint64_t qk_source_row(uint64_t r, uint64_t head_dim, bool to_gguf) {
  const uint64_t half = head_dim / 2, h = r / head_dim, w = r % head_dim;
  // GGUF head: row w = 2*i + j; HF head: row w = j*half + i.
  if (to_gguf) return h * head_dim + (w % 2) * half + w / 2;
  return h * head_dim + (w % half) * 2 + w / half;
}

std::vector<Rename> map_names(const Checkpoint& ck, const ModelLayout& layout, Names to) {
  if (to == Names::Keep) return {};
  const Naming want = to == Names::HF ? Naming::HF : Naming::GGUF;
  const std::string fam = layout.spec ? layout.spec->architecture : "";
  if (!engine_family(fam))
    throw Error("convert.names_unsupported",
                fam.empty() ? std::string("the model's architecture is unknown")
                            : "--names maps the architectures the engine runs, not '" + fam + "'",
                {.file = ck.path, .hint = "supported: llama, mistral, qwen2, qwen3; leave --names out to keep the names"});
  if (layout.naming == want) return {};
  const ModelSpec& spec = *layout.spec;
  if (want == Naming::GGUF && rope_type(spec) == "llama3")
    throw Error("convert.names_unsupported", "llama3 rope scaling needs a rope_freqs tensor, which convert does not write yet",
                {.file = ck.config_path.empty() ? ck.path : ck.config_path, .hint = "keep HF names (leave --names out)"});

  std::vector<Rename> out(ck.tensors.size());
  std::vector<bool> placed(ck.tensors.size(), false);
  for (const Module& m : layout.modules)
    for (size_t k = 0; k < m.tensors.size(); ++k) {
      const size_t i = m.tensors[k];
      const Role r = m.roles.size() > k ? m.roles[k] : Role::None;
      const std::string& name = ck.tensors[i].name;
      Rename& rn = out[i];
      placed[i] = true;
      if (name.ends_with("rotary_emb.inv_freq")) {
        rn.skipped = "a buffer transformers recomputes";
        continue;
      }
      if (r == Role::RopeFreqs && want == Naming::HF) {
        rn.skipped = "transformers computes the RoPE frequencies from config.json's rope_scaling";
        continue;
      }
      auto target = tensor_name_for(fam, want, m.kind, m.layer, r);
      if (!target)
        throw Error("convert.names_unmapped",
                    fmt::format("no {} name for this tensor (role {})", want == Naming::HF ? "Hugging Face" : "llama.cpp",
                                role_name(r)),
                    {.file = ck.files[ck.tensors[i].file].path, .tensor = name,
                     .hint = "leave --names out to keep the names as stored"});
      rn.name = *target;
      if (permutes_qk(fam) && (r == Role::Q || r == Role::QBias || r == Role::K || r == Role::KBias)) {
        rn.qk_heads = (r == Role::Q || r == Role::QBias) ? spec.num_heads : spec.num_kv_heads;
        rn.to_gguf = want == Naming::GGUF;
        const auto& shape = ck.tensors[i].shape;
        if (rn.qk_heads <= 0 || shape.empty() || shape[0] % (2 * rn.qk_heads) != 0)
          throw Error("convert.names_bad_shape",
                      fmt::format("{} rows cannot be permuted in {} heads of an even size", shape.empty() ? 0 : shape[0],
                                  rn.qk_heads),
                      {.file = ck.files[ck.tensors[i].file].path, .tensor = name});
      }
    }
  for (size_t i = 0; i < ck.tensors.size(); ++i)
    if (!placed[i])
      throw Error("convert.names_unmapped", "the tensor belongs to no module of the model",
                  {.file = ck.files[ck.tensors[i].file].path, .tensor = ck.tensors[i].name,
                   .hint = "leave --names out to keep the names as stored"});
  return out;
}

}  // namespace nunchaku::convert
