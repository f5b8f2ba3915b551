// nunchaku run PATH: batch inference for shell scripts. Requests in (lines or JSONL, file or
// stdin, read as they arrive), one JSON object per request out, in input order (or as each
// finishes with --unordered), as soon as each is ready. SIGINT/SIGTERM keep what finished.
// Thin adapter: lines -> requests -> tokenizer (+ chat template) -> engine::generate_from -> JSONL.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <charconv>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "batch/line_input.hpp"
#include "batch/prompt.hpp"
#include "batch/requests.hpp"
#include "batch/results.hpp"
#include "cli/model_source.hpp"
#include "cli/commands.hpp"
#include "cli/help.hpp"
#include "cli/json_doc.hpp"
#include "cli/progress.hpp"
#include "cli/prompt_options.hpp"
#include "cli/run_model.hpp"
#include "cli/run_placement.hpp"
#include "cli/run_text.hpp"
#include "cli/trace_session.hpp"
#include "core/error.hpp"
#include "core/interrupt.hpp"
#include "engine/device_stream.hpp"
#include "engine/engine.hpp"
#include "engine/generate.hpp"
#include "engine/model.hpp"
#include "format/gguf.hpp"
#include "format/open.hpp"
#include "io/atomic_output.hpp"
#include "io/loader.hpp"
#include "io/memory_sampler.hpp"
#include "core/source.hpp"
#include "memory/engine_memory.hpp"
#include "memory/workload_defaults.hpp"
#include "memory/estimate.hpp"
#include "memory/plan.hpp"
#include "core/log.hpp"
#include "core/units.hpp"
#include "tokenizer/tokenizer.hpp"
#include "core/text.hpp"

