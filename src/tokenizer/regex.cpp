#include "tokenizer/regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.hpp"

namespace nunchaku {

namespace {
std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  int n = pcre2_get_error_message(code, buf, sizeof buf);
  return n > 0 ? std::string(reinterpret_cast<char*>(buf), static_cast<size_t>(n)) : "error " + std::to_string(code);
}
}  // namespace

Regex::Regex(const std::string& pattern, const std::string& source) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  // NO_UTF_CHECK is not used at compile time: the pattern comes from a file and may be bad UTF-8.
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &err_off, nullptr);
  if (!code) {
    throw Error("tokenizer.bad_regex",
                "pre-tokenizer regex does not compile at pattern offset " + std::to_string(err_off) + ": " +
                    pcre2_message(err),
                {source, "", std::nullopt, ""});
  }
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view subject) const {
  std::vector<std::pair<size_t, size_t>> out;
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  if (!md) throw Error("tokenizer.out_of_memory", "pcre2 match data allocation failed", {}, Exit::Internal);
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t pos = 0;
  uint32_t opts = PCRE2_NO_UTF_CHECK;
  while (pos <= subject.size()) {
    int rc = pcre2_match(code, s, subject.size(), pos, opts, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT) {
      // Pathological input for the JIT stack: retry this position with the interpreter.
      rc = pcre2_match(code, s, subject.size(), pos, opts | PCRE2_NO_JIT, md, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      throw Error("tokenizer.regex_failed", "pre-tokenizer regex failed: " + pcre2_message(rc), {}, Exit::Internal);
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e - b);
      pos = e;
    } else {
      // Empty match: step one UTF-8 character forward.
      if (b >= subject.size()) break;
      size_t step = 1;
      while (b + step < subject.size() && (static_cast<unsigned char>(subject[b + step]) & 0xC0) == 0x80) ++step;
      pos = b + step;
    }
  }
  pcre2_match_data_free(md);
  return out;
}

}  // namespace nunchaku
