// Encoding and decoding. Pipeline for encode():
//   1. split added/special tokens out of the raw text (leftmost-longest match);
//   2. per text segment: the normaliser steps in order (NFC/NFD/NFKC/NFKD, Prepend,
//      Replace) or the GGUF-llama space prefix;
//   3. pre-tokenizer steps (regex Split, Metaspace, Digits) into pieces;
//   4. the model on every piece: BPE by merge rank, or SentencePiece by score,
//      on a linked list of symbols with a priority queue of candidate pairs
//      (O(n log n) per piece), byte fallback for characters not in the vocab;
//   5. post-processing: prefix/suffix ids (BOS/EOS) when add_special.
#include "tokenizer/tokenizer.hpp"

#include <algorithm>
#include <cstring>
#include <queue>

#include "core/text.hpp"
#include "tokenizer/impl.hpp"
#include "tokenizer/utf8.hpp"

namespace nunchaku {

// ---- UTF-8 and the GPT-2 byte mapping --------------------------------------

size_t utf8_len(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

size_t utf8_complete_prefix(std::string_view s) {
  // Walk back over at most 3 bytes to a lead byte; if its sequence is a valid but
  // incomplete prefix, cut there.
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    size_t i = n - back;
    unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte, keep looking for the lead
    size_t need = utf8_len(c);
    if (need <= back) return n;  // complete (or invalid: sanitize deals with it)
    size_t prefix = 1;
    utf8_char_at(s, i, &prefix);
    return prefix == back ? i : n;  // valid so far -> wait for more bytes
  }
  return n;
}

const std::array<std::string, 256>& byte_to_unicode() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    // Printable Latin-1 bytes stand for themselves; the other 68 get U+0100 upwards in byte order.
    auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) append_utf8(t[b], printable(b) ? static_cast<uint32_t>(b) : next++);
    return t;
  }();
  return table;
}

int byte_from_unicode(uint32_t cp) {
  static const std::vector<int16_t> inv = [] {
    std::vector<int16_t> v(0x144, -1);
    const auto& t = byte_to_unicode();
    for (int b = 0; b < 256; ++b) {
      const std::string& s = t[b];
      uint32_t c = static_cast<unsigned char>(s[0]);
      if (s.size() == 2) c = ((c & 0x1F) << 6) | (static_cast<unsigned char>(s[1]) & 0x3F);
      v[c] = static_cast<int16_t>(b);
    }
    return v;
  }();
  return cp < inv.size() ? inv[cp] : -1;
}

// Decodes one code point at s[i] (s valid UTF-8); advances i.
static uint32_t next_cp(std::string_view s, size_t& i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = std::min(utf8_len(c), s.size() - i);
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

static void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  if (pos == 0) return;
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

// ---- TokenizerImpl::finish --------------------------------------------------

void TokenizerImpl::fail(const std::string& code, const std::string& msg, const std::string& hint) const {
  throw Error(code, msg, {source, "", std::nullopt, hint});
}

static bool parse_byte_token(std::string_view t, uint8_t* out) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return false;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int h = hex(t[3]), l = hex(t[4]);
  if (h < 0 || l < 0) return false;
  *out = static_cast<uint8_t>(h * 16 + l);
  return true;
}