namespace nunchaku::cli {
namespace {

struct RunCliOptions {
  std::string path, given_path, file, input = "-", output, input_format = "auto", plan, device = "cpu", vram, cpu_ram, kv_dtype = "auto";
  PromptOptions prompt;  // chat template, BOS, special-token text, --system: as tokenize shows them
  std::string offload = "stream";  // how disk modules are read: stream (bounded pool) | mmap
  std::string stats;                // --stats FILE: the run's summary as JSON
  std::string trace;                // --trace FILE: Chrome trace of the run (docs/pictures.md)
  std::string batch;  // --batch-size N | auto; "" = the default (default_batch)
  std::string prompt_text;          // PROMPT or -p: one request from the command line instead of the input
  bool has_prompt = false;
  std::string format = "auto";      // --format jsonl | text | auto (text for a PROMPT on a terminal)
  int batch_size = 8, threads = 0, top_k = 0;  // batch_size 0: auto, resolved when the model is placed
  int64_t max_tokens = kDefaultMaxTokens, context = 0, prefill_chunk = 0;
  float temperature = 0, top_p = 1, min_p = 0, repetition_penalty = 1;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  int max_pending = 1024;
  bool quiet = false, unordered = false, exit_on_request_error = false, fast_math = false, json = false;
  bool progress = false;  // set by run_batch: a counter on stderr
};

// What this run holds in host memory, as engine_memory() and the load account for it.
// The GPU side of a CUDA run: weights loaded there + stream slots + run state (all but the
// host read-back of the logits and the host token tables), against what the device shows.
uint64_t gpu_predicted_bytes(const WeightStore& store, const engine::Transformer& model, const GpuMemoryProbe& probe,
                             uint64_t* weights_out = nullptr, uint64_t* slots_out = nullptr, uint64_t* state_out = nullptr) {
  uint64_t weights = 0;
  for (const ModuleBlock& m : store.modules())
    if (std::find(probe.devices.begin(), probe.devices.end(), m.device) != probe.devices.end()) weights += m.bytes;
  const EngineMemory& p = model.predicted();
  const uint64_t host_tables = engine_host_tables(p.config);
  const uint64_t slots = uint64_t(model.weights().pool_slots()) * model.weights().slot_bytes();
  // Less a CPU part's share (the experts of a MoE run beside the GPU): in host memory.
  const uint64_t cpu_part = model.backend().host_part_bytes();
  const uint64_t all = p.allocated() - p.host_logits - p.stream_pool - host_tables;
  const uint64_t state = all - std::min(all, cpu_part);
  if (weights_out) *weights_out = weights;
  if (slots_out) *slots_out = slots;
  if (state_out) *state_out = state;
  return weights + slots + state;
}

void print_gpu_memory(const WeightStore& store, const engine::Transformer& model, const GpuMemoryProbe& probe) {
  uint64_t weights = 0, slots = 0, state = 0;
  const uint64_t predicted = gpu_predicted_bytes(store, model, probe, &weights, &slots, &state);
  std::string measured = "not measured";
  if (probe.known && probe.peak > 0)
    measured = fmt::format("{} measured ({:+.1f}%, cudaMemGetInfo; includes cuBLAS and kernel images)",
                           format_bytes(probe.peak), 100.0 * (double(probe.peak) - double(predicted)) / double(predicted));
  fmt::print(stderr, "gpu memory on {}: weights {} + stream slots {} + run state {} = {} ({} B) predicted, {}\n",
             probe.str(), format_bytes(weights), format_bytes(slots), format_bytes(state), format_bytes(predicted),
             predicted, measured);
}

// Host memory the run accounts for: weights kept in host memory + the stream pool + run state
// (the program itself, its libraries and the tokenizer come on top in the RSS).
uint64_t host_predicted_bytes(const WeightStore& store, const engine::Transformer& model, uint64_t* kept_out = nullptr) {
  uint64_t kept = 0;
  for (const ModuleBlock& m : store.modules())
    if (m.device.kind == Device::Kind::Cpu) kept += m.bytes;
  if (kept_out) *kept_out = kept;
  return kept + model.weights().pool_bytes() + model.state_bytes();
}

// Weight bytes left on disk (streamed each step through the pool, or read through mappings).
uint64_t disk_weight_bytes(const WeightStore& store) {
  uint64_t n = 0;
  for (const TensorView& t : store.tensors())
    if (t.device.kind == Device::Kind::Disk) n += t.nbytes;
  return n;
}

// --stats FILE: what the summary lines say, as JSON (for scripts and benchmarks).
void write_stats(const std::string& path, const std::string& model_path, const WeightStore& store, const engine::Transformer& model,
                 const engine::GenerationStats& st, int64_t requests, int64_t failed, const GpuMemoryProbe* gpu) {
  const engine::WeightProvider& w = model.weights();
  uint64_t streamed = 0, on_device = 0;
  for (size_t m = 0; m < w.modules(); ++m)
    for (const TensorView& v : w.info(m)) (w.streamed(m) ? streamed : on_device) += v.nbytes;
  // Names: docs/json.md (tokens as each result's usage); shape: docs/schema/run-stats.json.
  nlohmann::json j = {{"command", "run"},
                      {"format_version", json_format_version("run")},
                      {"path", model_path},
                      {"num_requests", requests},
                      {"num_failed_requests", failed},
                      {"prompt_tokens", st.prompt_tokens},
                      {"completion_tokens", st.generated_tokens},
                      {"num_forward_calls", st.forward_calls},
                      {"max_active_requests", st.max_active},
                      {"batch_size", model.max_batch()},
                      {"wall_s", st.wall_s},
                      {"busy_s", st.busy_s},
                      {"completion_tokens_per_s", st.busy_s > 0 ? double(st.generated_tokens) / st.busy_s : 0.0},
                      {"backend", model.backend().describe()},
                      {"weights", {{"resident_bytes", on_device},
                                   {"streamed_bytes_per_step", streamed},
                                   {"num_stream_slots", w.pool_slots()},
                                   {"stream_slot_bytes", w.slot_bytes()},
                                   {"num_stream_piece_slots", w.piece_slots()},
                                   {"stream_piece_bytes", w.piece_bytes()},
                                   {"bytes_read", nullptr},
                                   {"pieces_read", nullptr},
                                   {"piece_hits", nullptr},
                                   {"provider", w.describe()}}},
                      {"run_state_bytes", model.state_bytes()},
                      {"run_state_predicted_bytes", model.predicted().allocated()},
                      {"host_predicted_bytes", host_predicted_bytes(store, model)},
                      {"max_rss_bytes", max_rss_bytes()},
                      {"copy_gb_per_s", nullptr},
                      {"gpu_memory", nullptr}};
  if (const auto* d = dynamic_cast<const engine::DeviceStreamProvider*>(&w)) j["copy_gb_per_s"] = d->copy_gb_per_s();
  if (const auto* s = dynamic_cast<const engine::StreamedProvider*>(&w)) {
    const engine::StreamStats ss = s->stats();
    j["weights"]["bytes_read"] = ss.bytes_read;
    j["weights"]["pieces_read"] = ss.pieces_read;
    j["weights"]["piece_hits"] = ss.piece_hits;
  }
  if (gpu) {
    // As load's gpu_memory: by device ("cuda:0", or "cuda:0+cuda:1" for a split run, measured together).
    const uint64_t predicted = gpu_predicted_bytes(store, model, *gpu);
    j["gpu_memory"] = {{gpu->str(),
                        {{"predicted_bytes", predicted},
                         {"measured_bytes", gpu->known ? nlohmann::json(gpu->peak) : nlohmann::json()},
                         {"error_percent", gpu->known && predicted
                                               ? nlohmann::json(100.0 * (double(gpu->peak) - double(predicted)) / double(predicted))
                                               : nlohmann::json()}}}};
  }
  write_file_atomically(path, dump_json(j, 2) + "\n");
}

void print_memory(const WeightStore& store, const engine::Transformer& model) {
  uint64_t kept = 0;
  const uint64_t total = host_predicted_bytes(store, model, &kept), streamed = disk_weight_bytes(store);
  const uint64_t pool = model.weights().pool_bytes(), state = model.state_bytes();
  std::string disk;
  if (streamed)
    disk = fmt::format("; {} of weights on disk ({} B), {}", format_bytes(streamed), streamed,
                       pool ? "streamed each step" : "read through file mappings");
  fmt::print(stderr, "memory: weights kept {} + stream pool {} + run state {} = {} ({} B){}\n", format_bytes(kept),
             format_bytes(pool), format_bytes(state), format_bytes(total), total, disk);
}

// --trace: the run's predictions beside the samples.
void predict_run(TraceSession& tr, const LoadResult& loaded, const engine::Transformer& model, const engine::GenerationStats& st,
                 const GpuMemoryProbe* gpu) {
  // Streamed modules are read again each step.
  const uint64_t per_step = model.weights().pool_bytes() ? disk_weight_bytes(loaded.store) : 0;
  tr.predict_load(loaded.report, host_predicted_bytes(loaded.store, model), per_step * uint64_t(st.forward_calls));
  // The weights and the run state (as run's "gpu memory" line); one GPU only.
  if (gpu && gpu->devices.size() == 1) tr.predict(cuda_memory_counter(gpu->devices[0].index), gpu_predicted_bytes(loaded.store, model, *gpu));
}

engine::SamplingParams sampling_for(const RunCliOptions& o, const RequestParams& p) {
  engine::SamplingParams s;
  s.temperature = p.temperature.value_or(o.temperature);
  s.top_k = p.top_k.value_or(o.top_k);
  s.top_p = p.top_p.value_or(o.top_p);
  s.min_p = p.min_p.value_or(o.min_p);
  s.repetition_penalty = p.repetition_penalty.value_or(o.repetition_penalty);
  s.seed = p.seed.value_or(o.seed);
  return s;
}

// The command-line values, against the same table the request fields are checked with.
void check_flags(const RunCliOptions& o) {
  if (o.batch_size < 0) throw Error("usage.batch_size", "--batch-size must be a number of at least 1, or auto");
  if (!o.cpu_ram.empty()) (void)parse_size_or_throw(o.cpu_ram, "--cpu-ram");  // before the model is opened
  const std::pair<const char*, double> flags[] = {{"max_tokens", double(o.max_tokens)}, {"temperature", o.temperature},
                                                  {"top_k", double(o.top_k)},           {"top_p", o.top_p},
                                                  {"min_p", o.min_p},                   {"repetition_penalty", o.repetition_penalty}};
  for (const auto& [field, v] : flags)
    if (std::string why = param_error(field, v); !why.empty()) {
      std::string flag = std::string("--") + field;
      std::replace(flag.begin(), flag.end(), '_', '-');
      throw Error(std::string("usage.") + field, fmt::format("{} {}", flag, why));
    }
}

RunModelOptions model_options(const RunCliOptions& o, DType kv) {
  return {{o.plan, o.device, o.vram, o.cpu_ram, o.batch_size, o.threads, o.context, o.prefill_chunk, kv, o.fast_math},
          o.offload, o.quiet};
}

// Longest byte string one token stands for: a prompt longer than context x this cannot fit.
size_t longest_token_bytes(const Tokenizer& tok) {
  size_t n = 1;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) n = std::max(n, tok.decode_piece(id, false).size());
  return n;
}

// One run: requests pulled from the input as slots free up, results out as they finish.
class BatchRun {
 public:
  // `in`: the requests, or null for the one PROMPT of the command line. `text`: --format text.
  BatchRun(const RunCliOptions& o, const Tokenizer& tok, engine::Transformer& model, LineInput* in, ResultWriter& out,
           TextOutput* text, ResultContext ctx)
      : o_(o), tok_(tok), model_(model), in_(in), out_(out), text_(text), ctx_(std::move(ctx)),
        fmt_(in ? parse_input_format(o.input_format) : InputFormat::Lines), progress_("run", o.progress) {
    max_prompt_bytes_ = size_t(model.max_context()) * longest_token_bytes(tok);
    if (in_) in_->set_max_line(6 * max_prompt_bytes_ + (64 << 10));  // a JSON escape spends at most 6 bytes per prompt byte
  }

