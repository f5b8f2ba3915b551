// Batch generation with continuous batching (one scheduler, generate_from(); generate() for
// requests given up front): up to batch_size sequences decode together
// (one pass over the weights per step serves all of them); a finished sequence's KV slot
// is given to the next waiting request at once. Prompts are prefilled in chunks that share
// forward passes with the decode steps of the others.
//
// A request that cannot run (empty or over-long prompt, token id outside the vocabulary,
// bad sampling parameters) gets finish_reason "error" with a message; the others go on.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/model.hpp"
#include "engine/sampler.hpp"

namespace nunchaku::engine {

struct GenerationRequest {
  std::vector<int32_t> prompt;       // token ids, BOS included when the model wants one
  SamplingParams sampling;
  int64_t max_tokens = 256;          // generated tokens at most
  int logprobs = -1;                 // >= 0: log-probabilities of each generated token and its
                                     // top `logprobs` alternatives (token_logprobs(), at most 20)
  std::vector<int32_t> eos_ids;      // any of these ends the request ("stop"), not included in tokens
  // Called after every generated token with all tokens so far; true ends the request
  // ("stop", the tokens kept as they are). The CLI checks stop strings here.
  std::function<bool(std::span<const int32_t> generated)> stop;
};

struct GenerationResult {
  std::vector<int32_t> tokens;       // generated ids (without the EOS that ended it)
  std::vector<TokenLogprobs> logprobs;  // one per token of `tokens`, when requested
  std::string finish_reason;         // "stop", "length" (max_tokens or context full), "error"
  std::string error;                 // why, when finish_reason == "error"
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;     // tokens sampled, the ending EOS included
  double prefill_s = 0;              // admission to first token (wall, shared with the batch)
  double decode_s = 0;               // first token to finish
};

struct SchedulerOptions {
  int batch_size = 0;                // sequences at once; 0 = the model's max_batch
  int64_t prefill_chunk = 0;         // prompt tokens per forward pass; 0 = the model's max_tokens
  // Called as each request finishes (its input index or source id), in finishing order,
  // from the calling thread.
  std::function<void(size_t index, const GenerationResult&)> on_finish;
  // Polled before every forward pass; true abandons the running requests (not reported).
  std::function<bool()> should_stop;
};

struct GenerationStats {
  // generated_tokens: the results' usage.completion_tokens summed (an ending EOS is sampled
  // but not returned, so not counted).
  int64_t forward_calls = 0, prompt_tokens = 0, generated_tokens = 0;
  int max_active = 0;                // most sequences in one forward pass
  double wall_s = 0;                 // the whole run, time waiting for requests included
  double busy_s = 0;                 // in forward passes and sampling: what tok/s is over
};

// Why a request cannot run on this model ("" when it can): empty prompt, no room left in
// the context, a token id outside the vocabulary. Schedulers fail such a request alone.
std::string check_request(const GenerationRequest& r, const Transformer& m);

// Results in input order. Errors of the model itself (engine.*) propagate as Error.
std::vector<GenerationResult> generate(Transformer& model, std::span<const GenerationRequest> requests,
                                       const SchedulerOptions& opts = {}, GenerationStats* stats = nullptr);

// Requests that arrive while the batch runs (`nunchaku run` reading stdin): the source is
// asked for one whenever a slot is free, without blocking (wait = false) while some sequence
// runs and blocking (wait = true) when none does, so an idle run sleeps until the next one.
enum class Pull {
  Got,     // `req` and `id` were filled
  NotYet,  // nothing ready now (only when wait is false)
  End,     // no more requests will come (end of input, or a stop was requested)
};
using RequestSource = std::function<Pull(bool wait, size_t& id, GenerationRequest& req)>;

// The one scheduler (generate() feeds it from its span): runs until the source ends and
// every admitted request finished, or should_stop. Results go to on_finish with the
// source's ids; errors of the model itself propagate as Error (finished requests were
// reported).
GenerationStats generate_from(Transformer& model, const RequestSource& source, const SchedulerOptions& opts);

}  // namespace nunchaku::engine
