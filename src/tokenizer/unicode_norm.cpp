// Unicode normalization (UAX #15; The Unicode Standard, section 3.11): full decomposition
// (canonical or compatibility, recursive over single-level mappings; Hangul algorithmic),
// canonical ordering (stable by combining class), canonical composition (a character
// composes with the last starter unless blocked). A quick check skips what is already
// normalized; only the stretch between the safe boundaries around a rejected character
// is rewritten.
#include "tokenizer/unicode_norm.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tokenizer/unicode_norm_tables.hpp"
#include "tokenizer/utf8.hpp"

namespace nunchaku {

namespace {

using namespace unorm;

// Hangul syllables (The Unicode Standard, section 3.12): S = SBase + (L * VCount + V) * TCount + T.
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// An invalid byte travels through the algorithm as kRawByte + byte: above Unicode, so it
// has the plain properties (starter, no mapping, composes with nothing).
constexpr uint32_t kRawByte = 0x110000;

int form_index(NormForm f) { return static_cast<int>(f); }
bool composes(NormForm f) { return f == NormForm::NFC || f == NormForm::NFKC; }
bool compat(NormForm f) { return f == NormForm::NFKC || f == NormForm::NFKD; }

const Props& props_of(uint32_t cp) {
  if (cp >= kTableLimit) return kProps[0];
  return kProps[kStage2[kStage1[cp / kBlockSize] * kBlockSize + cp % kBlockSize]];
}

// One UTF-8 character at s[i] (i < s.size()): its length, and the code point in `cp`;
// an invalid sequence (overlong, surrogate, > U+10FFFF, cut short) is 1 byte, kRawByte + byte.
size_t decode(std::string_view s, size_t i, uint32_t& cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c < 0x80) {
    cp = c;
    return 1;
  } else if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    cp = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    cp = c & 0x07;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    cp = kRawByte + c;
    return 1;
  }
  if (i + n > s.size()) {
    cp = kRawByte + c;
    return 1;
  }
  for (size_t k = 1; k < n; ++k) {
    const unsigned char x = b(k);
    if (x < (k == 1 ? lo : 0x80) || x > (k == 1 ? hi : 0xBF)) {
      cp = kRawByte + c;
      return 1;
    }
    cp = (cp << 6) | (x & 0x3F);
  }
  return n;
}

void encode(uint32_t cp, std::string& out) {
  if (cp >= kRawByte) out += static_cast<char>(cp - kRawByte);
  else append_utf8(out, cp);
}

struct Char {
  uint32_t cp;
  uint8_t ccc;
};

// Appends the full decomposition of cp (canonical, or canonical + compatibility).
void decompose(uint32_t cp, bool compatibility, std::vector<Char>& out) {
  if (cp - kSBase < kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back({kLBase + s / kNCount, 0});
    out.push_back({kVBase + (s % kNCount) / kTCount, 0});
    if (s % kTCount) out.push_back({kTBase + s % kTCount, 0});
    return;
  }
  const Props& p = props_of(cp);
  if (p.flags & (1u << form_index(compatibility ? NormForm::NFKD : NormForm::NFD))) {
    out.push_back({cp, p.ccc});
    return;
  }
  // Binary search on the code point (keys are cp << 6 | length << 1 | compatibility).
  auto it = std::lower_bound(kDecompositionKeys.begin(), kDecompositionKeys.end(), cp << 6);
  if (it == kDecompositionKeys.end() || (*it >> 6) != cp || ((*it & 1) && !compatibility)) {
    out.push_back({cp, p.ccc});  // not reached with consistent tables
    return;
  }
  const size_t k = static_cast<size_t>(it - kDecompositionKeys.begin());
  const uint32_t len = (*it >> 1) & 31;
  for (uint32_t j = 0; j < len; ++j) decompose(kDecompositionPool[kDecompositionOffsets[k] + j], compatibility, out);
}

// Canonical ordering: every run of non-starters sorted by combining class, stably.
void reorder(std::vector<Char>& cs) {
  for (size_t i = 1; i < cs.size(); ++i) {
    for (size_t j = i; j > 0 && cs[j].ccc != 0 && cs[j - 1].ccc > cs[j].ccc; --j) std::swap(cs[j - 1], cs[j]);
  }
}

// The primary composite of (a, b), or 0.
uint32_t compose_pair(uint32_t a, uint32_t b) {
  if (a - kLBase < kLCount && b - kVBase < kVCount) return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a - kSBase < kSCount && (a - kSBase) % kTCount == 0 && b - kTBase - 1 < kTCount - 1) return a + (b - kTBase);
  const uint64_t key = (static_cast<uint64_t>(a) << 21) | b;
  auto it = std::lower_bound(kCompositionKeys.begin(), kCompositionKeys.end(), key);
  if (it == kCompositionKeys.end() || *it != key) return 0;
  return kCompositions[static_cast<size_t>(it - kCompositionKeys.begin())];
}