  engine::GenerationStats run() {
    engine::SchedulerOptions so;
    so.batch_size = o_.batch_size;
    so.prefill_chunk = o_.prefill_chunk;
    so.on_finish = [this](size_t id, const engine::GenerationResult& g) { on_finish(id, g); };
    so.should_stop = [] { return interrupted(); };
    return engine::generate_from(
        model_, [this](bool wait, size_t& id, engine::GenerationRequest& g) { return pull(wait, id, g); }, so);
  }

  size_t read() const { return read_; }
  size_t done() const { return done_; }
  void clear_progress() { progress_.clear(); }
  size_t failed() const { return failed_; }

 private:
  size_t written() const { return text_ ? text_->written() : out_.written(); }

  // The next input line: from the input, or the command line's PROMPT once.
  LineStatus next_line(bool wait, InputLine& line) {
    if (in_) return in_->next(wait, line);
    if (read_ > 0) return LineStatus::End;
    line.text = o_.prompt_text, line.line_no = 1, line.bytes = line.text.size();
    return LineStatus::Line;
  }

  // Stops on a stop string and, for --format text, streams the text as it grows: all but the
  // bytes a stop string could still begin with (a stop found later never starts in what was shown).
  void watch_text(engine::GenerationRequest& g, size_t index, const std::vector<std::string>& stops) {
    if (stops.empty() && !text_) return;
    struct Seen {
      StreamDecoder decoder;
      std::string text;
      size_t shown = 0;
    };
    auto seen = std::make_shared<Seen>(Seen{StreamDecoder(tok_, true), {}, 0});
    size_t hold = 0;
    for (const auto& s : stops) hold = std::max(hold, s.empty() ? 0 : s.size() - 1);
    g.stop = [seen, stops, hold, index, text = text_](std::span<const int32_t> generated) {
      seen->text += seen->decoder.push(generated.back());
      if (find_stop(seen->text, stops) != std::string::npos) return true;
      if (text && seen->text.size() > seen->shown + hold) {
        const size_t upto = seen->text.size() - hold;
        text->piece(index, seen->text.substr(seen->shown, upto - seen->shown));
        seen->shown = upto;
      }
      return false;
    };
  }

