// nunchaku bench MODEL: prompt and generation throughput in the style of llama-bench
// (-p 512 -n 128 -r 5 -b 1,8). The model is opened and placed as `run` opens it
// (cli/run_model.hpp) and every test goes through run's scheduler (engine::generate):
//   ppP  each of the batch's sequences is prefilled with P random token ids (and samples one);
//   tgN  each sequence starts from one random token id and generates N (no EOS ends it).
//   ppP+tgN (--pg P,N)  each is prefilled with P and generates N; t/s counts both.
// t/s = tokens the engine counted (GenerationStats) / the scheduler's busy time, per
// repetition; the table shows mean ± sd over -r repetitions, after one warm-up run.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/help.hpp"
#include "cli/json_doc.hpp"
#include "cli/model_source.hpp"
#include "cli/progress.hpp"
#include "cli/run_model.hpp"
#include "cli/table.hpp"
#include "cli/workload_options.hpp"
#include "core/error.hpp"
#include "memory/engine_memory.hpp"
#include "core/interrupt.hpp"
#include "core/text.hpp"
#include "core/units.hpp"
#include "engine/generate.hpp"
#include "format/open.hpp"

namespace nunchaku::cli {
namespace {

struct BenchCliOptions {
  std::string path, given_path, file, prompts = "512", gens = "128", batches = "1", output = "md", device = "cpu", vram, cpu_ram;
  std::string kv_dtype = "auto";
  std::string threads = "";  // -t: "" = all hardware threads, or a comma list
  int repetitions = 5;
  int64_t prefill_chunk = 0;
  uint64_t seed = 0;
  std::vector<std::string> pg;  // --pg P,N (repeatable): prompt then generation, as llama-bench's -pg
  bool json = false, fast_math = false, no_warmup = false, quiet = false;
};

// "512" or "16,64,512": whole numbers >= `lo` (llama-bench's comma lists).
std::vector<int64_t> parse_list(const std::string& text, const std::string& flag, int64_t lo) {
  const Error bad("usage.bench_list",
                  fmt::format("{} takes whole numbers from {} to 2^30, comma-separated (as llama-bench), not '{}'", flag, lo, text));
  if (text.empty() || text.front() == ',' || text.back() == ',' || text.find(",,") != std::string::npos) throw bad;  // an empty item
  std::vector<int64_t> out;
  for (const std::string& item : split(text, ',')) {
    int64_t v = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || end != item.data() + item.size() || v < lo || v > (int64_t{1} << 30)) throw bad;
    out.push_back(v);
  }
  return out;
}

struct Test {
  std::string name;  // pp512, tg128
  int64_t n_prompt = 0, n_gen = 0;
};

// One row of the results: a test at one batch size, its repetitions.
struct Row {
  Test test;
  int batch = 1, threads = 1;  // threads: the engine's CPU threads
  int64_t prompt_tokens = 0, completion_tokens = 0;  // per repetition, as the engine counted them
  std::vector<double> seconds, tokens_per_s;
};

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}

// Sample standard deviation (n - 1), 0 for one sample (llama-bench's).
double sd(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / double(v.size() - 1));
}

// What the table's model columns say, from the checkpoint (llama-bench: "llama 7B Q4_0").
struct ModelInfo {
  std::string type;  // architecture, parameters, the dtype holding most of the weight bytes
  uint64_t weight_bytes = 0, num_parameters = 0;
};

