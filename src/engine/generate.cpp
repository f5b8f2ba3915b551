#include "engine/generate.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "core/error.hpp"

namespace nunchaku::engine {
namespace {

using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct Active {
  size_t req = 0;
  int slot = 0;
  int64_t pos = 0;          // tokens in the cache
  int64_t prompt_done = 0;  // prompt tokens prefilled
  std::vector<int32_t> history;  // prompt + generated (repetition penalty)
  std::unique_ptr<Sampler> sampler;
  int32_t pending = -1;     // last sampled token, fed at the next step
  Clock::time_point admitted, first_token;
};

}  // namespace

std::string check_request(const GenerationRequest& r, const Transformer& m) {
  if (r.prompt.empty()) return "empty prompt";
  if (int64_t(r.prompt.size()) >= m.max_context())
    return fmt::format("prompt of {} tokens does not fit the context of {} tokens (it needs room for one more)",
                       r.prompt.size(), m.max_context());
  for (int32_t id : r.prompt)
    if (id < 0 || id >= m.vocab()) return fmt::format("token id {} outside the vocabulary [0, {})", id, m.vocab());
  return "";
}

std::vector<GenerationResult> generate(Transformer& model, std::span<const GenerationRequest> requests,
                                       const SchedulerOptions& opts, GenerationStats* stats) {
  const auto t_start = Clock::now();
  std::vector<GenerationResult> results(requests.size());
  const int batch = std::max(1, std::min<int>({opts.batch_size > 0 ? opts.batch_size : model.max_batch(), model.max_batch(),
                                               int(std::min<int64_t>(model.logit_rows(), model.max_tokens()))}));
  const int64_t chunk = std::max<int64_t>(1, std::min(opts.prefill_chunk > 0 ? opts.prefill_chunk : model.max_tokens(),
                                                      model.max_tokens()));
  GenerationStats st;

  std::vector<int> free_slots;
  for (int s = batch - 1; s >= 0; --s) free_slots.push_back(s);
  std::vector<Active> active;
  active.reserve(size_t(batch));
  std::vector<SeqChunk> chunks;
  std::vector<size_t> chunk_owner;  // index into active
  std::vector<size_t> done;         // indices into active that finished this step
  size_t next = 0;

  auto finish = [&](size_t req, GenerationResult& r) {
    if (opts.on_finish) opts.on_finish(req, r);
  };

  for (;;) {
    // Admit waiting requests into free slots.
    while (!free_slots.empty() && next < requests.size()) {
      size_t i = next++;
      const GenerationRequest& rq = requests[i];
      GenerationResult& res = results[i];
      res.prompt_tokens = int64_t(rq.prompt.size());
      std::string why = check_request(rq, model);
      std::unique_ptr<Sampler> sampler;
      if (why.empty()) {
        try {
          sampler = std::make_unique<Sampler>(rq.sampling, model.vocab());
        } catch (const Error& e) {
          why = e.message();
        }
      }
      if (!why.empty()) {
        res.finish_reason = "error";
        res.error = why;
        finish(i, res);
        continue;
      }
      if (rq.max_tokens <= 0) {
        res.finish_reason = "length";
        finish(i, res);
        continue;
      }
      Active a;
      a.req = i;
      a.slot = free_slots.back();
      free_slots.pop_back();
      a.history = rq.prompt;
      a.history.reserve(rq.prompt.size() + size_t(std::min<int64_t>(rq.max_tokens, model.max_context())));
      a.sampler = std::move(sampler);
      a.admitted = Clock::now();
      active.push_back(std::move(a));
      st.prompt_tokens += res.prompt_tokens;
    }
    if (active.empty()) break;

    // One forward pass: every decoding sequence's pending token, then prompt chunks.
    chunks.clear();
    chunk_owner.clear();
    int64_t budget = model.max_tokens();
    for (size_t j = 0; j < active.size(); ++j) {
      Active& a = active[j];
      if (a.prompt_done < int64_t(requests[a.req].prompt.size())) continue;
      chunks.push_back({a.slot, a.pos, {&a.pending, 1}, false});
      chunk_owner.push_back(j);
      --budget;
    }
    for (size_t j = 0; j < active.size() && budget > 0; ++j) {
      Active& a = active[j];
      const auto& prompt = requests[a.req].prompt;
      int64_t left = int64_t(prompt.size()) - a.prompt_done;
      if (left <= 0) continue;
      int64_t n = std::min({left, chunk, budget});
      chunks.push_back({a.slot, a.pos, {prompt.data() + a.prompt_done, size_t(n)}, false});
      chunk_owner.push_back(j);
      budget -= n;
    }
    auto logits = model.forward(chunks);
    ++st.forward_calls;
    st.max_active = std::max(st.max_active, int(chunks.size()));

    done.clear();
    for (size_t c = 0; c < chunks.size(); ++c) {
      Active& a = active[chunk_owner[c]];
      const GenerationRequest& rq = requests[a.req];
      GenerationResult& res = results[a.req];
      const int64_t n = int64_t(chunks[c].tokens.size());
      const bool was_prefill = a.prompt_done < int64_t(rq.prompt.size());
      a.pos += n;
      if (was_prefill) {
        a.prompt_done += n;
        if (a.prompt_done < int64_t(rq.prompt.size())) continue;  // more prompt to go
      }
      int32_t tok = a.sampler->sample(logits.subspan(c * size_t(model.vocab()), size_t(model.vocab())), a.history);
      if (was_prefill) a.first_token = Clock::now();
      ++res.completion_tokens;
      ++st.generated_tokens;
      bool end = false;
      if (std::find(rq.eos_ids.begin(), rq.eos_ids.end(), tok) != rq.eos_ids.end()) {
        res.finish_reason = "stop";
        end = true;
      } else {
        res.tokens.push_back(tok);
        a.history.push_back(tok);
        a.pending = tok;
        if (rq.stop && rq.stop(res.tokens)) {
          res.finish_reason = "stop";
          end = true;
        } else if (int64_t(res.tokens.size()) >= rq.max_tokens || a.pos >= model.max_context()) {
          res.finish_reason = "length";
          end = true;
        }
      }
      if (end) done.push_back(chunk_owner[c]);
    }
    std::sort(done.begin(), done.end());
    for (size_t k = done.size(); k-- > 0;) {
      Active& a = active[done[k]];
      GenerationResult& res = results[a.req];
      auto now = Clock::now();
      res.prefill_s = seconds(a.admitted, a.first_token);
      res.decode_s = seconds(a.first_token, now);
      finish(a.req, res);
      free_slots.push_back(a.slot);
      active.erase(active.begin() + std::ptrdiff_t(done[k]));
    }
  }
  st.wall_s = seconds(t_start, Clock::now());
  if (stats) *stats = st;
  return results;
}

}  // namespace nunchaku::engine
