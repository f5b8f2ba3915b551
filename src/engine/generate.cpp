#include "engine/generate.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/trace.hpp"
#include "core/units.hpp"

namespace nunchaku::engine {
namespace {

using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct Active {
  size_t id = 0;
  GenerationRequest req;
  GenerationResult res;
  int slot = 0;
  int64_t pos = 0;               // tokens in the cache
  int64_t prompt_done = 0;       // prompt tokens prefilled
  std::vector<int32_t> history;  // prompt + generated (repetition penalty)
  std::unique_ptr<Sampler> sampler;
  int32_t pending = -1;          // last sampled token, fed at the next step
  Clock::time_point admitted, first_token;
};


class Scheduler {
 public:
  Scheduler(Transformer& m, const RequestSource& source, const SchedulerOptions& o)
      : model_(m), source_(source), opts_(o) {
    batch_ = std::max(1, std::min<int>({o.batch_size > 0 ? o.batch_size : m.max_batch(), m.max_batch(),
                                        int(std::min<int64_t>(m.logit_rows(), m.max_tokens()))}));
    chunk_ = std::max<int64_t>(1, std::min(o.prefill_chunk > 0 ? o.prefill_chunk : m.max_tokens(), m.max_tokens()));
    for (int s = batch_ - 1; s >= 0; --s) free_slots_.push_back(s);
    active_.reserve(size_t(batch_));
  }

  GenerationStats run() {
    const auto t0 = Clock::now();
    for (;;) {
      admit();
      if (active_.empty()) {
        if (ended_ || stop()) break;
        continue;
      }
      if (stop()) break;
      const auto s0 = Clock::now();
      step();
      st_.busy_s += seconds(s0, Clock::now());
    }
    st_.wall_s = seconds(t0, Clock::now());
    return st_;
  }

 private:
  bool stop() const { return opts_.should_stop && opts_.should_stop(); }

  void finish(size_t id, const GenerationResult& r) {
    if (opts_.on_finish) opts_.on_finish(id, r);
  }

  // Fill free slots from the source; blocks only while nothing runs.
  void admit() {
    while (!ended_ && !free_slots_.empty()) {
      Active a;
      Pull p = source_(active_.empty(), a.id, a.req);
      if (p == Pull::End) ended_ = true;
      if (p != Pull::Got) return;
      a.res.prompt_tokens = int64_t(a.req.prompt.size());
      std::string why = check_request(a.req, model_);
      if (why.empty()) {
        try {
          a.sampler = std::make_unique<Sampler>(a.req.sampling, model_.vocab());
        } catch (const Error& e) {
          why = e.message();
        }
      }
      if (!why.empty()) {
        a.res.finish_reason = "error";
        a.res.error = why;
        finish(a.id, a.res);
        continue;
      }
      if (a.req.max_tokens <= 0) {
        a.res.finish_reason = "length";
        finish(a.id, a.res);
        continue;
      }
      a.slot = free_slots_.back();
      free_slots_.pop_back();
      a.history = a.req.prompt;
      a.history.reserve(a.req.prompt.size() + size_t(std::min<int64_t>(a.req.max_tokens, model_.max_context())));
      a.admitted = Clock::now();
      st_.prompt_tokens += a.res.prompt_tokens;
      active_.push_back(std::move(a));
    }
  }

  // One forward pass: every decoding sequence's pending token, then prompt chunks.
  void step() {
    chunks_.clear();
    owner_.clear();
    int64_t budget = model_.max_tokens();
    for (size_t j = 0; j < active_.size(); ++j) {
      Active& a = active_[j];
      if (a.prompt_done < int64_t(a.req.prompt.size())) continue;
      chunks_.push_back({a.slot, a.pos, {&a.pending, 1}, false});
      owner_.push_back(j);
      --budget;
    }
    const size_t decoding = chunks_.size();
    for (size_t j = 0; j < active_.size() && budget > 0; ++j) {
      Active& a = active_[j];
      const int64_t left = int64_t(a.req.prompt.size()) - a.prompt_done;
      if (left <= 0) continue;
      const int64_t n = std::min({left, chunk_, budget});
      chunks_.push_back({a.slot, a.pos, {a.req.prompt.data() + a.prompt_done, size_t(n)}, false});
      owner_.push_back(j);
      budget -= n;
    }
    auto logits = [&] {
      trace::Span span(chunks_.size() > decoding ? "prefill" : "decode step", "run");
      return model_.forward(chunks_);
    }();
    ++st_.forward_calls;
    st_.max_active = std::max(st_.max_active, int(chunks_.size()));
    done_.clear();
    for (size_t c = 0; c < chunks_.size(); ++c)
      if (advance(active_[owner_[c]], int64_t(chunks_[c].tokens.size()),
                  logits.subspan(c * size_t(model_.vocab()), size_t(model_.vocab()))))
        done_.push_back(owner_[c]);
    std::sort(done_.begin(), done_.end());
    for (size_t k = done_.size(); k-- > 0;) {
      Active& a = active_[done_[k]];
      a.res.prefill_s = seconds(a.admitted, a.first_token);
      a.res.decode_s = seconds(a.first_token, Clock::now());
      finish(a.id, a.res);
      free_slots_.push_back(a.slot);
      active_.erase(active_.begin() + std::ptrdiff_t(done_[k]));
    }
  }

