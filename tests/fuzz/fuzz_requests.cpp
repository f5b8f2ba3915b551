// libFuzzer: arbitrary bytes as run's request lines (auto, lines and jsonl formats).
// parse_request never throws: a bad line becomes a request with `error` set, and a request
// without an error carries only parameters inside param_ranges().
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "batch/requests.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (auto fmt : {nunchaku::InputFormat::Auto, nunchaku::InputFormat::Lines, nunchaku::InputFormat::Jsonl}) {
    std::istringstream in(text);
    auto reqs = nunchaku::read_requests(in, fmt);
    for (const auto& r : reqs) {
      if (!r.error.empty()) continue;
      if (r.chat && r.messages.empty()) __builtin_trap();
      if (r.params.stop) (void)nunchaku::find_stop(r.prompt, *r.params.stop);
      const auto& p = r.params;
      auto in_range = [](const char* field, auto v) { return !v || nunchaku::param_error(field, double(*v)).empty(); };
      if (!in_range("max_tokens", p.max_tokens) || !in_range("temperature", p.temperature) || !in_range("top_k", p.top_k) ||
          !in_range("top_p", p.top_p) || !in_range("min_p", p.min_p) || !in_range("repetition_penalty", p.repetition_penalty))
        __builtin_trap();
      if (r.openai && r.completion == r.chat) __builtin_trap();
    }
  }
  return 0;
}
