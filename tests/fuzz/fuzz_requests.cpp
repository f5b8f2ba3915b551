// libFuzzer: arbitrary bytes as run's request lines (auto, lines and jsonl formats).
// parse_request never throws: a bad line becomes a request with `error` set.
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
    }
  }
  return 0;
}