  // The next request that can run; lines that cannot are answered here and skipped.
  engine::Pull pull(bool wait, size_t& id, engine::GenerationRequest& g) {
    if (!extra_.empty() && !interrupted()) {  // the other choices of an "n" request, before the next line
      id = extra_.front().first;
      g = std::move(extra_.front().second);
      extra_.pop_front();
      return engine::Pull::Got;
    }
    for (;;) {
      if (interrupted()) return engine::Pull::End;
      if (!wait && read_ - written() >= size_t(o_.max_pending)) return engine::Pull::NotYet;  // backpressure
      InputLine line;
      LineStatus st = next_line(wait, line);
      if (st == LineStatus::End) return engine::Pull::End;
      if (st == LineStatus::NotYet) return engine::Pull::NotYet;
      const size_t index = read_++;
      BatchRequest r;
      std::string err;
      if (line.too_long) {
        r.index = index, r.line = line.line_no, r.id = index, r.openai = last_openai_;
        err = fmt::format("line {}: {}, more than any request whose prompt fits the context of {} can take",
                          line.line_no, plural(line.bytes, "byte"), plural(uint64_t(model_.max_context()), "token"));
      } else {
        r = parse_request(line.text, index, line.line_no, fmt_);
        if (r.error.empty()) last_openai_ = r.openai;
        else r.openai = last_openai_;
        err = r.error;
      }
      if (err.empty() && prompt_bytes(r) > max_prompt_bytes_)
        err = fmt::format("line {}: prompt of {} cannot fit the context of {} (no token is longer than {})", r.line,
                          plural(prompt_bytes(r), "byte"), plural(uint64_t(model_.max_context()), "token"),
                          plural(max_prompt_bytes_ / size_t(model_.max_context()), "byte"));
      std::vector<int32_t> ids;
      if (err.empty()) ids = prompt_ids(o_.prompt, tok_, r, err);
      if (err.empty() && text_ && r.params.n > 1) err = "\"n\" above 1 needs JSON output (--format jsonl), not --format text";
      Slim& slim = reqs_[index] = Slim{r.index, r.line, r.id, r.custom_id, r.openai, r.completion, r.params.logprobs.has_value(), {}};
      slim.choices.resize(size_t(r.params.n));
      slim.left = r.params.n;
      if (!err.empty()) {
        finish_error(index, err);
        continue;
      }
      g = engine::GenerationRequest{};
      g.prompt = std::move(ids);
      g.sampling = sampling_for(o_, r.params);
      g.max_tokens = r.params.max_tokens.value_or(o_.max_tokens);
      g.eos_ids = tok_.eos_ids();
      g.logprobs = r.params.logprobs.value_or(-1);
      slim.stops = r.params.stop.value_or(o_.stop);
      // Choice i is its own sequence, sampled with seed + i (greedy choices are equal).
      for (int i = 1; i < r.params.n; ++i) {
        engine::GenerationRequest copy = g;
        copy.sampling.seed = g.sampling.seed + uint64_t(i);
        watch_text(copy, index, slim.stops);
        extra_.emplace_back(index * size_t(kMaxChoices) + size_t(i), std::move(copy));
      }
      watch_text(g, index, slim.stops);
      id = index * size_t(kMaxChoices);
      return engine::Pull::Got;
    }
  }

  // What is kept of a request while it runs (not its prompt).
  struct Slim {
    size_t index, line;
    nlohmann::json id;
    bool custom_id, openai, completion, logprobs;
    std::vector<std::string> stops;
    std::vector<Completion> choices;  // "n": filled as each choice finishes
    int left = 1;                     // choices still running
    BatchRequest as_request() const {
      BatchRequest r;
      r.index = index, r.line = line, r.id = id, r.custom_id = custom_id, r.openai = openai, r.completion = completion;
      return r;
    }
  };

  void finish_error(size_t index, const std::string& err) {
    ++done_, ++failed_;
    auto node = reqs_.extract(index);
    progress_.clear();  // a result may go to the same terminal
    if (text_) {
      fmt::print(stderr, "request {}: error: {}\n", dump_json(node.mapped().id), err);
      text_->finish(index, "", true);
    } else {
      out_.put(index, stamped(result_json(node.mapped().as_request(), nullptr, err, ctx_), node.mapped().openai));
    }
    progress();
  }

