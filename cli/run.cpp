// nunchaku run PATH: batch inference for shell scripts. Prompts in (lines or JSONL, file or
// stdin), one JSON object per request out, in input order, as soon as each is ready.
// Thin adapter: requests -> tokenizer (+ chat template) -> engine::generate -> JSONL.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "batch/requests.hpp"
#include "cli/commands.hpp"
#include "core/error.hpp"
#include "engine/generate.hpp"
#include "engine/model.hpp"
#include "format/gguf.hpp"
#include "format/open.hpp"
#include "io/atomic_output.hpp"
#include "io/loader.hpp"
#include "io/source.hpp"
#include "memory/estimate.hpp"
#include "memory/plan.hpp"
#include "memory/units.hpp"
#include "tokenizer/tokenizer.hpp"

namespace nunchaku::cli {
namespace {

struct RunCliOptions {
  std::string path, input = "-", output, input_format = "auto", plan, device = "cpu", cpu_ram, kv_dtype = "f32", system;
  int batch_size = 8, threads = 0, top_k = 0;
  int64_t max_tokens = 256, context = 0, prefill_chunk = 0;
  float temperature = 0, top_p = 1, min_p = 0, repetition_penalty = 1;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  bool raw = false, quiet = false;
};

Tokenizer load_tokenizer(const Checkpoint& ck, const std::string& path) {
  if (ck.format == Format::GGUF) {
    FileSource src(ck.files.front().path);
    return Tokenizer::from_gguf(read_gguf_file(src));
  }
  std::filesystem::path dir = std::filesystem::is_directory(path) ? std::filesystem::path(path)
                                                                  : std::filesystem::path(path).parent_path();
  if (!std::filesystem::exists(dir / "tokenizer.json"))
    throw Error("run.no_tokenizer", fmt::format("{}: no tokenizer.json beside the weights", dir.string()),
                {.file = dir.string(), .hint = "copy the model's tokenizer.json (and tokenizer_config.json) into that directory"});
  return Tokenizer::from_hf_dir(dir.string());
}

Placement run_placement(const RunCliOptions& o, const Checkpoint& ck, const ModelLayout& layout) {
  Placement p;
  if (!o.plan.empty()) {
    p = read_plan_file(o.plan);
  } else if (!o.cpu_ram.empty()) {
    Workload w;
    w.batch = o.batch_size;
    w.context = o.context;
    w.overheads = {{"cuda_context", 0}, {"cublas_workspace", 0}};
    p = plan_placement(estimate(ck, layout, w), {}, parse_size_or_throw(o.cpu_ram, "--cpu-ram"));
  } else {
    auto d = parse_device(o.device);
    if (!d || d->kind == Device::Kind::Disk) throw Error("usage.device", "--device must be cpu (or cuda, later), not '" + o.device + "'");
    p = place_all(layout, *d);
  }
  for (const auto& [name, d] : p.modules)
    if (d.kind == Device::Kind::Cuda)
      throw Error("run.no_cuda_backend",
                  fmt::format("module '{}' is placed on {}, but run has only the CPU backend so far", name, d.str()),
                  {.hint = "plan with --cpu-ram (layers on the CPU, the rest on disk), or --device cpu"});
  return p;
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

// Per request: the token ids to feed, or why there are none.
std::vector<int32_t> prompt_ids(const RunCliOptions& o, const Tokenizer& tok, const BatchRequest& r, std::string& error) {
  const auto fmt = tok.chat_format();
  if (r.chat || (!o.raw && fmt)) {
    if (!fmt) {
      error = "\"messages\" given, but the model has no chat template nunchaku recognises; send \"prompt\" instead";
      return {};
    }
    std::vector<ChatMessage> msgs = r.chat ? r.messages : std::vector<ChatMessage>{{"user", r.prompt}};
    if (!o.system.empty() && (msgs.empty() || msgs.front().role != "system")) msgs.insert(msgs.begin(), {"system", o.system});
    return tok.encode(tok.apply_chat(*fmt, msgs, true), /*add_special=*/false, /*parse_special=*/true);
  }
  return tok.encode(r.prompt, /*add_special=*/true, /*parse_special=*/true);
}

nlohmann::json result_json(const BatchRequest& r, const engine::GenerationResult* g, const std::string& text, const std::string& error) {
  nlohmann::json j;
  j[r.custom_id ? "custom_id" : "id"] = r.id;
  if (!error.empty() || !g || g->finish_reason == "error") {
    j["finish_reason"] = "error";
    j["error"] = {{"message", !error.empty() ? error : g ? g->error : "not run"}};
    return j;
  }
  j["text"] = text;
  j["finish_reason"] = g->finish_reason;
  j["completion_tokens"] = g->tokens;
  j["usage"] = {{"prompt_tokens", g->prompt_tokens},
                {"completion_tokens", g->completion_tokens},
                {"total_tokens", g->prompt_tokens + g->completion_tokens}};
  const double tps = g->decode_s > 0 && g->completion_tokens > 1 ? double(g->completion_tokens - 1) / g->decode_s : 0;
  j["timings"] = {{"prefill_s", g->prefill_s}, {"decode_s", g->decode_s}, {"decode_tokens_per_s", tps}};
  return j;
}

int run_batch(const RunCliOptions& o) {
  if (o.batch_size < 1) throw Error("usage.batch_size", "--batch-size must be at least 1");
  if (o.max_tokens < 1) throw Error("usage.max_tokens", "--max-tokens must be at least 1");
  const InputFormat fmt_in = parse_input_format(o.input_format);
  DType kv;
  if (o.kv_dtype == "f32" || o.kv_dtype == "fp32") kv = DType::F32;
  else if (o.kv_dtype == "f16" || o.kv_dtype == "fp16") kv = DType::F16;
  else throw Error("usage.kv_dtype", fmt::format("--kv-dtype must be f32 or f16, not '{}'", o.kv_dtype));

  // Requests first: a bad input file fails before the model is loaded.
  std::vector<BatchRequest> reqs;
  if (o.input == "-") {
    reqs = read_requests(std::cin, fmt_in);
  } else {
    std::ifstream in(o.input);
    if (!in) throw Error("io.open", fmt::format("cannot read {}", o.input), {.file = o.input});
    reqs = read_requests(in, fmt_in);
  }

  Checkpoint ck = open_checkpoint(o.path);
  ModelLayout layout = describe_model(ck);
  if (!layout.spec) throw Error("run.no_model", fmt::format("{}: cannot tell what model this is", o.path), {.file = o.path});
  Tokenizer tok = load_tokenizer(ck, o.path);
  LoadOptions lo;
  lo.placement = run_placement(o, ck, layout);
  LoadResult loaded = load_checkpoint(ck, layout, lo);

  engine::EngineOptions eo;
  eo.max_batch = o.batch_size;
  eo.max_context = o.context;
  eo.kv_dtype = kv;
  eo.threads = o.threads;
  engine::Transformer model(*layout.spec, loaded.store, eo);
  if (tok.vocab_size() > model.vocab())
    throw Error("run.vocab_mismatch", fmt::format("the tokenizer has {} tokens but the model's vocabulary is {}", tok.vocab_size(), model.vocab()),
                {.file = o.path});

  // Output stream: a file (written whole, then renamed into place) or stdout.
  std::optional<AtomicOutput> file_out;
  if (!o.output.empty()) file_out.emplace(o.output);
  std::FILE* out = file_out ? file_out->file() : stdout;

  std::vector<engine::GenerationRequest> gen;
  std::vector<size_t> gen_of(reqs.size(), SIZE_MAX);  // request -> index into gen
  std::vector<std::string> errors(reqs.size());
  std::vector<std::vector<std::string>> stops(reqs.size());
  for (auto& r : reqs) {
    std::string& err = errors[r.index];
    err = r.error;
    if (!err.empty()) continue;
    std::vector<int32_t> ids = prompt_ids(o, tok, r, err);
    if (!err.empty()) continue;
    engine::GenerationRequest g;
    g.prompt = std::move(ids);
    g.sampling = sampling_for(o, r.params);
    g.max_tokens = r.params.max_tokens.value_or(o.max_tokens);
    g.eos_ids = tok.eos_ids();
    stops[r.index] = r.params.stop.value_or(o.stop);
    if (!stops[r.index].empty()) {
      // Incremental check: decode only the new tokens, look at the tail that can hold a stop string.
      auto state = std::make_shared<std::pair<StreamDecoder, std::string>>(StreamDecoder(tok, true), std::string());
      auto st = stops[r.index];
      g.stop = [state, st](std::span<const int32_t> generated) {
        state->second += state->first.push(generated.back());
        return find_stop(state->second, st) != std::string::npos;
      };
    }
    gen_of[r.index] = gen.size();
    gen.push_back(std::move(g));
  }

  // Emit in input order: results wait until every earlier request has been written.
  std::vector<std::optional<nlohmann::json>> ready(reqs.size());
  size_t next = 0, done = 0, failed = 0;
  const bool tty = !o.quiet && ::isatty(STDERR_FILENO);
  auto flush_ready = [&] {
    while (next < reqs.size() && ready[next]) {
      std::string line = ready[next]->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
      std::fwrite(line.data(), 1, line.size(), out);
      ready[next].reset();
      ++next;
    }
    std::fflush(out);
    if (tty) fmt::print(stderr, "\r{} / {} requests", done, reqs.size());
  };
  std::vector<size_t> req_of(gen.size());
  for (size_t i = 0; i < reqs.size(); ++i)
    if (gen_of[i] != SIZE_MAX) req_of[gen_of[i]] = i;
    else ready[i] = result_json(reqs[i], nullptr, "", errors[i]), ++done, ++failed;
  flush_ready();

  engine::SchedulerOptions so;
  so.batch_size = o.batch_size;
  so.prefill_chunk = o.prefill_chunk;
  so.on_finish = [&](size_t gi, const engine::GenerationResult& g) {
    const size_t ri = req_of[gi];
    std::string text = g.finish_reason == "error" ? "" : tok.decode(g.tokens, /*skip_special=*/true);
    engine::GenerationResult copy = g;
    if (size_t cut = find_stop(text, stops[ri]); cut != std::string::npos) {
      text.resize(cut);
      copy.finish_reason = "stop";
    }
    ready[ri] = result_json(reqs[ri], &copy, text, "");
    ++done;
    if (g.finish_reason == "error") ++failed;
    flush_ready();
  };
  engine::GenerationStats stats;
  engine::generate(model, gen, so, &stats);
  flush_ready();
  if (tty) fmt::print(stderr, "\r{:40}\r", "");
  if (file_out) file_out->commit();
  if (!o.quiet)
    fmt::print(stderr, "{} requests ({} failed): {} prompt + {} generated tokens in {:.2f} s ({:.1f} generated tok/s), {}\n",
               reqs.size(), failed, stats.prompt_tokens, stats.generated_tokens, stats.wall_s,
               stats.wall_s > 0 ? stats.generated_tokens / stats.wall_s : 0.0, model.describe());
  return 0;
}

}  // namespace

void add_run(CLI::App& app, Action& action) {
  auto o = std::make_shared<RunCliOptions>();
  auto* cmd = app.add_subcommand("run", "Batch inference: prompts in (lines or JSONL), one JSON object per request out");
  cmd->footer(
      "Input: one request per line. Plain text is a prompt; JSON lines may carry \"id\"/\"custom_id\",\n"
      "\"prompt\" or \"messages\", and per-request max_tokens, temperature, top_k, top_p, min_p,\n"
      "repetition_penalty, seed, stop; the OpenAI batch shape ({\"custom_id\", \"body\": {...}}) works too.\n"
      "Output: {\"id\", \"text\", \"finish_reason\": stop|length|error, \"completion_tokens\", \"usage\", \"timings\"}\n"
      "per request, in input order; a failing request carries \"error\" and the batch goes on (exit 0).\n"
      "Prompts go through the model's chat template when it has one (--raw sends them as they are).\n"
      "Examples:\n"
      "  printf 'Once upon a time\\n' | nunchaku run model/ --max-tokens 64\n"
      "  nunchaku run model.gguf -i prompts.jsonl -o out.jsonl --batch-size 16 --temperature 0.7 --seed 1");
  cmd->add_option("PATH", o->path, "Model directory (config.json, safetensors, tokenizer.json) or .gguf file")->required();
  cmd->add_option("-i,--input", o->input, "Requests file ('-' = stdin)")->capture_default_str();
  cmd->add_option("-o,--output", o->output, "Write JSONL here (default stdout)");
  cmd->add_option("--input-format", o->input_format, "auto | lines | jsonl")->capture_default_str();
  cmd->add_option("--batch-size", o->batch_size, "Sequences decoded together (one pass over the weights serves all)")->capture_default_str();
  cmd->add_option("--max-tokens", o->max_tokens, "Generated tokens per request at most")->capture_default_str();
  cmd->add_option("--context", o->context, "Tokens per sequence, prompt + generated (default min(model max, 4096))");
  cmd->add_option("--prefill-chunk", o->prefill_chunk, "Prompt tokens per forward pass (default: engine's)");
  cmd->add_option("--temperature", o->temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", o->top_k, "0 = off")->capture_default_str();
  cmd->add_option("--top-p", o->top_p, "1 = off")->capture_default_str();
  cmd->add_option("--min-p", o->min_p, "0 = off")->capture_default_str();
  cmd->add_option("--repetition-penalty", o->repetition_penalty, "1 = off")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Sampling seed (per request; results do not depend on batch composition)")->capture_default_str();
  cmd->add_option("--stop", o->stop, "Stop string (repeatable); the text ends before it");
  cmd->add_flag("--raw", o->raw, "No chat template: prompts are fed as they are (with BOS)");
  cmd->add_option("--system", o->system, "System message for chat prompts that have none");
  cmd->add_option("--threads", o->threads, "CPU threads (default: all)");
  cmd->add_option("--kv-dtype", o->kv_dtype, "KV cache: f32 | f16")->capture_default_str();
  cmd->add_option("--device", o->device, "cpu (the CUDA backend comes later)")->capture_default_str();
  cmd->add_option("--plan", o->plan, "Placement plan JSON (cpu/disk modules)");
  cmd->add_option("--cpu-ram", o->cpu_ram, "Host memory budget: layers past it stay on disk (mmap)");
  cmd->add_flag("-q,--quiet", o->quiet, "No summary on stderr");
  cmd->callback([o, &action] { action = [o] { return run_batch(*o); }; });
}

}  // namespace nunchaku::cli