void TokenizerImpl::finish() {
  if (tokens.empty()) fail("tokenizer.empty_vocab", "the vocabulary has no tokens");
  if (tokens.size() > (1u << 30)) fail("tokenizer.vocab_too_large", "more than 2^30 tokens");
  attr.resize(tokens.size(), kAttrNormal);
  token_to_id.clear();
  token_to_id.reserve(tokens.size() * 2);
  for (size_t i = 0; i < tokens.size(); ++i) token_to_id.emplace(tokens[i], static_cast<int32_t>(i));  // first id wins

  byte_ids.fill(-1);
  const auto& b2u = byte_to_unicode();
  for (int b = 0; b < 256; ++b) {
    if (byte_level) {
      auto it = token_to_id.find(b2u[b]);
      if (it != token_to_id.end()) byte_ids[b] = it->second;
    } else {
      char name[7];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      auto it = token_to_id.find(name);
      if (it != token_to_id.end()) byte_ids[b] = it->second;
    }
  }

  pieces.assign(tokens.size(), {});
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    std::string& p = pieces[i];
    uint8_t byte = 0;
    switch (decode_kind) {
      case DecodeKind::ByteLevel: {
        // As HF's ByteLevel decoder: all chars mapped -> bytes; else the token text as is.
        bool ok = true;
        for (size_t k = 0; k < t.size() && ok;) {
          size_t prefix;
          if (!utf8_char_at(t, k, &prefix)) { ok = false; break; }
          int v = byte_from_unicode(next_cp(t, k));
          if (v < 0) ok = false;
          else p += static_cast<char>(v);
        }
        if (!ok) p = t;
        break;
      }
      case DecodeKind::Spm:
        if (parse_byte_token(t, &byte)) {
          attr[i] |= kAttrByte;
          if (byte_fallback_decoder) p.assign(1, static_cast<char>(byte));
          else p = t;
        } else {
          p = t;
          replace_all(p, "\xE2\x96\x81", " ");
        }
        break;
      case DecodeKind::Plain:
        p = t;
        break;
    }
  }

  for (const auto& a : added) {
    if (!valid(a.id)) fail("tokenizer.bad_token_id", "added token '" + a.content + "' has id " + std::to_string(a.id) + " outside the vocabulary of " + std::to_string(tokens.size()));
  }
  added.erase(std::remove_if(added.begin(), added.end(), [](const AddedToken& a) { return a.content.empty(); }), added.end());
  std::stable_sort(added.begin(), added.end(), [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  for (auto& v : added_by_byte) v.clear();
  for (size_t i = 0; i < added.size(); ++i) added_by_byte[static_cast<unsigned char>(added[i].content[0])].push_back(static_cast<uint32_t>(i));

  auto check = [&](int32_t id, const char* what) {
    if (id != -1 && !valid(id)) fail("tokenizer.bad_token_id", std::string(what) + " id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(tokens.size()));
  };
  check(bos, "bos");
  check(eos, "eos");
  check(pad, "pad");
  check(unk, "unk");
  for (int32_t id : eos_ids) check(id, "eos");
  for (int32_t id : prefix_ids) check(id, "post-processor");
  for (int32_t id : suffix_ids) check(id, "post-processor");
  if (eos_ids.empty() && eos >= 0) eos_ids.push_back(eos);
}

// ---- the merge engine -------------------------------------------------------

namespace {

struct Symbol {
  uint32_t start, len;  // bytes of the piece this symbol covers
  int32_t prev, next;   // linked list over symbol indices; -1 ends
  int32_t id;           // token id, -1 when the span is not (yet) a token
};

struct Candidate {
  double priority;  // lower merges first
  int32_t left, right;
  uint32_t len;     // left.len + right.len when pushed (stale check)
  int32_t merged;
  bool operator<(const Candidate& o) const {  // std::priority_queue is a max-heap
    if (priority != o.priority) return priority > o.priority;
    return left > o.left;
  }
};

// Runs merges on `syms` (a chain from index 0). `lookup(l, r)` gives the candidate's
// (priority, merged id) or nothing.
template <class Lookup>
void merge_symbols(std::vector<Symbol>& syms, Lookup lookup) {
  std::vector<Candidate> storage;
  storage.reserve(syms.size());
  std::priority_queue<Candidate> q(std::less<Candidate>(), std::move(storage));
  auto push = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    double pr;
    int32_t merged;
    if (lookup(syms[l], syms[r], &pr, &merged)) q.push({pr, l, r, syms[l].len + syms[r].len, merged});
  };
  for (size_t i = 1; i < syms.size(); ++i) push(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
  while (!q.empty()) {
    Candidate c = q.top();
    q.pop();
    Symbol& l = syms[c.left];
    Symbol& r = syms[c.right];
    if (l.len == 0 || r.len == 0 || l.next != c.right || l.len + r.len != c.len) continue;  // stale
    l.len += r.len;
    l.id = c.merged;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = c.left;
    r.len = 0;
    push(l.prev, c.left);
    push(c.left, l.next);
  }
}

inline uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

// BPE by merge rank on one pre-tokenized piece (raw UTF-8 bytes).
static void bpe_ranks(const TokenizerImpl& t, std::string_view piece, std::vector<int32_t>& out) {
  if (piece.empty()) return;
  if (t.ignore_merges) {
    std::string key;
    if (t.byte_level) {
      const auto& b2u = byte_to_unicode();
      for (unsigned char c : piece) key += b2u[c];
    } else {
      key = piece;
    }
    auto it = t.token_to_id.find(key);
    if (it != t.token_to_id.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<Symbol> syms;
  syms.reserve(piece.size());
  auto add = [&](uint32_t start, uint32_t len, int32_t id) {
    if (id < 0 && t.fuse_unk && !syms.empty() && syms.back().id == t.unk && t.unk >= 0) {
      syms.back().len += len;  // fuse consecutive unknowns
      return;
    }
    if (id < 0) id = t.unk;
    if (id < 0) return;  // no unk token: the character is dropped, as HF does
    int32_t idx = static_cast<int32_t>(syms.size());
    syms.push_back({start, len, idx - 1, idx + 1, id});
  };
  if (t.byte_level) {
    for (uint32_t i = 0; i < piece.size(); ++i) add(i, 1, t.byte_ids[static_cast<unsigned char>(piece[i])]);
  } else {
    for (size_t i = 0; i < piece.size();) {
      size_t n = std::min(utf8_len(static_cast<unsigned char>(piece[i])), piece.size() - i);
      auto it = t.token_to_id.find(std::string(piece.substr(i, n)));
      if (it != t.token_to_id.end()) {
        add(static_cast<uint32_t>(i), static_cast<uint32_t>(n), it->second);
      } else if (t.byte_fallback && std::all_of(piece.begin() + i, piece.begin() + i + n, [&](char c) { return t.byte_ids[static_cast<unsigned char>(c)] >= 0; })) {
        for (size_t k = 0; k < n; ++k) add(static_cast<uint32_t>(i + k), 1, t.byte_ids[static_cast<unsigned char>(piece[i + k])]);
      } else {
        add(static_cast<uint32_t>(i), static_cast<uint32_t>(n), -1);
      }
      i += n;
    }
  }
  if (syms.empty()) return;
  syms.back().next = -1;
  merge_symbols(syms, [&](const Symbol& l, const Symbol& r, double* pr, int32_t* merged) {
    auto it = t.merges.find(pair_key(l.id, r.id));
    if (it == t.merges.end()) return false;
    *pr = it->second.first;
    *merged = it->second.second;
    return true;
  });
  for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

// SentencePiece BPE by score (GGUF "llama"): symbols are UTF-8 characters; a pair merges
// when the concatenation is a normal or user-defined token; best score first.
static void spm_scores(const TokenizerImpl& t, std::string_view text, std::vector<int32_t>& out) {
  if (text.empty()) return;
  std::vector<Symbol> syms;
  syms.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t n = std::min(utf8_len(static_cast<unsigned char>(text[i])), text.size() - i);
    int32_t idx = static_cast<int32_t>(syms.size());
    syms.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(n), idx - 1, idx + 1, -1});
    i += n;
  }
  syms.back().next = -1;
  auto mergeable = [&](int32_t id) { return (t.attr[id] & (kAttrControl | kAttrByte | kAttrUnused | kAttrUnknown)) == 0; };
  std::string key;
  merge_symbols(syms, [&](const Symbol& l, const Symbol& r, double* pr, int32_t* merged) {
    key.assign(text.substr(l.start, l.len + r.len));
    auto it = t.token_to_id.find(key);
    if (it == t.token_to_id.end() || !mergeable(it->second)) return false;
    *pr = -static_cast<double>(t.scores[it->second]);
    *merged = it->second;
    return true;
  });
  for (int32_t i = 0; i >= 0; i = syms[i].next) {
    const Symbol& s = syms[i];
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    auto it = t.token_to_id.find(std::string(text.substr(s.start, s.len)));
    if (it != t.token_to_id.end() && mergeable(it->second)) {
      out.push_back(it->second);
      continue;
    }
    // Byte fallback, one <0xNN> per byte; unk when a byte token is missing.
    for (uint32_t k = 0; k < s.len; ++k) {
      int32_t b = t.byte_ids[static_cast<unsigned char>(text[s.start + k])];
      if (b >= 0) out.push_back(b);
      else if (t.unk >= 0) out.push_back(t.unk);
    }
  }
}

// ---- pre-tokenizer ------------------------------------------------------------

namespace {

struct Piece {
  std::string text;
  bool at_start;  // begins at offset 0 of the whole input (Metaspace prepend_scheme "first")
};

void split_piece(const PreStep& st, const Piece& in, std::vector<Piece>& out) {
  const std::string& s = in.text;
  std::vector<std::pair<size_t, size_t>> m;
  if (st.regex) {
    m = st.regex->find_all(s);
  } else if (!st.literal.empty()) {
    for (size_t p = 0; (p = s.find(st.literal, p)) != std::string::npos; p += st.literal.size()) m.emplace_back(p, st.literal.size());
  }
  // Spans in order, each flagged as a delimiter ("match", or non-match when inverted).
  struct Span { size_t b, e; bool delim; };
  std::vector<Span> spans;
  size_t pos = 0;
  for (auto [b, len] : m) {
    if (b > pos) spans.push_back({pos, b, st.invert});
    spans.push_back({b, b + len, !st.invert});
    pos = b + len;
  }
  if (pos < s.size()) spans.push_back({pos, s.size(), st.invert});

  std::vector<std::pair<size_t, size_t>> res;
  switch (st.behavior) {
    case PreStep::Removed:
      for (auto& sp : spans) if (!sp.delim) res.emplace_back(sp.b, sp.e);
      break;
    case PreStep::Isolated:
      for (auto& sp : spans) res.emplace_back(sp.b, sp.e);
      break;
    case PreStep::MergedWithPrevious: {
      bool prev_delim = false;
      for (auto& sp : spans) {
        if (sp.delim && !res.empty() && !prev_delim) res.back().second = sp.e;
        else res.emplace_back(sp.b, sp.e);
        prev_delim = sp.delim;
      }
      break;
    }
    case PreStep::MergedWithNext: {
      bool prev_delim = false;
      for (auto& sp : spans) {
        if (!sp.delim && prev_delim && !res.empty()) res.back().second = sp.e;
        else res.emplace_back(sp.b, sp.e);
        prev_delim = sp.delim;
      }
      break;
    }
    case PreStep::Contiguous: {
      bool prev_delim = false;
      for (auto& sp : spans) {
        if (sp.delim && prev_delim && !res.empty()) res.back().second = sp.e;
        else res.emplace_back(sp.b, sp.e);
        prev_delim = sp.delim;
      }
      break;
    }
  }
  for (auto [b, e] : res) {
    if (e > b) out.push_back({s.substr(b, e - b), in.at_start && b == 0});
  }
}

}  // namespace

static std::vector<Piece> pre_tokenize(const TokenizerImpl& t, std::string text, bool at_start) {
  std::vector<Piece> cur;
  cur.push_back({std::move(text), at_start});
  std::vector<Piece> next;
  for (const PreStep& st : t.pre) {
    next.clear();
    for (Piece& p : cur) {
      switch (st.kind) {
        case PreStep::Split:
          split_piece(st, p, next);
          break;
        case PreStep::PrefixSpace:
          if (!p.text.empty() && p.text[0] != ' ') p.text.insert(0, " ");
          next.push_back(std::move(p));
          break;
        case PreStep::Metaspace: {
          replace_all(p.text, " ", st.replacement);
          bool prepend = st.prepend == PreStep::Always || (st.prepend == PreStep::First && p.at_start);
          if (prepend && p.text.compare(0, st.replacement.size(), st.replacement) != 0) p.text.insert(0, st.replacement);
          if (st.split) {
            PreStep sp;
            sp.literal = st.replacement;
            sp.behavior = PreStep::MergedWithNext;
            split_piece(sp, p, next);
          } else {
            next.push_back(std::move(p));
          }
          break;
        }
      }
    }
    cur.swap(next);
  }
  return cur;
}

// ---- added tokens -------------------------------------------------------------

namespace {

struct Segment {
  size_t b, e;     // text span (when id < 0)
  int32_t id;      // >= 0: an added token
};

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_word(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (static_cast<unsigned char>(c) >= 0x80); }

std::vector<Segment> split_added(const TokenizerImpl& t, std::string_view text, bool parse_special) {
  std::vector<Segment> segs;
  size_t text_start = 0;  // start of the pending text span
  size_t i = 0;
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    for (uint32_t k : t.added_by_byte[static_cast<unsigned char>(text[i])]) {  // longest first
      const AddedToken& a = t.added[k];
      if (a.special && !parse_special) continue;
      if (text.compare(i, a.content.size(), a.content) != 0) continue;
      if (a.single_word) {
        size_t e = i + a.content.size();
        if ((i > 0 && is_word(text[i - 1])) || (e < text.size() && is_word(text[e]))) continue;
      }
      hit = &a;
      break;
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t b = i, e = i + hit->content.size();
    if (hit->lstrip) while (b > text_start && is_ws(text[b - 1])) --b;
    if (hit->rstrip) while (e < text.size() && is_ws(text[e])) ++e;
    if (b > text_start) segs.push_back({text_start, b, -1});
    segs.push_back({b, e, hit->id});
    text_start = i = e;
  }
  if (text_start < text.size()) segs.push_back({text_start, text.size(), -1});
  return segs;
}

}  // namespace

// ---- Tokenizer ------------------------------------------------------------------

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  const TokenizerImpl& t = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special) out.insert(out.end(), t.prefix_ids.begin(), t.prefix_ids.end());
  // Invalid UTF-8 in the input is replaced first, so every later stage sees valid text.
  std::string clean = utf8_replace_invalid(text);
  bool after_special = true;
  for (const Segment& sg : split_added(t, clean, parse_special)) {
    if (sg.id >= 0) {
      out.push_back(sg.id);
      after_special = true;
      continue;
    }
    std::string s = clean.substr(sg.b, sg.e - sg.b);
    if (t.model == ModelKind::SpmScores) {
      if (t.spm_space_prefix && after_special) s.insert(0, " ");
      if (t.spm_escape_spaces) replace_all(s, " ", "\xE2\x96\x81");
      after_special = false;
      spm_scores(t, s, out);
      continue;
    }
    after_special = false;
    for (const NormStep& n : t.normalizers) {
      switch (n.kind) {
        case NormStep::Unicode: normalize_in_place(s, n.form); break;
        case NormStep::Prepend: if (!s.empty()) s.insert(0, n.text); break;
        case NormStep::Replace: replace_all(s, n.text, n.content); break;
      }
    }
    for (const Piece& p : pre_tokenize(t, std::move(s), sg.b == 0)) bpe_ranks(t, p.text, out);
  }
  if (add_special) out.insert(out.end(), t.suffix_ids.begin(), t.suffix_ids.end());
  return out;
}

std::string Tokenizer::decode_piece(int32_t id, bool skip_special) const {
  const TokenizerImpl& t = *impl_;
  if (!t.valid(id)) return {};
  if (skip_special && (t.attr[id] & kAttrControl)) return {};
  return t.pieces[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  StreamDecoder d(*this, skip_special);
  std::string out;
  for (int32_t id : ids) out += d.push(id);
  out += d.flush();
  return out;
}

int32_t Tokenizer::vocab_size() const { return impl_->size(); }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos >= 0 ? std::optional<int32_t>(impl_->bos) : std::nullopt; }
const std::vector<int32_t>& Tokenizer::eos_ids() const { return impl_->eos_ids; }
std::optional<int32_t> Tokenizer::pad_id() const { return impl_->pad >= 0 ? std::optional<int32_t>(impl_->pad) : std::nullopt; }
std::optional<int32_t> Tokenizer::unk_id() const { return impl_->unk >= 0 ? std::optional<int32_t>(impl_->unk) : std::nullopt; }
bool Tokenizer::is_special(int32_t id) const { return impl_->valid(id) && (impl_->attr[id] & kAttrControl); }
bool Tokenizer::is_eos(int32_t id) const { return std::find(impl_->eos_ids.begin(), impl_->eos_ids.end(), id) != impl_->eos_ids.end(); }

std::string Tokenizer::id_to_token(int32_t id) const { return impl_->valid(id) ? impl_->tokens[id] : std::string(); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->token_to_id.find(std::string(token));
  if (it == impl_->token_to_id.end()) return std::nullopt;
  return it->second;
}

std::string Tokenizer::bos_token() const { return impl_->valid(impl_->bos) ? impl_->tokens[impl_->bos] : std::string(); }
std::string Tokenizer::eos_token() const { return impl_->valid(impl_->eos) ? impl_->tokens[impl_->eos] : std::string(); }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }
std::optional<ChatFormat> Tokenizer::chat_format() const { return detect_chat_format(impl_->chat_template); }