  // An engine id is the request's index × kMaxChoices + its choice.
  void on_finish(size_t engine_id, const engine::GenerationResult& g) {
    const size_t id = engine_id / size_t(kMaxChoices), choice = engine_id % size_t(kMaxChoices);
    auto it = reqs_.find(id);
    if (it == reqs_.end()) return;  // a choice of a request already answered with an error
    if (g.finish_reason == "error") return finish_error(id, g.error);
    Completion c;
    c.text = tok_.decode(g.tokens, /*skip_special=*/true);
    c.finish_reason = g.finish_reason;
    Slim& slim = it->second;
    if (size_t cut = find_stop(c.text, slim.stops); cut != std::string::npos) {
      c.text.resize(cut);
      c.finish_reason = "stop";
    }
    c.token_ids = g.tokens;
    if (slim.logprobs) {
      auto& lp = c.logprobs.emplace();
      for (const auto& t : g.logprobs) {
        LogprobEntry e{tok_.decode_piece(t.token), t.logprob, {}};
        for (const auto& [id, v] : t.top) e.top.emplace_back(tok_.decode_piece(id), v);
        lp.push_back(std::move(e));
      }
    }
    c.prompt_tokens = g.prompt_tokens;
    c.prefill_s = g.prefill_s;
    c.decode_s = g.decode_s;
    generated_ += g.tokens.size();
    slim.choices[choice] = std::move(c);
    if (--slim.left > 0) return;  // the request is answered when its last choice is
    auto node = reqs_.extract(it);  // forgotten once answered: a long stream keeps no trace of it
    const Slim& done = node.mapped();
    ++done_;
    progress_.clear();  // a result may go to the same terminal
    if (text_) text_->finish(id, done.choices[0].text);
    else if (done.choices.size() > 1) out_.put(id, stamped(result_json(done.as_request(), done.choices, ctx_), done.openai));
    else out_.put(id, stamped(result_json(done.as_request(), &done.choices[0], "", ctx_), done.openai));
    progress();
  }

  // nunchaku's own result lines are documents (command, format_version, path); OpenAI batch
  // output lines keep OpenAI's shape.
  nlohmann::json stamped(nlohmann::json j, bool openai) const {
    if (openai) return j;
    j["path"] = o_.given_path;
    return stamp(j, "run");
  }

  void progress() { progress_.count(plural(done_, "request") + " done", generated_, "generated tok/s"); }

  std::deque<std::pair<size_t, engine::GenerationRequest>> extra_;  // queued choices (engine id, request)

