// What `nunchaku run` writes per request, and the writer that keeps input order.
//
// Shapes (docs/run.md): a request that came in the OpenAI batch shape is answered in the
// OpenAI batch output shape ({"id", "custom_id", "response": {"status_code", "request_id",
// "body": chat.completion | text_completion}, "error"}); any other in nunchaku's own
// ({"id"|"custom_id", "text", "finish_reason", "token_ids", "usage", "timings"}).
// Asked-for logprobs come as vLLM returns them: completions choices[].logprobs {tokens,
// token_logprobs, top_logprobs, text_offset}; chat (and nunchaku's own shape, under
// "logprobs") {content: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "batch/requests.hpp"

namespace nunchaku {

// One generated token's log-probability and its top alternatives (descending), as text.
struct LogprobEntry {
  std::string token;  // the token's bytes (decode_piece)
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
};

struct Completion {
  std::string text;
  std::string finish_reason;        // stop | length
  std::vector<int32_t> token_ids;   // generated ids; a stopping EOS is not among them
  std::optional<std::vector<LogprobEntry>> logprobs;  // one per token id, when requested
  int64_t prompt_tokens = 0;
  double prefill_s = 0, decode_s = 0;
};

struct ResultContext {
  std::string model;   // "model" of OpenAI bodies
  int64_t created = 0;  // unix seconds, "created" of OpenAI bodies
};

// `c` null: the request failed with `error`.
nlohmann::json result_json(const BatchRequest& r, const Completion* c, const std::string& error, const ResultContext& ctx);
// An OpenAI-shape request's "n" choices, in choice order: one body whose choices are indexed
// 0..n-1 and whose usage counts the prompt once and every choice's tokens.
nlohmann::json result_json(const BatchRequest& r, const std::vector<Completion>& choices, const ResultContext& ctx);

// JSONL to a stream, each line flushed. Ordered: a result waits until every earlier index
// was written; unordered: written as it comes. Write failures throw Error io.write (exit 1;
// 2 for a closed descriptor; 141 for a reader that went away, as the shell reports SIGPIPE).
class ResultWriter {
 public:
  ResultWriter(std::FILE* f, std::string name, bool ordered) : f_(f), name_(std::move(name)), ordered_(ordered) {}
  void put(size_t index, const nlohmann::json& result);
  // Everything held (finished results behind an unfinished one), in input order.
  void write_held();
  size_t written() const { return written_; }
  size_t held() const { return held_.size(); }
  bool broken() const { return broken_; }
  // Text written as it is (flushed; the same failure rules), for text output.
  void write_line(const std::string& line);

 private:
  std::FILE* f_;
  std::string name_;
  bool ordered_;
  bool broken_ = false;
  size_t next_ = 0, written_ = 0;
  std::map<size_t, std::string> held_;
};

}  // namespace nunchaku