  // After a chunk of `n` tokens ran: sample when the prompt is done. True when the request ended.
  bool advance(Active& a, int64_t n, std::span<const float> logits) {
    const bool was_prefill = a.prompt_done < int64_t(a.req.prompt.size());
    a.pos += n;
    if (was_prefill) {
      a.prompt_done += n;
      if (a.prompt_done < int64_t(a.req.prompt.size())) return false;  // more prompt to go
      a.first_token = Clock::now();
    }
    const int32_t tok = a.sampler->sample(logits, a.history);
    ++a.res.completion_tokens;
    const auto& eos = a.req.eos_ids;
    if (std::find(eos.begin(), eos.end(), tok) != eos.end()) {
      a.res.finish_reason = "stop";
      return true;
    }
    ++st_.generated_tokens;  // the tokens a result returns (usage.completion_tokens): an ending EOS is not one
    a.res.tokens.push_back(tok);
    if (a.req.logprobs >= 0) a.res.logprobs.push_back(token_logprobs(logits, tok, a.req.logprobs));
    a.history.push_back(tok);
    a.pending = tok;
    if (a.req.stop && a.req.stop(a.res.tokens)) {
      a.res.finish_reason = "stop";
      return true;
    }
    if (int64_t(a.res.tokens.size()) >= a.req.max_tokens || a.pos >= model_.max_context()) {
      a.res.finish_reason = "length";
      return true;
    }
    return false;
  }

  Transformer& model_;
  const RequestSource& source_;
  const SchedulerOptions& opts_;
  int batch_ = 1;
  int64_t chunk_ = 1;
  bool ended_ = false;
  std::vector<int> free_slots_;
  std::vector<Active> active_;
  std::vector<SeqChunk> chunks_;
  std::vector<size_t> owner_, done_;
  GenerationStats st_;
};

}  // namespace

std::string check_request(const GenerationRequest& r, const Transformer& m) {
  if (r.prompt.empty()) return "empty prompt";
  if (int64_t(r.prompt.size()) >= m.max_context())
    return fmt::format("prompt of {} does not fit the context of {} (it needs room for one more)",
                       plural(r.prompt.size(), "token"), plural(uint64_t(m.max_context()), "token"));
  for (int32_t id : r.prompt)
    if (id < 0 || id >= m.vocab()) return fmt::format("token id {} outside the vocabulary [0, {})", id, m.vocab());
  return "";
}

GenerationStats generate_from(Transformer& model, const RequestSource& source, const SchedulerOptions& opts) {
  return Scheduler(model, source, opts).run();
}

std::vector<GenerationResult> generate(Transformer& model, std::span<const GenerationRequest> requests,
                                       const SchedulerOptions& opts, GenerationStats* stats) {
  std::vector<GenerationResult> results(requests.size());
  size_t next = 0;
  const RequestSource from_span = [&](bool, size_t& id, GenerationRequest& req) {
    if (next == requests.size()) return Pull::End;
    id = next;
    req = requests[next++];
    return Pull::Got;
  };
  SchedulerOptions o = opts;
  o.on_finish = [&](size_t id, const GenerationResult& r) {
    results[id] = r;
    if (opts.on_finish) opts.on_finish(id, results[id]);
  };
  const GenerationStats st = generate_from(model, from_span, o);
  if (stats) *stats = st;
  return results;
}

}  // namespace nunchaku::engine
