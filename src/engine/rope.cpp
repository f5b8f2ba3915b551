#include "engine/rope.hpp"

#include <cmath>
#include <numbers>
#include <string>

#include <fmt/format.h>

#include "core/error.hpp"

namespace nunchaku::engine {
namespace {

std::string rope_type_of(const nlohmann::json& rs) {
  if (!rs.is_object()) return "default";
  for (const char* k : {"rope_type", "type"}) {
    auto it = rs.find(k);
    if (it != rs.end() && it->is_string()) return it->get<std::string>();
  }
  return "default";
}

double json_number(const nlohmann::json& j, const char* key, double fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

void apply_llama3(const nlohmann::json& rs, std::vector<float>& inv_freq) {
  float factor = float(json_number(rs, "factor", 8)), lo = float(json_number(rs, "low_freq_factor", 1)),
        hi = float(json_number(rs, "high_freq_factor", 4)),
        old_ctx = float(json_number(rs, "original_max_position_embeddings", 8192));
  float lo_wavelen = old_ctx / lo, hi_wavelen = old_ctx / hi;
  for (float& f : inv_freq) {
    float wavelen = 2.0f * std::numbers::pi_v<float> / f;
    if (wavelen > lo_wavelen) {
      f = f / factor;
    } else if (!(wavelen < hi_wavelen)) {
      float smooth = (old_ctx / wavelen - lo) / (hi - lo);
      f = (1 - smooth) * f / factor + smooth * f;
    }
  }
}

// Phi-3's longrope: inv_freq[i] = 1 / (factor[i] * theta^(2i/dims)), the short factors for a
// run within the pre-training context, else the long ones (transformers' choice per sequence
// length; the engine's is per run). Its attention factor is the recipe's (attn_scale).
void apply_longrope(const nlohmann::json& rs, int64_t max_context, float theta, int64_t dims, std::vector<float>& inv_freq) {
  const double orig = json_number(rs, "original_max_position_embeddings", 0);
  const char* key = orig > 0 && double(max_context) > orig ? "long_factor" : "short_factor";
  auto it = rs.find(key);
  if (it == rs.end() || !it->is_array() || it->size() != inv_freq.size())
    throw Error("engine.unsupported_rope", fmt::format("longrope scaling without {} {} values", inv_freq.size(), key));
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    if (!(*it)[i].is_number()) throw Error("engine.unsupported_rope", fmt::format("longrope {} holds a non-number", key));
    const float ext = (*it)[i].get<float>();
    inv_freq[i] = 1.0f / (ext * std::pow(theta, float(2 * i) / float(dims)));
  }
}

}  // namespace

RopeStyle default_rope_style(const ModelSpec& spec, Naming naming) {
  const bool permuted = naming == Naming::GGUF && (spec.architecture == "llama" || spec.architecture == "mistral" || spec.architecture == "mixtral");
  return permuted ? RopeStyle::Interleaved : RopeStyle::NeoX;
}

std::vector<float> rope_inv_freq(const RopeRecipe& rope, int64_t head_dim, std::span<const float> divisors,
                                 int64_t max_context) {
  const float theta = float(rope.theta > 0 ? rope.theta : 10000.0);
  const int64_t dims = rope.dims > 0 ? rope.dims : head_dim;
  std::vector<float> inv_freq(size_t(dims / 2));
  for (int64_t i = 0; i < dims / 2; ++i) inv_freq[size_t(i)] = 1.0f / std::pow(theta, float(2 * i) / float(dims));
  const nlohmann::json& rs = rope.scaling;
  const std::string rtype = rope_type_of(rs);
  if (rtype == "llama3") {
    apply_llama3(rs, inv_freq);
  } else if (rtype == "linear") {
    float factor = float(json_number(rs, "factor", 1));
    for (float& f : inv_freq) f /= factor;
  } else if (rtype == "longrope" || rtype == "su") {
    apply_longrope(rs, max_context, theta, dims, inv_freq);
  } else if (rtype != "default" && rtype != "none") {
    throw Error("engine.unsupported_rope", "rope scaling '" + rtype + "' is not supported",
                {.hint = "supported: none, linear, llama3, longrope"});
  }
  for (size_t i = 0; i < divisors.size() && i < inv_freq.size(); ++i) inv_freq[i] /= divisors[i];
  return inv_freq;
}

}  // namespace nunchaku::engine
