// A compiled PCRE2 pattern (UTF + UCP: \p{L}, \s and \w are Unicode-aware; `$` matches
// only at the very end, as in ECMAScript and llama.cpp). Immutable and thread-safe:
// match data is allocated per call. Kept out of the public header so only this file
// and regex.cpp see pcre2.h.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nunchaku {

class Regex {
 public:
  // Throws nunchaku::Error("tokenizer.bad_regex") naming `source` and the PCRE2 message.
  Regex(const std::string& pattern, const std::string& source);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Every non-overlapping match in `subject` as (offset, length), left to right;
  // empty matches are skipped. `subject` must be valid UTF-8 (the tokenizer checks).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view subject) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

}  // namespace nunchaku
