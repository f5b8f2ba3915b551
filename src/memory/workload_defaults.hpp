// The workload defaults every command shares: estimate and plan predict what run and bench
// do when a flag is not given, so each default has one definition (issue 38 item 3).
// The engine's KV dtype default is engine_kv_default (memory/engine_memory.hpp).
#pragma once

#include <algorithm>
#include <cstdint>

namespace nunchaku {

// Tokens per sequence (--context): the model's maximum, capped at 4096; 4096 when the
// model does not say.
inline constexpr int64_t kDefaultContextCap = 4096;
inline int64_t default_context(int64_t model_max) {
  return model_max > 0 ? std::min<int64_t>(model_max, kDefaultContextCap) : kDefaultContextCap;
}

// Generated tokens per request at most (run's and the OpenAI batch's max_tokens).
inline constexpr int64_t kDefaultMaxTokens = 256;

}  // namespace nunchaku
