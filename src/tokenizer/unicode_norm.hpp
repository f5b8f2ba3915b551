// Unicode normalization forms (UAX #15) on UTF-8 text: NFC, NFD, NFKC, NFKD, as the HF
// `tokenizers` normalizers of those names compute them (same character data: see
// scripts/make_unicode_norm.py and docs/tokenizer.md for the Unicode version).
//
// Text that is already normalized costs one quick-check pass (ASCII is skipped eight bytes
// at a time) and no allocation; only the stretches the quick check rejects, cut at safe
// boundaries, are decomposed, reordered and recomposed.
//
// Invalid UTF-8 bytes are passed through unchanged, each one acting as a starter that
// composes with nothing (the tokenizer replaces them by U+FFFD before normalizing).
// Thread-safe: the tables are constant.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace nunchaku {

enum class NormForm : uint8_t { NFC = 0, NFD = 1, NFKC = 2, NFKD = 3 };

// `text` in normalization form `form`.
[[nodiscard]] std::string normalize(std::string_view text, NormForm form);

// Normalizes `text` in place; returns whether it changed. Nothing is copied when the
// quick check finds it normalized already.
bool normalize_in_place(std::string& text, NormForm form);

// Unicode version of the character data, e.g. "14.0.0" (see unicode_norm_tables.cpp for
// the code points where HF tokenizers' older data is followed instead).
[[nodiscard]] std::string_view unicode_norm_version();

}  // namespace nunchaku
