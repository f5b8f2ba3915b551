// Tokenizer internals shared by the loaders (hf.cpp, gguf_vocab.cpp) and the
// encoder/decoder (tokenizer.cpp). Not part of the public API.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "tokenizer/regex.hpp"
#include "tokenizer/unicode_norm.hpp"

namespace nunchaku {

// Per-token attributes (bit set).
enum TokenAttr : uint8_t {
  kAttrNormal = 0,
  kAttrControl = 1,      // special: BOS/EOS/<|im_start|>; only from text with parse_special
  kAttrUserDefined = 2,  // added token matched in text even without parse_special
  kAttrByte = 4,         // <0xNN> byte-fallback token
  kAttrUnknown = 8,      // the unk token
  kAttrUnused = 16,
};

// A token split out of the raw text before normalisation (HF added_tokens, GGUF
// control/user-defined tokens).
struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;  // needs parse_special
  bool lstrip = false;   // swallow whitespace on the left
  bool rstrip = false;   // swallow whitespace on the right
  bool single_word = false;
};

enum class ModelKind {
  BpeRanks,   // merges ranked by list order (HF BPE, GGUF gpt2)
  SpmScores,  // merge the adjacent pair whose merged token has the highest score (GGUF llama)
};

// One pre-tokenizer step, applied to every piece the previous steps produced.
struct PreStep {
  enum Kind { Split, Metaspace, PrefixSpace /* ByteLevel add_prefix_space */ } kind = Split;
  // Split
  std::shared_ptr<const Regex> regex;  // null: literal `literal`
  std::string literal;
  enum Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous } behavior = Isolated;
  bool invert = false;
  // Metaspace
  std::string replacement = "\xE2\x96\x81";  // U+2581
  enum Prepend { Always, First, Never } prepend = Always;
  bool split = false;
};

// One HF normalizer step, applied to every text segment between added tokens.
struct NormStep {
  enum Kind { Unicode, Prepend, Replace } kind = Unicode;
  NormForm form = NormForm::NFC;  // Unicode
  std::string text;               // Prepend: the prefix (added to non-empty text); Replace: the pattern
  std::string content;            // Replace: the replacement
};

enum class DecodeKind {
  ByteLevel,  // vocab strings are GPT-2 byte-to-unicode encoded
  Spm,        // "▁" is a space, <0xNN> is a byte
  Plain,      // strings as they are
};

struct TokenizerImpl {
  std::string source;  // file named in errors

  // ---- vocabulary
  std::vector<std::string> tokens;  // id -> string as stored (byte-level form for ByteLevel)
  std::unordered_map<std::string, int32_t> token_to_id;
  std::vector<uint8_t> attr;   // TokenAttr bits per id
  std::vector<float> scores;   // SpmScores only
  std::vector<std::string> pieces;  // id -> decoded bytes (DecodeKind applied)

  // ---- model
  ModelKind model = ModelKind::BpeRanks;
  bool byte_level = false;     // pieces map bytes to vocab chars before the model
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (left,right) -> (rank, merged)
  std::array<int32_t, 256> byte_ids{};  // byte-level: the byte's char token; else <0xNN>; -1 absent
  bool byte_fallback = false;
  bool ignore_merges = false;
  bool fuse_unk = false;
  int32_t unk = -1;

  // ---- text pipeline
  std::vector<AddedToken> added;  // longest first
  std::array<std::vector<uint32_t>, 256> added_by_byte;  // indices into `added` by first byte, longest first
  std::vector<NormStep> normalizers;  // HF normalizer (Sequence flattened), applied in order
  bool spm_space_prefix = false;   // GGUF llama: " " before text that starts the input or follows a special
  bool spm_escape_spaces = false;  // GGUF llama: " " -> "▁"
  std::vector<PreStep> pre;

  // ---- post-processing (add_special)
  std::vector<int32_t> prefix_ids;  // e.g. BOS
  std::vector<int32_t> suffix_ids;  // e.g. EOS

  // ---- decoding
  DecodeKind decode_kind = DecodeKind::Plain;
  bool strip_leading_space = false;  // drop one leading ' ' of the decoded text
  bool byte_fallback_decoder = true;  // Spm: <0xNN> decodes to the byte (HF ByteFallback decoder)

  // ---- special ids and chat
  int32_t bos = -1, eos = -1, pad = -1;
  std::vector<int32_t> eos_ids;
  std::string chat_template;

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  bool valid(int64_t id) const { return id >= 0 && id < static_cast<int64_t>(tokens.size()); }
  // Builds token_to_id, pieces, byte_ids, sorts `added`; checks ids. Called by loaders last.
  void finish();
  [[noreturn]] void fail(const std::string& code, const std::string& msg, const std::string& hint = "") const;
};

// The GPT-2 byte <-> unicode mapping: printable bytes map to themselves, the rest to U+0100...
const std::array<std::string, 256>& byte_to_unicode();
// Inverse; -1 for characters outside the mapping.
int byte_from_unicode(uint32_t cp);

// UTF-8 helpers (never read past `s`).
size_t utf8_len(unsigned char lead);  // 1..4 by the lead byte; 1 for a stray continuation
// Length of the longest prefix of `s` that ends on a character boundary, treating a
// trailing incomplete but so-far-valid sequence as not yet complete.
size_t utf8_complete_prefix(std::string_view s);

}  // namespace nunchaku