// Canonical composition in place: each character composes with the last starter when
// nothing between them blocks it (a starter, or a character of the same or higher class).
void compose(std::vector<Char>& cs) {
  if (cs.empty()) return;
  size_t starter = 0;
  int last_ccc = cs[0].ccc == 0 ? 0 : 256;  // a leading non-starter composes with nothing
  size_t out = 1;
  for (size_t i = 1; i < cs.size(); ++i) {
    const Char c = cs[i];
    const bool unblocked = last_ccc == 0 ? out == starter + 1 : last_ccc < c.ccc;
    if (unblocked && cs[starter].ccc == 0 && (props_of(c.cp).flags & kCombinesBack)) {
      if (uint32_t comp = compose_pair(cs[starter].cp, c.cp)) {
        cs[starter].cp = comp;
        continue;
      }
    }
    if (c.ccc == 0) {
      starter = out;
      last_ccc = 0;
    } else {
      last_ccc = c.ccc;
    }
    cs[out++] = c;
  }
  cs.resize(out);
}

// Appends `chunk` in form f.
void normalize_chunk(std::string_view chunk, NormForm f, std::string& out) {
  std::vector<Char> cs;
  cs.reserve(chunk.size() + 8);
  for (size_t i = 0; i < chunk.size();) {
    uint32_t cp;
    i += decode(chunk, i, cp);
    decompose(cp, compat(f), cs);
  }
  reorder(cs);
  if (composes(f)) compose(cs);
  for (const Char& c : cs) encode(c.cp, out);
}

// Lead bytes below this value start only characters that are plain for the form (and
// continuation bytes are below it too), so the quick check skips them without decoding.
unsigned char plain_below(NormForm f) {
  const uint32_t x = kFirstNotPlain[form_index(f)];
  if (x >= 0x800) return 0xE0;
  if (x >= 0x80) return static_cast<unsigned char>(0xC0 + (x >> 6));
  return 0x80;
}

bool is_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// The quick check (UAX #15 section 9) over `s`; each rejected stretch, widened to the safe
// boundaries around it, is normalized into `out` together with the text before it.
// Returns false (and leaves `out` alone) when `s` is already normalized.
bool normalize_into(std::string_view s, NormForm f, std::string& out) {
  const unsigned char below = plain_below(f);
  const uint16_t yes = static_cast<uint16_t>(1u << form_index(f)), safe = static_cast<uint16_t>(16u << form_index(f));
  const size_t n = s.size();
  bool changed = false;
  size_t copied = 0;    // s[0, copied) is accounted for in `out`
  size_t boundary = 0;  // a safe place to start normalizing from
  int last_ccc = 0;
  size_t i = 0;
  while (i < n) {
    const size_t run = i;
    while (i + 8 <= n) {  // ASCII, eight bytes at a time
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    while (i < n && static_cast<unsigned char>(s[i]) < below) ++i;
    if (i > run) {
      size_t j = i - 1;  // the last character start in the run
      while (j > run && is_continuation(s[j])) --j;
      boundary = j;
      last_ccc = 0;
    }
    if (i == n) break;
    uint32_t cp;
    const size_t len = decode(s, i, cp);
    const Props& p = props_of(cp);
    if ((p.flags & yes) && (p.ccc == 0 || last_ccc <= p.ccc)) {
      if (p.flags & safe) boundary = i;
      last_ccc = p.ccc;
      i += len;
      continue;
    }
    // Rejected: normalize from the last boundary up to the next safe character.
    size_t end = i + len;
    while (end < n) {
      uint32_t c2;
      const size_t l2 = decode(s, end, c2);
      if (props_of(c2).flags & safe) break;
      end += l2;
    }
    if (!changed) {
      out.clear();
      out.reserve(n + n / 8 + 16);
      changed = true;
    }
    out.append(s.substr(copied, boundary - copied));
    normalize_chunk(s.substr(boundary, end - boundary), f, out);
    copied = boundary = i = end;
    last_ccc = 0;
  }
  if (changed) out.append(s.substr(copied));
  return changed;
}

}  // namespace

std::string normalize(std::string_view text, NormForm form) {
  std::string out;
  if (!normalize_into(text, form, out)) return std::string(text);
  return out;
}

bool normalize_in_place(std::string& text, NormForm form) {
  std::string out;
  if (!normalize_into(text, form, out)) return false;
  if (out == text) return false;
  text = std::move(out);
  return true;
}

std::string_view unicode_norm_version() { return kUnicodeVersion; }

}  // namespace nunchaku
