// Text <-> token ids for `nunchaku run`. One Tokenizer type covers
//   - HF tokenizer.json byte-level BPE (GPT-2, Llama-3, Qwen2 pre-tokenizer regexes)
//     and SentencePiece-style BPE with byte fallback (Llama-2, Mistral, TinyLlama);
//   - GGUF embedded vocabularies: "llama" (SentencePiece scores) and "gpt2" (BPE merges)
//     with the pre-tokenizer named by tokenizer.ggml.pre.
// See docs/tokenizer.md for the algorithms and the supported pre-tokenizers.
//
// A Tokenizer is immutable after loading and cheap to copy (shared state); encode and
// decode are const and safe to call from several threads at once. Loading a broken or
// hostile file throws nunchaku::Error with a "tokenizer.*" code, the file, and exit 2.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat.hpp"

namespace nunchaku {

struct GgufFile;
struct GgufVocab;
struct TokenizerImpl;

class Tokenizer {
 public:
  // tokenizer.json from an HF model directory, plus tokenizer_config.json (bos/eos token,
  // add_bos_token, chat_template), generation_config.json (eos_token_id: int or list)
  // and config.json (bos/eos ids) when present.
  [[nodiscard]] static Tokenizer from_hf_dir(const std::string& dir);
  // tokenizer.json alone, from text (tests, fuzzers); `name` is used in error messages.
  [[nodiscard]] static Tokenizer from_hf_json(std::string_view tokenizer_json, const std::string& name);
  // The tokenizer embedded in a GGUF file's metadata (tokenizer.ggml.*).
  [[nodiscard]] static Tokenizer from_gguf(const GgufFile& gguf);

  // The vocabulary as GGUF key-values describe it (tokenizer/gguf_vocab.hpp), for writing
  // a GGUF: byte-level BPE becomes "gpt2" with the tokenizer.ggml.pre whose regexes the
  // tokenizer splits with; SentencePiece-style BPE (byte fallback, U+2581 spaces) becomes
  // "llama" with each merged token scored by its merge's rank, so llama.cpp's merge-by-score
  // follows the merges. Throws Error("tokenizer.no_gguf_form", exit 2) for anything else.
  GgufVocab gguf_vocab() const;

  // add_special: BOS/EOS as the tokenizer's post-processor or add_bos_token says.
  // parse_special: text spelling a special (control) token becomes that token; user-defined
  // added tokens are always recognised, as in HF tokenizers and llama.cpp.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // Concatenated text of `ids`; invalid UTF-8 (a cut multi-byte character) becomes U+FFFD.
  // Out-of-range ids are skipped. skip_special drops control tokens (BOS, EOS, <|im_end|>).
  std::string decode(std::span<const int32_t> ids, bool skip_special) const;
  // The raw bytes one token stands for (may be part of a UTF-8 character); "" for an
  // out-of-range id. No leading-space stripping: that is StreamDecoder's and decode's job.
  std::string decode_piece(int32_t id, bool skip_special = false) const;

  int32_t vocab_size() const;
  std::optional<int32_t> bos_id() const;
  const std::vector<int32_t>& eos_ids() const;  // every id that ends generation
  std::optional<int32_t> pad_id() const;
  std::optional<int32_t> unk_id() const;
  bool is_special(int32_t id) const;  // control tokens: never produced from plain text
  bool is_eos(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;  // exact vocab string
  // The vocabulary string of `id` as stored ("Ġworld", "▁the", "<0x0A>"; HF's
  // convert_ids_to_tokens); "" for an out-of-range id.
  std::string id_to_token(int32_t id) const;
  std::string bos_token() const;  // text of BOS/EOS ("" when none): what chat templates insert
  std::string eos_token() const;

  // The chat template from tokenizer_config.json / tokenizer.chat_template ("" when none),
  // and the family it was recognised as.
  const std::string& chat_template() const;
  std::optional<ChatFormat> chat_format() const;
  // The prompt string the template renders (BOS text included when the template has it):
  // encode it with add_special=false, parse_special=true.
  std::string apply_chat(const ChatFormat& fmt, const std::vector<ChatMessage>& msgs,
                         bool add_generation_prompt) const;

 private:
  explicit Tokenizer(std::shared_ptr<const TokenizerImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const TokenizerImpl> impl_;
  friend class StreamDecoder;
};

// Incremental detokenizer for streaming and stop strings: push() returns only text that
// is complete UTF-8, holding back the bytes of a character cut across tokens, and applies
// the same leading-space rule as decode(), so the concatenation of all pushes plus
// flush() equals decode(all ids) (decode is implemented with it). As HF's ByteFallback
// decoder, a run of <0xNN> tokens that is not valid UTF-8 becomes one U+FFFD per token.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = true);
  std::string push(int32_t id);
  std::string flush();  // whatever is still held back, invalid bytes as U+FFFD

 private:
  std::string emit(std::string text);  // applies the leading-space rule once
  std::string end_byte_run();

  std::shared_ptr<const TokenizerImpl> impl_;
  bool skip_special_;
  bool first_ = true;
  std::string pending_;        // bytes of a character not yet complete
  std::string byte_run_;       // consecutive <0xNN> tokens, decoded together (HF ByteFallback)
  size_t byte_run_tokens_ = 0;
  bool byte_run_invalid_ = false;
};

}  // namespace nunchaku
