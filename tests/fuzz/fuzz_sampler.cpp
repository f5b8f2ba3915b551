// libFuzzer target for the sampler: any logits (NaN, +-inf, huge) with any parameters
// the constructor accepts must give a token id inside the vocabulary and a distribution
// that sums to 1; parameters it refuses raise nunchaku::Error.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.hpp"
#include "engine/sampler.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nunchaku::engine::SamplingParams;
  constexpr size_t kHead = 4 * 4 + 4 + 8;
  if (size < kHead + 4) return 0;
  SamplingParams p;
  std::memcpy(&p.temperature, data, 4);
  std::memcpy(&p.top_p, data + 4, 4);
  std::memcpy(&p.min_p, data + 8, 4);
  std::memcpy(&p.repetition_penalty, data + 12, 4);
  std::memcpy(&p.top_k, data + 16, 4);
  std::memcpy(&p.seed, data + 20, 8);
  const size_t n = (size - kHead) / 4;
  std::vector<float> logits(n);
  std::memcpy(logits.data(), data + kHead, n * 4);
  std::vector<int32_t> history;
  for (size_t i = 0; i < n && i < 16; ++i) history.push_back(int32_t(data[kHead + i]) - 8);
  try {
    nunchaku::engine::Sampler s(p, int64_t(n));
    for (int round = 0; round < 2; ++round) {
      const int32_t tok = s.sample(logits, history);
      if (tok < 0 || size_t(tok) >= n) __builtin_trap();
    }
    auto d = s.distribution(logits, history);
    double sum = 0;
    for (float x : d) {
      if (!(x >= 0 && x <= 1)) __builtin_trap();
      sum += x;
    }
    if (std::fabs(sum - 1) > 1e-3) __builtin_trap();
  } catch (const nunchaku::Error&) {
  }
  return 0;
}
