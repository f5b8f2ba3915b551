#include "model/storage.hpp"

#include <string_view>
#include <unordered_set>

namespace nunchaku {

namespace {

bool ends(std::string_view s, std::string_view suf) { return s.ends_with(suf); }

std::string_view strip(std::string_view s, std::string_view suf) { return s.substr(0, s.size() - suf.size()); }

}  // namespace

std::vector<uint64_t> logical_parameters(const Checkpoint& ck, int bits) {
  // The name set answers "is there a sibling ..."; built on the first question (most
  // checkpoints never ask: 46k names hashed for nothing).
  std::unordered_set<std::string_view> names;
  auto has = [&](std::string_view base, std::string_view suf) {
    if (names.empty()) {
      names.reserve(ck.tensors.size() * 2);
      for (const auto& t : ck.tensors) names.insert(t.name);
    }
    return names.count(std::string(base) + std::string(suf)) > 0;
  };
  const uint64_t per_int32 = bits > 0 && bits <= 32 ? 32u / static_cast<uint64_t>(bits) : 8;

  std::vector<uint64_t> out;
  out.reserve(ck.tensors.size());
  for (const auto& t : ck.tensors) {
    const std::string_view n = t.name;
    const uint64_t numel = t.numel();
    uint64_t v = numel;
    if (ends(n, "_blocks") && t.dtype == DType::U8 && has(strip(n, "_blocks"), "_scales")) {
      v = numel * 2;  // MXFP4: two 4-bit values per byte
    } else if (ends(n, "_scales") && has(strip(n, "_scales"), "_blocks")) {
      v = 0;
    } else if (ends(n, ".weight_scale_inv") || ends(n, ".weight_scale") || ends(n, ".input_scale") ||
               ends(n, ".weight_zero_point") || ends(n, ".weight_g_idx") || ends(n, ".weight_shape") ||
               ends(n, ".qzeros") || ends(n, ".g_idx") || ends(n, ".absmax") || ends(n, ".quant_map") ||
               ends(n, ".nested_absmax") || ends(n, ".nested_quant_map") ||
               ends(n, ".e_score_correction_bias") ||  // DeepSeek-V3's router bias: a buffer, not a parameter
               n.find(".quant_state.") != std::string_view::npos) {
      v = 0;
    } else if (ends(n, ".scales") && has(strip(n, ".scales"), ".qweight")) {
      v = 0;
    } else if ((ends(n, ".qweight") || ends(n, ".weight_packed")) && t.dtype == DType::I32) {
      v = numel * per_int32;  // GPTQ/AWQ/compressed-tensors: 32 / bits values per int32
    } else if (ends(n, ".weight") && t.dtype == DType::U8 &&
               (has(n, ".absmax") || has(n, ".quant_state.bitsandbytes__nf4") || has(n, ".quant_state.bitsandbytes__fp4"))) {
      v = numel * 2;  // bitsandbytes 4-bit: two values per byte
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace nunchaku
