// libFuzzer: arbitrary bytes through the four Unicode normalization forms. Must not crash
// on any input (invalid UTF-8 included); each form must be idempotent, and the forms must
// keep the UAX #15 relations NFC(x) = NFC(NFD(x)) and NFKC(x) = NFC(NFKD(x)).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tokenizer/unicode_norm.hpp"

using nunchaku::NormForm;
using nunchaku::normalize;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string nfc = normalize(text, NormForm::NFC), nfd = normalize(text, NormForm::NFD);
  const std::string nfkc = normalize(text, NormForm::NFKC), nfkd = normalize(text, NormForm::NFKD);
  if (normalize(nfc, NormForm::NFC) != nfc || normalize(nfd, NormForm::NFD) != nfd) __builtin_trap();
  if (normalize(nfkc, NormForm::NFKC) != nfkc || normalize(nfkd, NormForm::NFKD) != nfkd) __builtin_trap();
  if (normalize(nfd, NormForm::NFC) != nfc || normalize(nfkd, NormForm::NFC) != nfkc) __builtin_trap();
  std::string in_place(text);
  nunchaku::normalize_in_place(in_place, NormForm::NFC);
  if (in_place != nfc) __builtin_trap();
  return 0;
}