  const RunCliOptions& o_;
  const Tokenizer& tok_;
  engine::Transformer& model_;
  LineInput* in_;
  ResultWriter& out_;
  TextOutput* text_;
  ResultContext ctx_;
  InputFormat fmt_;
  size_t max_prompt_bytes_ = 0;
  std::unordered_map<size_t, Slim> reqs_;  // read and not yet answered
  size_t read_ = 0;
  bool last_openai_ = false;
  size_t done_ = 0, failed_ = 0;
  uint64_t generated_ = 0;
  Progress progress_;
};

std::string model_name(const std::string& path) {
  std::filesystem::path p(path);
  if (!p.has_filename()) p = p.parent_path();
  return p.filename().string();
}

// The input as a descriptor: stdin, or -i opened read-only (kept open by the caller).
int open_input(const std::string& input) {
  if (input == "-") return STDIN_FILENO;
  int fd = ::open(input.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("io.open", fmt::format("cannot read {}: {}", input, std::strerror(errno)), {.file = input});
  return fd;
}

// --batch-size: a whole number >= 1 or "auto" (0 here).
int parse_batch(const std::string& text) {
  if (text == "auto") return 0;
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 1)
    throw Error("usage.batch_size", fmt::format("--batch-size must be a whole number of at least 1, or auto, not '{}'", text));
  return v;
}

// Without --batch-size: one sequence for one PROMPT, one for a --plan file (plan's own
// default batch, what the file was made for), else auto (the most that fit the budget, capped).
int default_batch(const RunCliOptions& o) { return o.has_prompt || !o.plan.empty() ? 1 : 0; }

int run_batch(RunCliOptions o) {
  o.batch_size = o.batch.empty() ? default_batch(o) : parse_batch(o.batch);
  check_flags(o);
  const std::optional<DType> kv_given = parse_engine_kv(o.kv_dtype);  // auto: from the model, once it is open
  parse_input_format(o.input_format);
  InterruptGuard guard;
  TraceSession tr(o.trace, "run");

  // Input and output first: a bad -i, -o or closed stdout fails before the model loads.
  struct stat st {};
  if (o.output.empty() && ::fstat(STDOUT_FILENO, &st) != 0)
    throw Error("io.write", fmt::format("cannot write stdout: {}", std::strerror(errno)));
  if (o.has_prompt && o.input != "-")
    throw Error("usage.prompt", fmt::format("a PROMPT and -i {} are two inputs; give one", o.input),
                {.hint = "put the prompt in the file, or leave -i out"});
  if (o.json && o.format != "auto" && o.format != "jsonl")
    throw Error("usage.format", fmt::format("--json and --format {} disagree", o.format), {.hint = "--json is --format jsonl"});
  if (o.json) o.format = "jsonl";
  if (o.format == "auto") o.format = o.has_prompt && o.output.empty() && ::isatty(STDOUT_FILENO) ? "text" : "jsonl";
  if (o.format != "text" && o.format != "jsonl")
    throw Error("usage.format", fmt::format("--format must be jsonl or text, not '{}'", o.format));
  if (o.has_prompt) o.exit_on_request_error = true;  // the one request is the run
  const int in_fd = o.has_prompt ? -1 : open_input(o.input);
  struct FdCloser {
    int fd;
    ~FdCloser() { if (fd >= 0 && fd != STDIN_FILENO) ::close(fd); }
  } closer{in_fd};
  std::optional<LineInput> in;
  if (!o.has_prompt) in.emplace(in_fd, o.input == "-" ? "stdin" : o.input, 1 << 20);

  Checkpoint ck = [&] {
    trace::Span span("open", "run");
    return open_checkpoint(o.path);
  }();
  note_input_path(o.path);
  for (const auto& f : ck.files) note_input_path(f.path);
  if (in_fd >= 0) note_input_fd(in_fd);
  if (!o.plan.empty()) note_input_path(o.plan);
  tr.check();
  std::optional<AtomicOutput> file_out;
  if (!o.output.empty()) file_out.emplace(o.output);

  ModelLayout layout = describe_model(ck);
  if (!layout.spec) throw Error("run.no_model", fmt::format("{}: cannot tell what model this is", o.path), {.file = o.path});
  const std::vector<std::string> not_loaded = keep_language_model_noted(ck, layout, o.quiet);
  Tokenizer tok = model_tokenizer(ck, o.path);
  std::unique_ptr<RunModel> m;
  try {
    trace::Span span("load", "run");
    RunModelOptions mo = model_options(o, kv_given.value_or(engine_kv_default(&*layout.spec)));
    mo.place.not_loaded = not_loaded;
    m = load_run_model(mo, ck, layout, &tr);
  } catch (const Error& e) {
    if (e.code() == "load.interrupted") throw interrupted_error("0 requests completed; the model was still loading");
    throw e.with_defaults({.file = o.path});  // "model/: tensor 'blk.0': layer 0 has no attn_norm tensor"
  }
  engine::Transformer& model = *m->model;
  o.batch_size = m->batch_size;
  if (!o.quiet) print_memory(m->loaded.store, model);
  log::info("engine: {}", model.describe());
  if (tok.vocab_size() > model.vocab())
    throw Error("run.vocab_mismatch", fmt::format("the tokenizer has {} tokens but the model's vocabulary is {}", tok.vocab_size(), model.vocab()),
                {.file = o.path});
  throw_if_interrupted("0 requests completed; the model was loading");

  const bool tty_in = !o.has_prompt && o.input == "-" && ::isatty(STDIN_FILENO);
  if (tty_in && !o.quiet) fmt::print(stderr, "nunchaku run: reading requests from the terminal, one per line; Ctrl-D ends the input\n");
  const bool text = o.format == "text";
  o.progress = !o.quiet && !tty_in && !text && ::isatty(STDERR_FILENO);  // streamed text and a counter would mix

  ResultWriter out(file_out ? file_out->file() : stdout, file_out ? o.output : "stdout", text || !o.unordered);
  std::optional<TextOutput> text_out;
  if (text) text_out.emplace(out);
  BatchRun run(o, tok, model, in ? &*in : nullptr, out, text_out ? &*text_out : nullptr, {model_name(o.path), int64_t(std::time(nullptr))});
  engine::GenerationStats stats;
  // A stop (signal) or a fatal error midway: the finished results are kept, in input order.
  auto keep_finished = [&] {
    run.clear_progress();
    if (out.broken()) return std::string();
    if (text_out) text_out->write_held();
    else out.write_held();
    if (file_out) file_out->commit();
    return file_out ? fmt::format(" (written to {})", o.output) : std::string();
  };
  try {
    stats = run.run();
  } catch (const Error& e) {
    if (out.broken()) throw;
    const std::string where = keep_finished();
    throw Error(e.code(), fmt::format("{}; {} of {} completed{}", e.message(), run.done(), plural(run.read(), "request"), where),
                e.context(), static_cast<Exit>(e.exit_code()));
  } catch (const std::exception&) {  // out of host memory, ...: main reports it; what finished is kept
    if (!out.broken()) keep_finished();
    throw;
  }
  if (interrupted()) {
    const std::string where = keep_finished();
    throw interrupted_error(fmt::format("{} of {} completed{}", run.done(), plural(run.read(), "request"), where));
  }
  keep_finished();
  if (m->gpu) m->gpu->sample();
  if (!o.quiet && m->gpu) print_gpu_memory(m->loaded.store, model, *m->gpu);
  if (tr.on()) {
    predict_run(tr, m->loaded, model, stats, m->gpu.get());
    tr.finish({{"path", ck.path}});
  }
  if (!o.stats.empty())
    write_stats(o.stats, o.given_path, m->loaded.store, model, stats, run.read(), run.failed(), m->gpu.get());
  if (!o.quiet)
    fmt::print(stderr, "{} ({} failed): {} + {} in {:.2f} s, {:.2f} s of it busy ({:.1f} generated tok/s), {}\n",
               plural(run.read(), "request"), run.failed(), plural(stats.prompt_tokens, "prompt token"),
               plural(stats.generated_tokens, "generated token"), stats.wall_s, stats.busy_s,
               stats.busy_s > 0 ? stats.generated_tokens / stats.busy_s : 0.0, model.describe());
  if (o.exit_on_request_error && run.failed() > 0)
    throw Error("run.request_failed", fmt::format("{} of {} failed (--exit-on-request-error)", run.failed(), plural(run.read(), "request")));
  return 0;
}

}  // namespace

