#include "engine/rope.hpp"

#include <cmath>
#include <numbers>
#include <string>

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

}  // namespace

RopeStyle default_rope_style(const ModelSpec& spec, Naming naming) {
  const bool permuted = naming == Naming::GGUF && (spec.architecture == "llama" || spec.architecture == "mistral");
  return permuted ? RopeStyle::Interleaved : RopeStyle::NeoX;
}

std::vector<float> rope_inv_freq(const ModelSpec& spec, int64_t head_dim, std::span<const float> divisors) {
  const float theta = float(spec.rope_theta > 0 ? spec.rope_theta : 10000.0);
  std::vector<float> inv_freq(size_t(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i) inv_freq[size_t(i)] = 1.0f / std::pow(theta, float(2 * i) / float(head_dim));
  const std::string rtype = rope_type_of(spec.rope_scaling);
  if (rtype == "llama3") {
    apply_llama3(spec.rope_scaling, inv_freq);
  } else if (rtype == "linear") {
    float factor = float(json_number(spec.rope_scaling, "factor", 1));
    for (float& f : inv_freq) f /= factor;
  } else if (rtype != "default" && rtype != "none") {
    throw Error("engine.unsupported_rope", "rope scaling '" + rtype + "' is not supported",
                {.hint = "supported: none, linear, llama3"});
  }
  for (size_t i = 0; i < divisors.size() && i < inv_freq.size(); ++i) inv_freq[i] /= divisors[i];
  return inv_freq;
}

}  // namespace nunchaku::engine
