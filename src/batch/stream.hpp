// Continuous batching over a stream of requests, for `nunchaku run` reading stdin as it
// arrives: the same scheduling as engine::generate (up to batch_size sequences decode
// together, a finished sequence's KV slot goes to the next request at once, prompt chunks
// share forward passes with the decode steps of the others), but requests are pulled from
// a source while the batch runs instead of being given up front.
//
// The source is asked for a request whenever a slot is free: without blocking while some
// sequence is running, and blocking (wait = true) when none is, so an idle run sleeps
// until the next line arrives. Results go to on_finish as each request ends.
#pragma once

#include <cstddef>
#include <functional>

#include "engine/generate.hpp"

namespace nunchaku {

enum class Pull {
  Got,     // `req` and `id` were filled
  NotYet,  // nothing ready now (only when wait is false)
  End,     // no more requests will come (end of input, or a stop was requested)
};

struct StreamOptions {
  int batch_size = 0;         // sequences at once; 0 = the model's max_batch
  int64_t prefill_chunk = 0;  // prompt tokens per forward pass; 0 = the model's max_tokens
  std::function<Pull(bool wait, size_t& id, engine::GenerationRequest& req)> pull;
  // Called as each request ends, with the id the source gave it.
  std::function<void(size_t id, const engine::GenerationResult&)> on_finish;
  // Polled before every forward pass; true abandons the running requests (not reported).
  std::function<bool()> should_stop;
};

// Runs until the source ends and every admitted request finished, or should_stop.
// Errors of the model itself (engine.*) propagate as Error; finished requests were reported.
engine::GenerationStats generate_stream(engine::Transformer& model, const StreamOptions& opts);

}  // namespace nunchaku