void add_run(CLI::App& app, Action& action) {
  auto o = std::make_shared<RunCliOptions>();
  auto* cmd = app.add_subcommand("run", "Batch inference: prompts in (lines or JSONL), one JSON object per request out; or one PROMPT, its text streamed");
  cmd->footer(
      "Input: one request per line, read as it arrives (a request joins the running batch at once),\n"
      "or one PROMPT (or -p) from the command line; llama.cpp's -n, -c, --temp, -t, -s work as well.\n"
      "Plain text is a prompt; JSON lines may carry \"id\"/\"custom_id\", \"prompt\" or \"messages\", and\n"
      "per-request max_tokens, temperature, top_k, top_p, min_p, repetition_penalty, seed, stop.\n"
      "Prompts: \"prompt\" goes through the model's chat template as a user turn when it has one (--raw:\n"
      "as it is, with BOS); \"messages\" always use the template. OpenAI batch lines ({\"custom_id\", \"url\",\n"
      "\"body\"}) follow vLLM run-batch: /v1/completions prompts are raw text, /v1/chat/completions\n"
      "messages use the template, and the answer is in the OpenAI batch output shape.\n"
      "Output: {\"command\", \"format_version\", \"path\", \"id\", \"text\", \"finish_reason\": stop|length|error,\n"
      "\"token_ids\", \"usage\", \"timings\"}\n"
      "per request, in input order, each as soon as it and all before it are done. A failing request\n"
      "carries \"error\" and the batch goes on. --format text prints each request's generated text\n"
      "instead, streamed as it is generated (the default for a PROMPT when stdout is a terminal).\n"
      "Exit codes: 0 (also when some requests failed, unless --exit-on-request-error: 2), 2 bad usage or\n"
      "input, 1 write failure, 141 stdout closed by its reader, 130/143 SIGINT/SIGTERM (results finished\n"
      "so far are kept; a second signal exits at once). See docs/run.md.\n"
      "Examples:\n"
      "  nunchaku run model.gguf 'Once upon a time' -n 64 --temp 0\n"
      "  printf 'Once upon a time\\n' | nunchaku run model/ --max-tokens 64\n"
      "  nunchaku run model.gguf -i prompts.jsonl -o out.jsonl --temperature 0.7 --seed 1");
  cmd->add_option("PATH", o->path, "Model directory (config.json, safetensors, tokenizer.json) or .gguf file, or a Hub id in the local HF cache")->required();
  auto* prompt_arg = cmd->add_option("PROMPT", o->prompt_text, "One prompt to run instead of reading requests (as -p)");
  auto* prompt_opt = cmd->add_option("-p,--prompt", o->prompt_text, "One prompt to run instead of reading requests (as PROMPT; llama.cpp's -p)")
                         ->group(kInput);
  prompt_arg->excludes(prompt_opt);
  add_file_option(cmd, o->file);
  cmd->add_option("-i,--input", o->input, "Requests file ('-' = stdin)")->capture_default_str()->group(kInput);
  cmd->add_option("-o,--output", o->output, "Write JSONL here (default stdout)")->group(kOutput);
  cmd->add_option("--input-format", o->input_format, "auto | lines | jsonl")->capture_default_str()->group(kInput);
  cmd->add_option("--batch-size", o->batch,
                  "Sequences decoded together (one pass over the weights serves all); auto: the most whose KV cache "
                  "fits the memory the weights leave (5% spare; at most 256 on a GPU, 16 on the CPU) [default: auto; 1 for "
                  "one PROMPT or with --plan]")
      ->group(kWorkload);
  cmd->add_option("-n,--max-tokens,--n-predict", o->max_tokens, "Generated tokens per request at most")->capture_default_str()->group(kWorkload);
  cmd->add_option("-c,--context,--ctx-size", o->context, "Tokens per sequence, prompt + generated (default min(model max, 4096))")->group(kWorkload);
  cmd->add_option("--prefill-chunk", o->prefill_chunk, "Prompt tokens per forward pass, at least the batch size; sizes the engine's pass buffers (default max(256, batch size))")->group(kWorkload);
  cmd->add_option("--temperature,--temp", o->temperature, "0 = greedy")->capture_default_str()->group(kSampling);
  cmd->add_option("--top-k", o->top_k, "0 = off")->capture_default_str()->group(kSampling);
  cmd->add_option("--top-p", o->top_p, "1 = off")->capture_default_str()->group(kSampling);
  cmd->add_option("--min-p", o->min_p, "0 = off")->capture_default_str()->group(kSampling);
  cmd->add_option("--repetition-penalty", o->repetition_penalty, "1 = off")->capture_default_str()->group(kSampling);
  cmd->add_option("-s,--seed", o->seed, "Sampling seed (per request; results do not depend on batch composition)")->capture_default_str()->group(kSampling);
  cmd->add_option("--stop", o->stop, "Stop string (repeatable); the text ends before it")->group(kSampling);
  cmd->add_flag("--raw", o->prompt.raw, "No chat template: prompts are fed as they are (with BOS)")->group(kInput);
  add_prompt_options(cmd, o->prompt);
  cmd->add_flag("--unordered", o->unordered, "Write each result as soon as it finishes, not in input order")->group(kOutput);
  cmd->add_option("--max-pending", o->max_pending, "Stop reading input while this many requests are read but not written")
      ->capture_default_str()->group(kWorkload);
  cmd->add_flag("--exit-on-request-error", o->exit_on_request_error, "Exit 2 (after writing every result) when any request failed")->group(kOutput);
  cmd->add_option("-t,--threads", o->threads, "CPU threads (default: all)")->group(kPlacement);
  cmd->add_option("--kv-dtype", o->kv_dtype, "KV cache: auto (f16 for a 16-bit or quantized model, f32 for an fp32 one) | f32 | f16")->capture_default_str()->group(kPlacement);
  cmd->add_flag("--fast-math", o->fast_math,
                "CPU: Q4_K/Q5_K/Q6_K weights meet activations rounded to 8 bits, and BF16 weights (on CPUs "
                "with AVX512_BF16) activations rounded to bf16, llama.cpp's arithmetic (up to ~1.7x faster "
                "K-quant decode, ~2x faster BF16 prefill) instead of exact fp32: results are no longer exact "
                "(docs/run.md)")
      ->group(kPlacement);
  cmd->add_option("--device", o->device, "cpu | cuda[:N]: where the model runs (all weights there unless --vram)")
      ->capture_default_str()->group(kPlacement);
  cmd->add_option("--vram", o->vram,
                  "GPU memory budget, one size per GPU from cuda:0 (each runs the layers it holds): layers past "
                  "it stay in host memory or on disk and are streamed to the last GPU each step, overlapped with "
                  "compute")->group(kPlacement);
  cmd->add_option("--plan", o->plan, "Placement plan JSON (`nunchaku plan --format json`; cuda devices, cpu, disk; a MoE plan's expert_map "
                  "keeps routed experts apart, read from disk expert by expert)")->group(kPlacement);
  cmd->add_option("--cpu-ram", o->cpu_ram, "Host memory budget: layers past it stay on disk and are streamed")->group(kPlacement);
  cmd->add_option("--offload", o->offload,
                  "How layers left on disk are read: stream (into a bounded pool of 2 layers, O_DIRECT, read ahead "
                  "while earlier layers compute; memory stays within --cpu-ram) | mmap (file mappings; the page "
                  "cache grows until the kernel evicts)")
      ->check(CLI::IsMember({"stream", "mmap"}))
      ->capture_default_str()->group(kPlacement);
  cmd->add_option("--format", o->format,
                  "jsonl (one JSON object per request) | text (each request's generated text, streamed as it is "
                  "generated, in input order) [default: text for a PROMPT with stdout on a terminal, else jsonl]")
      ->group(kOutput);
  cmd->add_flag("--json", o->json, "JSONL results, also for a PROMPT on a terminal (--format jsonl)")->group(kOutput);
  cmd->add_flag("-q,--quiet", o->quiet, "No summary on stderr")->group(kOutput);
  cmd->add_option("--stats", o->stats,
                  "Write the run's summary as JSON to this file (tokens, tok/s, streamed bytes per step, GPU memory "
                  "predicted and measured)")->group(kOutput);
  cmd->add_option("--trace", o->trace,
                  "Write a Chrome trace (Perfetto, chrome://tracing) of the run to FILE: load, prefill and decode steps, "
                  "stream waits, and host RSS, pinned and GPU memory and file bytes read sampled every 2 ms beside their "
                  "predictions")
      ->group(kOutput);
  finish_help(cmd);
  cmd->callback([o, prompt_arg, prompt_opt, &action] {
    o->has_prompt = prompt_arg->count() > 0 || prompt_opt->count() > 0;
    action = [o] {
      o->given_path = o->path;
      o->path = local_model_path(o->path, o->file, true);
      return run_batch(*o);
    };
  });
}

}  // namespace nunchaku::cli

