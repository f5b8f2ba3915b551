// What `run` feeds the engine for one request, shared with `tokenize` so that what tokenize
// prints is exactly what run feeds: the model's tokenizer, the chat template, BOS and the
// text of special tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "batch/requests.hpp"
#include "format/checkpoint.hpp"
#include "tokenizer/tokenizer.hpp"

namespace nunchaku {

struct PromptOptions {
  bool raw = false;            // plain prompts as they are, not through the chat template
  bool add_bos = true;         // raw prompts get the BOS (or whatever the tokenizer adds to text)
  bool split_special = false;  // text spelling a special token in a raw prompt stays text
  std::string system;          // system message for chat prompts that have none
};

// The tokenizer of the model `ck` opened from `path`: a GGUF's embedded vocabulary, else
// tokenizer.json (with tokenizer_config.json, ...) in the weights' directory. Error
// run.no_tokenizer (exit 2) naming that directory when there is none.
[[nodiscard]] Tokenizer model_tokenizer(const Checkpoint& ck, const std::string& path);
// The same for a path not opened yet: a directory with tokenizer.json and no GGUF file is read
// without indexing its weights (so a tokenizer-only directory works); anything else is opened.
[[nodiscard]] Tokenizer model_tokenizer(const std::string& path);

// Whether `r` goes through the chat template: "messages" always; a plain prompt unless `raw`
// or the request is an OpenAI /v1/completions one, when the model has a template.
bool uses_chat_template(const PromptOptions& o, const Tokenizer& tok, const BatchRequest& r);

// The text the tokenizer encodes for `r` (the rendered template for chat requests), or ""
// with `error` set when the request cannot be rendered.
std::string prompt_text(const PromptOptions& o, const Tokenizer& tok, const BatchRequest& r, std::string& error);

// The token ids to feed for `r`, or none with `error` set (no template for "messages", a
// tokenizer failure such as a pre-tokenizer's match limit): that request's error.
std::vector<int32_t> prompt_ids(const PromptOptions& o, const Tokenizer& tok, const BatchRequest& r, std::string& error);

}  // namespace nunchaku