ModelInfo model_info(const Checkpoint& ck, const ModelLayout& layout) {
  ModelInfo info;
  std::map<DType, uint64_t> by_dtype;
  for (const TensorInfo& t : ck.tensors) {
    info.weight_bytes += t.nbytes;
    by_dtype[t.dtype] += t.nbytes;
  }
  info.num_parameters = layout.num_parameters;
  const auto most = std::max_element(by_dtype.begin(), by_dtype.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  const std::string arch = layout.spec && !layout.spec->architecture.empty() ? layout.spec->architecture : "unknown";
  info.type = fmt::format("{} {}{}", arch, format_count(info.num_parameters),
                          most == by_dtype.end() ? "" : " " + std::string(dtype_name(most->first)));
  return info;
}

class Bench {
 public:
  Bench(const BenchCliOptions& o, RunModel& m) : o_(o), m_(m), rng_(o.seed) {}

  // One run of `t` with `batch` sequences; throws when the engine failed a sequence.
  engine::GenerationStats once(const Test& t, int batch, int64_t n_gen) {
    engine::Transformer& model_ = *m_.model;
    std::vector<engine::GenerationRequest> reqs(static_cast<size_t>(batch));
    std::uniform_int_distribution<int32_t> id(0, int32_t(model_.vocab() - 1));
    for (auto& r : reqs) {
      r.prompt.resize(size_t(t.n_prompt > 0 ? t.n_prompt : 1));
      for (auto& tok : r.prompt) tok = id(rng_);
      r.max_tokens = n_gen;  // greedy, no EOS: exactly n_gen tokens
    }
    engine::SchedulerOptions so;
    so.batch_size = batch;
    so.prefill_chunk = o_.prefill_chunk;
    so.should_stop = [] { return interrupted(); };
    engine::GenerationStats st;
    const auto results = engine::generate(model_, reqs, so, &st);
    throw_if_interrupted(fmt::format("{} at batch {} was running", t.name, batch));
    for (const auto& r : results)
      if (r.finish_reason == "error") throw Error("bench.failed", fmt::format("{} at batch {}: {}", t.name, batch, r.error));
    return st;
  }

  Row run(const Test& t, int batch, Progress& progress) {
    Row row{t, batch, m_.model->backend().threads(), 0, 0, {}, {}};
    const int64_t n_gen = t.n_gen > 0 ? t.n_gen : 1;  // a prefill test samples the one token that ends it
    if (!o_.no_warmup) once(t, batch, 1);  // as llama-bench: the whole prompt, or one generated token
    for (int rep = 0; rep < o_.repetitions; ++rep) {
      progress.count(fmt::format("{} at batch {}, repetition {} of {}", t.name, batch, rep + 1, o_.repetitions));
      const engine::GenerationStats st = once(t, batch, n_gen);
      // The tokens the test is about, as the engine counted them: prompt tokens prefilled, tokens
      // generated, or both (not the one token a pp test samples, nor a tg test's start token).
      const int64_t counted = (t.n_prompt > 0 ? st.prompt_tokens : 0) + (t.n_gen > 0 ? st.generated_tokens : 0);
      if (rep == 0) row.prompt_tokens = st.prompt_tokens, row.completion_tokens = st.generated_tokens;
      row.seconds.push_back(st.wall_s);
      row.tokens_per_s.push_back(st.wall_s > 0 ? double(counted) / st.wall_s : 0.0);
    }
    return row;
  }

 private:
  const BenchCliOptions& o_;
  RunModel& m_;
  std::mt19937 rng_;
};

struct Header {
  std::string path, backend;
  ModelInfo model;
  std::string kv_dtype;  // as resolved: f32 or f16
};

// One result: the fields of a JSONL line, in the order CSV columns take them.
using Fields = std::vector<std::pair<std::string, nlohmann::json>>;

Fields row_fields(const Header& h, const BenchCliOptions& o, const Row& r) {
  return {{"command", "bench"},
          {"format_version", json_format_version("bench")},
          {"path", h.path},
          {"model_type", h.model.type},
          {"weight_bytes", h.model.weight_bytes},
          {"num_parameters", h.model.num_parameters},
          {"backend", h.backend},
          {"threads", r.threads},
          {"batch_size", r.batch},
          {"kv_dtype", h.kv_dtype},
          {"fast_math", o.fast_math},
          {"test", r.test.name},
          {"n_prompt", r.test.n_prompt},
          {"n_gen", r.test.n_gen},
          {"num_repetitions", r.seconds.size()},
          {"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", r.completion_tokens},
          {"mean_tokens_per_s", mean(r.tokens_per_s)},
          {"sd_tokens_per_s", sd(r.tokens_per_s)},
          {"mean_s", mean(r.seconds)},
          {"sd_s", sd(r.seconds)},
          {"samples_tokens_per_s", r.tokens_per_s},
          {"samples_s", r.seconds}};
}

nlohmann::json to_json(const Fields& f) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : f) j[k] = v;
  return j;
}

