#include "convert/names.hpp"

#include <cmath>

#include <fmt/format.h>

#include "core/error.hpp"
#include "model/arch/record.hpp"
#include "model/arch_table.hpp"

namespace nunchaku::convert {

namespace {

bool engine_family(const std::string& f) {
  const ArchRecord* r = find_record(f);
  return r && r->engine_runs;
}

// The families --names maps (records with engine_runs), for the hint.
std::string name_families() {
  std::string out;
  for (const ArchRecord* r : all_records())
    if (r->engine_runs && !r->wrapper) out += (out.empty() ? "" : ", ") + std::string(r->family);
  return out;
}

// convert_hf_to_gguf's LlamaModel.permute (the record's permutes_qk: llama, mistral, mixtral).
bool permutes_qk(const std::string& f) {
  const ArchRecord* r = find_record(f);
  return r && r->permutes_qk;
}

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
                {.file = ck.path, .hint = "supported: " + name_families() + "; leave --names out to keep the names"});
  if (layout.naming == want) return {};
  const ModelSpec& spec = *layout.spec;

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

std::vector<float> llama3_rope_freqs(const ModelSpec& s) {
  if (rope_type(s) != "llama3" || s.num_heads <= 0) return {};
  const nlohmann::json& rs = s.rope_scaling;
  auto num = [&](const char* k, double d) {
    auto it = rs.find(k);
    return it != rs.end() && it->is_number() ? it->get<double>() : d;
  };
  const double factor = num("factor", 8.0), low = num("low_freq_factor", 1.0), high = num("high_freq_factor", 4.0);
  const double old = num("original_max_position_embeddings", 8192);
  // As convert_hf_to_gguf's LlamaModel.generate_extra_tensors, in torch's float32 arithmetic
  // (a Python number meeting a float32 tensor is cast to float32 first).
  const float low_wl = float(old / low), high_wl = float(old / high);
  const int64_t dim = s.head_dim > 0 ? s.head_dim : s.hidden_size / s.num_heads;
  std::vector<float> out;
  for (int64_t i = 0; i < dim; i += 2) {
    const float freq = 1.0f / std::pow(float(s.rope_theta), float(i) / float(dim));
    const float wavelen = float(2 * M_PI) / freq;
    if (wavelen < high_wl) out.push_back(1.0f);
    else if (wavelen > low_wl) out.push_back(float(factor));
    else {
      const float smooth = (float(old) / wavelen - float(low)) / float(high - low);
      out.push_back(1.0f / ((1.0f - smooth) / float(factor) + smooth));
    }
  }
  return out;
}

}  // namespace nunchaku::convert
