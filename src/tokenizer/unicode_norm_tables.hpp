// Unicode data for unicode_norm.cpp, generated into unicode_norm_tables.cpp by
// scripts/make_unicode_norm.py (see there for the source and the alignment to HF
// tokenizers). Internal: only unicode_norm.cpp reads these.
#pragma once

#include <cstdint>
#include <span>

namespace nunchaku::unorm {

extern const char kUnicodeVersion[];  // of the character data, e.g. "14.0.0"
extern const char kTablesSource[];    // where the data came from, one line

// Per code point properties. Flag bits, by form index f (NormForm: NFC 0, NFD 1, NFKC 2, NFKD 3):
//   1 << f   quick check Yes: the code point alone never changes in form f;
//   16 << f  safe: Yes, ccc 0, and text can be cut before it and the pieces normalized
//            separately (its decomposition starts with a starter that composes with
//            nothing before it);
//   0x100    can be the second code point of a canonical composition.
struct Props {
  uint8_t ccc;  // canonical combining class
  uint16_t flags;
};
constexpr uint16_t kCombinesBack = 0x100;

// Two-stage table: props index of cp = kStage2[kStage1[cp / kBlockSize] * kBlockSize + cp % kBlockSize]
// for cp < kTableLimit; kProps[0] (plain: ccc 0, every flag but kCombinesBack) above.
constexpr uint32_t kBlockSize = 64;
constexpr uint32_t kTableLimit = 0x30000;
extern const std::span<const Props> kProps;
extern const std::span<const uint8_t> kStage1;
extern const std::span<const uint8_t> kStage2;

// First code point that is not plain, per form: everything below is ccc 0, Yes and safe.
extern const uint32_t kFirstNotPlain[4];

// Single-level decomposition mappings, sorted: key = cp << 6 | length << 1 | compatibility;
// the mapping is kDecompositionPool[offset .. offset + length). Hangul syllables are not here.
extern const std::span<const uint32_t> kDecompositionKeys;
extern const std::span<const uint16_t> kDecompositionOffsets;
extern const std::span<const uint32_t> kDecompositionPool;

// Primary composites, sorted by key = first << 21 | second.
extern const std::span<const uint64_t> kCompositionKeys;
extern const std::span<const uint32_t> kCompositions;

}  // namespace nunchaku::unorm