std::string markdown(const Header& h, const std::vector<Row>& rows) {
  const std::vector<TableColumn> cols = {{"model", true}, {"size"}, {"params"}, {"backend", true}, {"threads"},
                                         {"batch"},       {"test"}, {"t/s"}};
  std::vector<std::vector<std::string>> cells;
  for (const Row& r : rows)
    cells.push_back({h.model.type, format_bytes(h.model.weight_bytes), format_count(h.model.num_parameters), h.backend,
                     std::to_string(r.threads), std::to_string(r.batch), r.test.name,
                     fmt::format("{:.2f} ± {:.2f}", mean(r.tokens_per_s), sd(r.tokens_per_s))});
  return markdown_table(cols, cells);
}

// RFC 4180 field, quoted as llama-bench quotes every field.
std::string csv_field(const nlohmann::json& v) {
  std::string s;
  if (v.is_string()) s = v.get<std::string>();
  else if (v.is_array()) {
    for (const auto& x : v) s += (s.empty() ? "" : ";") + dump_json(x);
  } else s = dump_json(v);
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// The same fields as each JSONL line, one CSV row each (arrays as "a;b;c").
void print_csv_row(const Fields& f, bool header) {
  std::string line;
  if (header) {
    for (const auto& [k, v] : f) line += (line.empty() ? "" : ",") + k;
    fmt::print("{}\n", line);
    line.clear();
  }
  for (const auto& [k, v] : f) line += (line.empty() ? "" : ",") + csv_field(v);
  fmt::print("{}\n", line);
}

// llama-bench's order: the prompt tests, the generation tests, then the --pg ones.
std::vector<Test> tests_of(const std::vector<int64_t>& prompts, const std::vector<int64_t>& gens, const std::vector<std::string>& pg) {
  std::vector<Test> tests;
  for (int64_t p : prompts)
    if (p > 0) tests.push_back({fmt::format("pp{}", p), p, 0});
  for (int64_t n : gens)
    if (n > 0) tests.push_back({fmt::format("tg{}", n), 0, n});
  for (const std::string& s : pg) {
    const auto v = parse_list(s, "--pg", 1);
    if (v.size() != 2) throw Error("usage.bench_list", fmt::format("--pg takes PROMPT,GENERATED (two numbers, as llama-bench's -pg), not '{}'", s));
    tests.push_back({fmt::format("pp{}+tg{}", v[0], v[1]), v[0], v[1]});
  }
  return tests;
}

int run_bench(BenchCliOptions o) {
  if (o.json && o.output != "md" && o.output != "json")
    throw Error("usage.format", fmt::format("--json and -o {} disagree", o.output), {.hint = "--json is -o json"});
  if (o.json) o.output = "json";
  static const std::vector<std::string> formats = {"md", "csv", "json", "jsonl"};
  if (std::find(formats.begin(), formats.end(), o.output) == formats.end()) {
    const bool file = o.output.find_first_of("./") != std::string::npos;
    throw Error("usage.format", fmt::format("-o/--output takes a format, md, csv, json or jsonl (as llama-bench), not '{}'", o.output),
                {.hint = file ? "bench writes to stdout: `nunchaku bench MODEL -o json > FILE`" : "md, csv, json, jsonl"});
  }
  const auto prompts = parse_list(o.prompts, "-p/--n-prompt", 0), gens = parse_list(o.gens, "-n/--n-gen", 0);
  const auto batches = parse_list(o.batches, "-b/--batch-size", 1);
  const auto threads = o.threads.empty() ? std::vector<int64_t>{0} : parse_list(o.threads, "-t/--threads", 1);
  const std::vector<Test> tests = tests_of(prompts, gens, o.pg);
  if (tests.empty()) throw Error("usage.bench_tests", "-p and -n are all 0 and no --pg: no test to run", {.hint = "-p 512 -n 128"});
  if (o.repetitions < 1) throw Error("usage.repetitions", fmt::format("-r/--repetitions must be at least 1, not {}", o.repetitions));
  const std::optional<DType> kv_given = parse_engine_kv(o.kv_dtype);  // auto: from the model, once it is open
  if (!o.cpu_ram.empty()) (void)parse_size_or_throw(o.cpu_ram, "--cpu-ram");  // before the model is opened
  InterruptGuard guard;

  Checkpoint ck = open_checkpoint(o.path);
  ModelLayout layout = describe_model(ck);
  if (!layout.spec) throw Error("bench.no_model", fmt::format("{}: cannot tell what model this is", o.path), {.file = o.path});
  keep_language_model_noted(ck, layout, o.quiet);
  // One engine for every row: as many KV slots as the largest batch, the context the longest test needs.
  const int max_batch = int(*std::max_element(batches.begin(), batches.end()));
  int64_t context = 1;
  for (const Test& t : tests) context = std::max(context, t.n_prompt + t.n_gen + 1);
  // Placed for the most threads asked for (each CPU thread has its scratch).
  const int most_threads = int(*std::max_element(threads.begin(), threads.end()));
  const DType kv = kv_given.value_or(engine_kv_default(&*layout.spec));
  const RunModelOptions mo{{"", o.device, o.vram, o.cpu_ram, max_batch, most_threads, context, o.prefill_chunk, kv, o.fast_math},
                           "stream", o.quiet};
  std::unique_ptr<RunModel> m;
  try {
    m = load_run_model(mo, ck, layout, nullptr);
  } catch (const Error& e) {
    if (e.code() == "load.interrupted") throw interrupted_error("the model was still loading");
    if (e.exit_code() == int(Exit::OutOfMemory)) {  // run's hint names run's flags; these are bench's
      ErrorContext c = e.context();
      if (c.file.empty()) c.file = o.path;
      c.hint = fmt::format("the longest test needs a context of {} and {}: lower -p/-n or -b, or --kv-dtype f16{}",
                           plural(uint64_t(context), "token"), plural(uint64_t(max_batch), "KV slot"),
                           o.vram.empty() && o.cpu_ram.empty() ? "" : ", or give more --vram / --cpu-ram");
      throw Error(e.code(), e.message(), c, Exit::OutOfMemory);
    }
    throw e.with_defaults({.file = o.path});
  }
  const Header h{o.given_path, m->backend.str(), model_info(ck, layout), kv == DType::F16 ? "f16" : "f32"};

  Progress progress("bench", !o.quiet);
  Bench bench(o, *m);
  std::vector<Row> rows;
  // The rows so far as one table or document (md, json; csv and jsonl went out row by row).
  auto finish = [&] {
    if (rows.empty()) return;
    if (o.output == "md") fmt::print("{}", markdown(h, rows));
    if (o.output == "json") {
      // The document: what it is, and the rows as the JSONL lines are.
      nlohmann::json j = json_document("bench");
      j["path"] = h.path;
      j["results"] = nlohmann::json::array();
      for (const Row& r : rows) j["results"].push_back(to_json(row_fields(h, o, r)));
      fmt::print("{}\n", dump_json(j, 2));
    }
  };
  const size_t total = threads.size() * batches.size() * tests.size();
  try {
    for (int64_t th : threads) {
      if (int(th) != m->setup.threads) remake_engine(*m, ck, layout, int(th));
      for (int64_t b : batches)
        for (const Test& t : tests) {
          rows.push_back(bench.run(t, int(b), progress));
          progress.clear();
          if (o.output == "jsonl") fmt::print("{}\n", dump_json(to_json(row_fields(h, o, rows.back()))));
          if (o.output == "csv") print_csv_row(row_fields(h, o, rows.back()), rows.size() == 1);
          std::fflush(stdout);
        }
    }
  } catch (const Error& e) {
    if (e.code() != "interrupted") throw;
    progress.clear();
    finish();  // a stop keeps the rows that finished, as run keeps its results
    throw Error(e.code(), fmt::format("{}; {} of {} finished", e.message(), rows.size(), plural(total, "row")), e.context(),
                static_cast<Exit>(e.exit_code()));
  }
  finish();
  return 0;
}

}  // namespace

