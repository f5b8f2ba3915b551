// Batch I/O of `nunchaku run`: one request per input line, one JSON object per request out.
//
// Input lines (blank lines skipped):
//   plain text                       -> a prompt (--input-format lines, or auto for a line not starting with '{')
//   {"id"|"custom_id": .., "prompt": "..." | "messages": [{"role","content"}...],
//    "max_tokens", "temperature", "top_k", "top_p", "min_p", "repetition_penalty", "seed",
//    "stop": "s" | ["s", ...]}      -> per-request parameters override the command line
//   OpenAI batch request: {"custom_id", "method", "url", "body": {"messages" | "prompt", "max_tokens", ...}}
//     ("max_completion_tokens" is read as max_tokens); url /v1/chat/completions needs
//     "messages", /v1/completions needs "prompt" (raw text completion, no chat template).
//   "logprobs": k (0..20) or true + "top_logprobs": k; "n": 1..128 choices (OpenAI shape only).
//   Fields that would change the answer and are not implemented ("echo", "best_of",
//   "logit_bias", "tools", "suffix", ...) and other urls are per-request errors naming them.
// Numeric fields must lie in param_ranges() (the same table checks the command-line flags).
// A line that fails to parse becomes a request with `error` set; the batch goes on.
#pragma once

#include <cstdint>
#include <istream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/chat.hpp"

namespace nunchaku {

enum class InputFormat { Auto, Lines, Jsonl };
InputFormat parse_input_format(std::string_view s);  // Error usage.input_format

// Valid values of a sampling/length parameter, shared by the command line and request fields.
struct ParamRange {
  const char* field;  // request field; the flag is "--" + field with '_' as '-'
  double lo, hi;
  bool lo_open, hi_open, integer;
};
const std::vector<ParamRange>& param_ranges();
// "" when `v` is allowed for `field`, else why not ("must be in (0, 1], not 5").
std::string param_error(std::string_view field, double v);

struct RequestParams {
  std::optional<int64_t> max_tokens;
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k;
  std::optional<uint64_t> seed;
  std::optional<std::vector<std::string>> stop;
  // Top alternatives per generated token, 0..20, when log-probabilities were asked for:
  // "logprobs": k (completions) or "logprobs": true with "top_logprobs": k (chat).
  std::optional<int> logprobs;
  // "n": choices of the request, each sampled on its own (the OpenAI batch shape only).
  int n = 1;
};
inline constexpr int kMaxChoices = 128;

struct BatchRequest {
  size_t index = 0;               // 0-based position among the requests
  size_t line = 0;                // 1-based input line
  nlohmann::json id;              // "id" or "custom_id" as given, else the 0-based index
  bool custom_id = false;         // the id came as "custom_id" (echoed under that key)
  std::string prompt;             // raw prompt text (when !chat)
  bool chat = false;              // messages given
  std::vector<ChatMessage> messages;
  RequestParams params;
  bool openai = false;            // the OpenAI batch shape ({"custom_id", "body"}): answered in that shape
  bool completion = false;        // OpenAI /v1/completions: the prompt is raw text, no chat template
  std::string error;              // non-empty: the line could not be used
};

BatchRequest parse_request(std::string_view line, size_t index, size_t line_no, InputFormat fmt);
// Every request of a stream at once (tests, fuzzing); a UTF-8 BOM at the start is dropped.
std::vector<BatchRequest> read_requests(std::istream& in, InputFormat fmt);
// Bytes of prompt text the request carries (prompt, or the messages' contents).
size_t prompt_bytes(const BatchRequest& r);

// Where a stop string first occurs in `text` (npos when none), over all `stops`.
size_t find_stop(std::string_view text, const std::vector<std::string>& stops);

}  // namespace nunchaku
