#include "engine/rope.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include <fmt/format.h>

#include "core/error.hpp"
#include "model/arch/record.hpp"

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

// YaRN (transformers' _compute_yarn_parameters, in float32 as there): the frequencies of the
// dimensions that turn fewer than beta_slow times over the pre-training context are
// interpolated (divided by factor), those turning more than beta_fast times kept, a linear
// ramp between; the correction range is floored/ceiled unless truncate is false. The
// attention factor (cos and sin scaled) is the recipe's mscale.
void apply_yarn(const nlohmann::json& rs, float theta, int64_t dims, std::vector<float>& inv_freq) {
  const double factor = json_number(rs, "factor", 0);
  const double orig = json_number(rs, "original_max_position_embeddings", 0);
  if (!(factor > 0) || !(orig > 0))
    throw Error("engine.unsupported_rope", "yarn scaling needs a positive factor and original_max_position_embeddings");
  const double beta_fast = json_number(rs, "beta_fast", 0) != 0 ? json_number(rs, "beta_fast", 0) : 32;
  const double beta_slow = json_number(rs, "beta_slow", 0) != 0 ? json_number(rs, "beta_slow", 0) : 1;
  auto it = rs.find("truncate");
  const bool truncate = it == rs.end() || !it->is_boolean() || it->get<bool>();
  const double pi = std::numbers::pi;
  auto correction_dim = [&](double rotations) {
    return double(dims) * std::log(orig / (rotations * 2 * pi)) / (2 * std::log(double(theta)));
  };
  double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
  if (truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, double(dims - 1));
  if (low == high) high += 0.001;
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float pos_freq = std::pow(theta, float(2 * i) / float(dims));
    const float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / (float(factor) * pos_freq);
    const float ramp = std::clamp((float(i) - float(low)) / float(high - low), 0.0f, 1.0f);
    const float keep = 1.0f - ramp;  // the extrapolation's share
    inv_freq[i] = interpolation * (1.0f - keep) + extrapolation * keep;
  }
}

}  // namespace

RopeStyle default_rope_style(const ModelSpec& spec, Naming naming) {
  // llama.cpp's converter permutes q/k rows of the families whose record says so (LlamaModel.permute).
  const ArchRecord* r = find_record(spec.architecture);
  const bool permuted = naming == Naming::GGUF && r && r->permutes_qk;
  return permuted || spec.rope_interleaved ? RopeStyle::Interleaved : RopeStyle::NeoX;
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
  } else if (rtype == "yarn") {
    apply_yarn(rs, theta, dims, inv_freq);
  } else if (rtype != "default" && rtype != "none") {
    throw Error("engine.unsupported_rope", "rope scaling '" + rtype + "' is not supported",
                {.hint = "supported: none, linear, llama3, longrope, yarn"});
  }
  for (size_t i = 0; i < divisors.size() && i < inv_freq.size(); ++i) inv_freq[i] /= divisors[i];
  return inv_freq;
}

}  // namespace nunchaku::engine