std::string Tokenizer::apply_chat(const ChatFormat& fmt, const std::vector<ChatMessage>& msgs, bool add_generation_prompt) const {
  return nunchaku::apply_chat(fmt, msgs, add_generation_prompt, bos_token(), eos_token());
}

// ---- StreamDecoder ------------------------------------------------------------------

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool skip_special) : impl_(tok.impl_), skip_special_(skip_special) {}

// True when `s` is valid UTF-8 except for an incomplete (but so far valid) last character.
static bool utf8_valid_prefix(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t prefix = 1;
    size_t n = utf8_char_at(s, i, &prefix);
    if (n) {
      i += n;
      continue;
    }
    return i + prefix == s.size() && utf8_len(static_cast<unsigned char>(s[i])) > prefix;
  }
  return true;
}

static std::string replacement_chars(size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += "\xEF\xBF\xBD";
  return out;
}

std::string StreamDecoder::emit(std::string text) {
  if (first_ && !text.empty()) {
    first_ = false;
    if (impl_->strip_leading_space && text[0] == ' ') text.erase(0, 1);
  }
  return text;
}

std::string StreamDecoder::end_byte_run() {
  std::string out;
  if (byte_run_tokens_ && !byte_run_invalid_) {
    // A run that ends on a complete, valid string is that string; one cut short is invalid.
    out = utf8_valid_prefix(byte_run_) && utf8_complete_prefix(byte_run_) == byte_run_.size()
              ? byte_run_
              : replacement_chars(byte_run_tokens_);
  }
  byte_run_.clear();
  byte_run_tokens_ = 0;
  byte_run_invalid_ = false;
  return out;
}

std::string StreamDecoder::push(int32_t id) {
  const TokenizerImpl& t = *impl_;
  if (!t.valid(id) || (skip_special_ && (t.attr[id] & kAttrControl))) return {};
  const std::string& piece = t.pieces[id];
  if (t.decode_kind == DecodeKind::Spm && t.byte_fallback_decoder && (t.attr[id] & kAttrByte)) {
    ++byte_run_tokens_;
    if (byte_run_invalid_) return emit(replacement_chars(1));
    byte_run_ += piece;
    if (utf8_valid_prefix(byte_run_)) return {};  // held until the run ends
    byte_run_invalid_ = true;  // the whole run decodes to U+FFFD per token, whatever follows
    byte_run_.clear();
    return emit(replacement_chars(byte_run_tokens_));
  }
  std::string out = end_byte_run();
  pending_ += piece;
  size_t n = utf8_complete_prefix(pending_);
  out += utf8_replace_invalid(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return emit(std::move(out));
}

std::string StreamDecoder::flush() {
  std::string out = end_byte_run();
  out += utf8_replace_invalid(pending_);
  pending_.clear();
  return emit(std::move(out));
}

}  // namespace nunchaku