void add_bench(CLI::App& app, Action& action) {
  auto o = std::make_shared<BenchCliOptions>();
  auto* cmd = app.add_subcommand("bench", "Prompt and generation tok/s as llama-bench measures them: a table of mean +/- sd per test");
  cmd->footer(
      "Tests: ppP prefills P random token ids in each of the batch's sequences; tgN generates N tokens in\n"
      "each (from one random token, no EOS ends it). Every -b gets every test, each run -r times after one\n"
      "warm-up run; t/s is the tokens the engine counted (prompt tokens for pp, generated tokens for tg,\n"
      "all sequences together) over the scheduler's busy time, mean +/- sample sd over the repetitions;\n"
      "--pg P,N adds ppP+tgN: P prompt tokens then N generated, both counted (llama-bench's -pg).\n"
      "-b is the number of sequences run together, as run's --batch-size (llama-bench's -b is the\n"
      "tokens of one prompt pass: here that is --prefill-chunk). The model is opened, placed and run\n"
      "as `run` does (--device, --vram, --cpu-ram, --fast-math, -t).\n"
      "Output (stdout): -o md (default, a Markdown table), csv, json (one document) or jsonl (one line per\n"
      "row, as each finishes); docs/cli.md has the fields.\n"
      "Exit codes: 0 ok, 2 bad usage or model, 3 out of memory, 130/143 interrupted (the rows that finished\n"
      "are written, in the format asked for).\n"
      "Examples:\n"
      "  nunchaku bench model.gguf\n"
      "  nunchaku bench model.gguf -p 512 -n 128 -r 5 -b 1,8 -t 4\n"
      "  nunchaku bench model/ -p 0 -n 32 -b 1,4,16 -o jsonl --fast-math");
  cmd->add_option("PATH", o->path, "Model directory (config.json, safetensors) or .gguf file, or a Hub id in the local HF cache")
      ->required();
  add_file_option(cmd, o->file);
  cmd->add_option("-p,--n-prompt", o->prompts, "Prompt lengths to test, comma-separated (0: no prompt test)")
      ->option_text("N[,N...]")
      ->capture_default_str()->group(kWorkload);
  cmd->add_option("-n,--n-gen", o->gens, "Generation lengths to test, comma-separated (0: no generation test)")
      ->option_text("N[,N...]")
      ->capture_default_str()->group(kWorkload);
  cmd->add_option("-b,--batch-size", o->batches, "Sequences run together, comma-separated (each gets every test)")
      ->option_text("N[,N...]")
      ->capture_default_str()->group(kWorkload);
  cmd->add_option("-r,--repetitions", o->repetitions, "Runs of each test (after one warm-up run)")->capture_default_str()->group(kWorkload);
  cmd->add_option("--prefill-chunk", o->prefill_chunk, "Prompt tokens per forward pass, as run's (default max(256, batch size))")
      ->group(kWorkload);
  cmd->add_option("--pg", o->pg, "A prompt-then-generation test (ppP+tgN; llama-bench's -pg)")
      ->option_text("P,N (repeatable)")->group(kWorkload);
  cmd->add_flag("--no-warmup", o->no_warmup, "Skip the warm-up run before each test's repetitions")->group(kWorkload);
  cmd->add_option("-s,--seed", o->seed, "Seed of the random token ids")->capture_default_str()->group(kWorkload);
  cmd->add_option("-t,--threads", o->threads, "CPU threads, comma-separated (each gets every -b and test; default: all)")
      ->option_text("N[,N...]")->group(kPlacement);
  cmd->add_option("--device", o->device, "cpu | cuda[:N]: where the model runs (all weights there unless --vram)")
      ->capture_default_str()->group(kPlacement);
  cmd->add_option("--vram", o->vram, "GPU memory budget, one size per GPU (layers past it streamed, as run's)")->group(kPlacement);
  cmd->add_option("--cpu-ram", o->cpu_ram, "Host memory budget: layers past it stay on disk and are streamed (as run's)")
      ->group(kPlacement);
  cmd->add_option("--kv-dtype", o->kv_dtype, "KV cache: auto (f16 for a 16-bit or quantized model, f32 for an fp32 one) | f32 | f16")->capture_default_str()->group(kPlacement);
  cmd->add_flag("--fast-math", o->fast_math, "llama.cpp's 8-bit/bf16 activation arithmetic on the CPU, as run --fast-math")
      ->group(kPlacement);
  cmd->add_option("-o,--output", o->output, "Format: md | csv | json | jsonl (as llama-bench's -o)")
      ->option_text("FORMAT")->capture_default_str()->group(kOutput);
  cmd->add_flag("--json", o->json, "The results as one JSON document (-o json)")->group(kOutput);
  cmd->add_flag("-q,--quiet", o->quiet, "No progress or notes on stderr")->group(kOutput);
  finish_help(cmd);
  cmd->callback([o, &action] {
    action = [o] {
      o->given_path = o->path;
      o->path = local_model_path(o->path, o->file, false);
      return run_bench(*o);
    };
  });
}

}  // namespace nunchaku::cli
