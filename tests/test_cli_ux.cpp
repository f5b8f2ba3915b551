// What a new user meets first: size options, plan's verdicts and fixes, parser errors,
// help, widths. Each case runs the built binary as a user would.
#include <catch2/catch.hpp>

#include <algorithm>
#include <dlfcn.h>
#include <filesystem>
#include <regex>
#include <set>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/helpers.hpp"
#include "tests/pty.hpp"

using nlohmann::json;
using namespace nunchaku::test;

namespace {
const std::string kLlama = "models/llama";

// `args` with the options of `flags` ("--vram 24G --gpus 3") set to the values given there
// (an option already in `args` is replaced, not repeated).
std::vector<std::string> with_flags(std::vector<std::string> args, const std::string& flags) {
  std::istringstream in(flags);
  std::vector<std::string> ws;
  for (std::string w; in >> w;) ws.push_back(w);
  for (size_t i = 0; i < ws.size(); ++i) {
    const bool has_value = i + 1 < ws.size() && ws[i + 1].rfind("--", 0) != 0;
    auto at = std::find(args.begin(), args.end(), ws[i]);
    if (at == args.end()) {
      args.push_back(ws[i]);
      if (has_value) args.push_back(ws[i + 1]);
    } else if (has_value) {
      *(at + 1) = ws[i + 1];
    }
    if (has_value) ++i;
  }
  return args;
}
}  // namespace

TEST_CASE("sizes: a number without a unit is exit 2 with the unit hint, for every size option", "[cli][units]") {
  const std::string m = testdata(kLlama);
  TempDir d;
  const std::vector<std::vector<std::string>> cases = {
      {"estimate", m, "--vram", "16"},
      {"plan", m, "--vram", "16"},
      {"plan", m, "--cpu-ram", "64"},
      {"load", m, "--vram", "16"},
      {"load", m, "--cpu-ram", "1000"},
      {"load", m, "--device", "cpu", "--staging-size", "64"},
      {"estimate", m, "--overhead", "cuda_context=300"},
      {"run", m, "--cpu-ram", "64"},
      {"convert", m, d.file("out"), "--shard-size", "100"},
      {"convert", m, d.file("out"), "--buffer", "256"},
  };
  for (const auto& args : cases) {
    INFO(args[0] << " " << args[args.size() - 2] << " " << args.back());
    auto r = run_cli(args);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("has no unit"));
    CHECK_THAT(r.err, Catch::Contains("GiB"));
    CHECK_THAT(r.err, Catch::StartsWith("nunchaku: error: "));
  }
  // The same sizes with a unit are accepted (bytes explicitly: "B").
  CHECK(run_cli({"estimate", m, "--vram", "16G", "--overhead", "cuda_context=300B"}).exit_code == 0);
}

TEST_CASE("ranges: integer flags outside their range, empty --vram sizes, unknown LoRA targets are exit 2 naming the flag",
          "[cli][ranges]") {
  const std::string m = testdata(kLlama), run_m = testdata("run/llama-spm");
  // {args..., the flag the error must name}
  const std::vector<std::vector<std::string>> cases = {
      {"estimate", m, "--gpus", "0", "--gpus"},
      {"estimate", m, "--gpus", "-1", "--gpus"},
      {"plan", m, "--vram", "1G", "--gpus", "0", "--gpus"},
      {"estimate", m, "--context", "0", "--context"},
      {"estimate", m, "--prefill-chunk", "0", "--prefill-chunk"},
      {"estimate", m, "--batch", "0", "--batch"},
      {"estimate", m, "--threads", "-3", "--threads"},
      {"estimate", m, "--mode", "lora", "--lora-rank", "0", "--lora-rank"},
      {"estimate", m, "--mode", "train", "--runtime", "deepspeed", "--zero", "4", "--zero"},
      {"run", run_m, "--context", "0", "--context"},
      {"run", run_m, "--context", "-5", "--context"},
      {"run", run_m, "--prefill-chunk", "0", "--prefill-chunk"},
      {"run", run_m, "--threads", "0", "--threads"},
      {"run", run_m, "--batch-size", "0", "--batch-size"},
      {"run", run_m, "--max-pending", "0", "--max-pending"},
      {"load", m, "--device", "cpu", "--threads", "0", "--threads"},
      {"estimate", m, "--vram", "16G,,16G", "--vram"},
      {"plan", m, "--vram", "16G,,16G", "--vram"},
      {"plan", m, "--vram", "16G,", "--vram"},
      {"estimate", m, "--lora-targets", "q_proj", "--lora-targets"},  // not a LoRA mode
      {"estimate", m, "--mode", "lora", "--lora-targets", "nonexistent", "--lora-targets"},
      {"plan", m, "--vram", "1G", "--mode", "lora", "--lora-targets", "q_proj,nonexistent", "--lora-targets"},
  };
  for (auto args : cases) {
    const std::string flag = args.back();
    args.pop_back();
    std::string line;
    for (const auto& a : args) line += a + " ";
    INFO(line);
    auto r = run_cli(args, "hi\n");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::StartsWith("nunchaku: error: ") && Catch::Contains(flag));
    CHECK(r.out.empty());
  }
  // The bounds themselves and real module names are accepted.
  CHECK(run_cli({"estimate", m, "--gpus", "1", "--context", "1", "--prefill-chunk", "1", "--threads", "1"}).exit_code == 0);
  CHECK(run_cli({"estimate", m, "--mode", "lora", "--lora-targets", "q_proj,v_proj"}).exit_code == 0);
  CHECK(run_cli({"run", run_m, "--context", "64", "--threads", "1", "--max-tokens", "1", "-q"}, "hi\n").exit_code == 0);
}

TEST_CASE("sizes: --vram 0 is an error in estimate, 'no GPU' with a note in plan", "[cli][units]") {
  const std::string m = testdata(kLlama);
  auto e = run_cli({"estimate", m, "--vram", "0"});
  CHECK(e.exit_code == 2);
  CHECK_THAT(e.err, Catch::Contains("--device cpu"));
  auto p = run_cli({"plan", m, "--vram", "0", "--cpu-ram", "1G", "--json"});
  REQUIRE(p.exit_code == 0);
  json j = json::parse(p.out);
  for (const auto& d : j["devices"]) CHECK(d["device"].get<std::string>().rfind("cuda", 0) != 0);
  bool noted = false;
  for (const auto& n : j["notes"]) noted |= n.get<std::string>().find("--vram 0: no GPU") != std::string::npos;
  CHECK(noted);
  // A zero among other sizes is a mistake, not "no GPU".
  CHECK(run_cli({"plan", m, "--vram", "1G,0"}).exit_code == 2);
}

TEST_CASE("plan: --gpus with one size plans N GPUs, with several sizes it must match", "[cli][plan]") {
  const std::string m = testdata(kLlama);
  auto r = run_cli({"plan", m, "--vram", "1G", "--gpus", "3", "--cpu-ram", "1G", "--json"});
  REQUIRE(r.exit_code == 0);
  int cuda = 0;
  const json j = json::parse(r.out);
  for (const auto& d : j["devices"]) cuda += d["device"].get<std::string>().rfind("cuda:", 0) == 0;
  CHECK(cuda == 3);
  auto bad = run_cli({"plan", m, "--vram", "1G,1G,1G", "--gpus", "2"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("--gpus 2 but --vram gives 3 sizes"));
}

TEST_CASE("plan: --json is --format json, -o with the table writes the table", "[cli][plan]") {
  const std::string m = testdata(kLlama);
  auto a = run_cli({"plan", m, "--vram", "1G", "--cpu-ram", "1G", "--json"});
  auto b = run_cli({"plan", m, "--vram", "1G", "--cpu-ram", "1G", "--format", "json"});
  REQUIRE(a.exit_code == 0);
  CHECK(a.out == b.out);
  CHECK(json::parse(a.out)["command"] == "plan");
  CHECK(run_cli({"plan", m, "--json", "--format", "accelerate"}).exit_code == 2);

  TempDir d;
  auto table = run_cli({"plan", m, "--vram", "1G", "--cpu-ram", "1G"});
  auto to_file = run_cli({"plan", m, "--vram", "1G", "--cpu-ram", "1G", "-o", d.file("plan.txt")});
  REQUIRE(to_file.exit_code == 0);
  CHECK(read_text(d.file("plan.txt")) == table.out);
  CHECK_THAT(to_file.out, Catch::Contains("wrote " + d.file("plan.txt") + " (table)"));
}

TEST_CASE("plan: the verdict names where the layers are", "[cli][plan]") {
  const std::string m = testdata(kLlama);
  // 100 KiB holds no 144.5 KiB layer (nor the 500 MiB CUDA context).
  auto cpu = run_cli({"plan", m, "--vram", "100K", "--cpu-ram", "1G"});
  CHECK(cpu.exit_code == 0);
  CHECK_THAT(cpu.out, Catch::Contains("runs on the CPU: no layer fits in 100.00 KiB of VRAM"));
  auto all = run_cli({"plan", m, "--vram", "1G", "--cpu-ram", "1G"});
  CHECK_THAT(all.out, Catch::Contains("fits on the GPU: all 2 layers"));
  auto none = run_cli({"plan", m, "--cpu-ram", "1G"});
  CHECK_THAT(none.out, Catch::Contains("runs on the CPU: no GPU budget"));
  // One layer (144.5 KiB + KV + activations) fits in 533.2 MiB with the CUDA context (500 MiB)
  // and the CUDA backend's scratch (cuBLAS's 32 MiB workspace + the dequantization panel):
  // 533.03 MiB on cuda:0; two layers take 533.29 MiB.
  auto part = run_cli({"plan", m, "--vram", "533.2M", "--cpu-ram", "1G", "--json"});
  REQUIRE(part.exit_code == 0);
  json j = json::parse(part.out);
  CHECK(j["verdict"]["text"] == "fits with offload: 1 of 2 layers on GPUs, 1 on the CPU");
  CHECK(j["verdict"]["fits"] == true);
  CHECK(j["verdict"]["shortfall"].is_null());
}

TEST_CASE("plan: a llama.cpp / vLLM export is planned at the context it runs with", "[cli][plan]") {
  // Llama-2-7B (max_position_embeddings 4096) on 8 GiB: asking for 8192 tokens exports -c 4096
  // (and --max-model-len 4096), so the layer count and the CPU offload are those of 4096.
  TempDir d;
  write_sparse_llama(d.path.string(), testdata("models/llama2-7b-config/config.json"));
  for (const char* fmt : {"llama.cpp", "vllm"}) {
    INFO(fmt);
    auto at = [&](const char* ctx) {
      return run_cli({"plan", d.path.string(), "--vram", std::string(fmt) == "vllm" ? "16G" : "8G", "--cpu-ram", "200G", "--format",
                      fmt, "--context", ctx});
    };
    auto asked = at("8192"), max = at("4096");
    REQUIRE(asked.exit_code == 0);
    CHECK(asked.out == max.out);
    CHECK_THAT(asked.err, Catch::Contains("clamped from 8192"));
  }
}

TEST_CASE("plan: when it does not fit, every listed fix applied as given fits with the verdict shown", "[cli][plan]") {
  // Llama-2-7B in F16 (12.55 GiB of weights) on a 4 GiB GPU and 8 GiB of host memory.
  TempDir d;
  write_sparse_llama(d.path.string(), testdata("models/llama2-7b-config/config.json"));
  const std::vector<std::string> base = {"plan", d.path.string(), "--vram", "4G", "--cpu-ram", "8G", "--json"};
  auto r = run_cli(base);
  REQUIRE(r.exit_code == 3);
  json j = json::parse(r.out);
  CHECK(j["verdict"]["fits"] == false);
  CHECK_THAT(j["verdict"]["shortfall"].get<std::string>(), Catch::StartsWith("cpu needs"));
  REQUIRE(j["fixes"].size() >= 3);
  CHECK(j["fixes"][0]["flags"] == "--disk");  // costs speed only: first
  for (const auto& f : j["fixes"]) {
    const std::string flags = f["flags"];
    INFO(flags);
    auto again = run_cli(with_flags(base, flags));
    CHECK(again.exit_code == 0);
    if (again.exit_code == 0) CHECK(json::parse(again.out)["verdict"] == f["verdict"]);
  }
  // The table lists them too, under the verdict.
  auto t = run_cli({"plan", d.path.string(), "--vram", "4G", "--cpu-ram", "8G"});
  CHECK(t.exit_code == 3);
  CHECK_THAT(t.out, Catch::Contains("does NOT fit: cpu needs"));
  CHECK_THAT(t.out, Catch::Contains("to make it fit (each re-planned):\n  --disk"));
}

TEST_CASE("parser: errors go through `nunchaku: error:` with did-you-mean for options and commands", "[cli][parser]") {
  const std::string m = testdata(kLlama);
  auto flag = run_cli({"estimate", m, "--vrma", "16G"});
  CHECK(flag.exit_code == 2);
  CHECK(flag.err == "nunchaku: error: estimate: unknown option --vrma (hint: did you mean --vram? "
                    "`nunchaku help estimate` lists its options)\n");
  auto cmd = run_cli({"inspec", m});
  CHECK(cmd.exit_code == 2);
  CHECK_THAT(cmd.err, Catch::StartsWith("nunchaku: error: unknown command 'inspec' (hint: did you mean inspect?"));
  // Nothing close: no guess.
  auto far = run_cli({"estimate", m, "--zzzzzz"});
  CHECK(far.exit_code == 2);
  CHECK_THAT(far.err, Catch::Contains("unknown option --zzzzzz"));
  CHECK_THAT(far.err, !Catch::Contains("did you mean"));
  // A value glued with '=' is not part of the name.
  CHECK_THAT(run_cli({"plan", m, "--cpu-rma=1G"}).err, Catch::Contains("did you mean --cpu-ram?"));
  auto missing = run_cli({"plan"});
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::StartsWith("nunchaku: error: plan: PATH is required"));
  auto no_value = run_cli({"load", m, "--vram"});
  CHECK(no_value.exit_code == 2);
  CHECK_THAT(no_value.err, Catch::Contains("load: --vram needs a value"));
  auto nan = run_cli({"estimate", m, "--batch", "many"});
  CHECK(nan.exit_code == 2);
  CHECK_THAT(nan.err, Catch::Contains("--batch: cannot read 'many' as a number"));
  auto extra = run_cli({"inspect", m, "other"});
  CHECK(extra.exit_code == 2);
  CHECK_THAT(extra.err, Catch::Contains("inspect: unexpected argument 'other'"));
}

TEST_CASE("help: `nunchaku help SUB`, sections, no type tags, exit codes and examples, <= 100 columns", "[cli][parser]") {
  const ScopedEnv columns("COLUMNS", "100");
  const std::vector<std::string> cmds = {"inspect", "estimate", "plan", "load", "run", "bench", "tokenize", "convert"};
  auto top = run_cli({"help"});
  CHECK(top.exit_code == 0);
  // Commands in workflow order.
  size_t at = 0;
  for (const auto& c : cmds) {
    const size_t p = top.out.find("\n  " + c + " ");
    INFO(c);
    CHECK(p != std::string::npos);
    CHECK(p >= at);
    at = p;
  }
  for (const auto& c : cmds) {
    INFO(c);
    auto h = run_cli({"help", c});
    CHECK(h.exit_code == 0);
    CHECK(h.out == run_cli({c, "--help"}).out);
    CHECK_THAT(h.out, Catch::Contains("Exit codes:"));
    CHECK_THAT(h.out, Catch::Contains("Examples:\n"));
    CHECK_THAT(h.out.substr(h.out.find("Examples:")), Catch::Contains("nunchaku " + c + " "));
    CHECK_THAT(h.out, Catch::Contains("\nOutput:\n"));
    for (const char* tag : {" TEXT", " UINT", " INT", " FLOAT", "Options:"}) CHECK_THAT(h.out, !Catch::Contains(tag));
    std::istringstream lines(h.out);
    for (std::string line; std::getline(lines, line);) CHECK(line.size() <= 100);
  }
  auto est = run_cli({"help", "estimate"}).out;
  for (const char* section : {"\nDevices:\n", "\nWorkload:\n", "\nInference:\n", "\nTraining:\n", "\nQuantization:\n"})
    CHECK_THAT(est, Catch::Contains(section));
  CHECK(est.find("\nTraining:\n") < est.find("\nOutput:\n"));
  CHECK_THAT(est, Catch::Contains("--vram SIZE[,SIZE]"));
  auto bad = run_cli({"help", "inspct"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("did you mean inspect?"));
}

TEST_CASE("width: estimate, plan and inspect --tensors fit 100 columns, formulas behind --explain", "[cli][width]") {
  const ScopedEnv columns("COLUMNS", "100");
  TempDir d;
  write_sparse_llama(d.path.string(), testdata("models/llama2-7b-config/config.json"));
  const std::string big = d.path.string();
  const std::vector<std::vector<std::string>> cases = {
      {"estimate", big, "--vram", "8G"},
      {"estimate", big, "--vram", "8G", "--explain"},
      {"estimate", big, "--vram", "8G", "--runtime", "all"},
      {"estimate", big, "--vram", "8G", "--runtime", "vllm"},
      {"estimate", big, "--mode", "train", "--vram", "24G", "--explain"},
      {"plan", big, "--vram", "4G", "--cpu-ram", "8G"},
      {"inspect", big, "--tensors"},
      {"inspect", testdata("models/llama-sharded"), "--tensors"},
      {"inspect", testdata("models/mixtral")},
  };
  for (const auto& args : cases) {
    INFO(args[0] << " " << args.back());
    auto r = run_cli(args);
    CHECK(r.exit_code != 2);
    CHECK(widest(r.out) <= 100);
  }
  auto plain = run_cli({"estimate", big, "--vram", "24G"});
  auto explained = run_cli({"estimate", big, "--vram", "24G", "--explain"});
  // The KV formula: layers(32) x 2 x ... appears only when asked for, and always in the JSON.
  CHECK_THAT(plain.out, !Catch::Contains("layers(32)"));
  CHECK_THAT(explained.out, Catch::Contains("layers(32)"));
  const json j = json::parse(run_cli({"estimate", big, "--vram", "24G", "--json"}).out);
  CHECK_THAT(j["formulas"]["kv_cache"].get<std::string>(), Catch::Contains("layers(32)"));
  // inspect --tensors: each shard named once, sizes human, offsets exact.
  auto t = run_cli({"inspect", testdata("models/llama-sharded"), "--tensors"});
  size_t named = 0;
  for (size_t at = t.out.find("model-00001-of-00005.safetensors"); at != std::string::npos;
       at = t.out.find("model-00001-of-00005.safetensors", at + 1))
    ++named;
  CHECK(named == 1);
  CHECK_THAT(t.out, Catch::Contains("64.00 KiB"));
}

TEST_CASE("width: $COLUMNS narrows help and estimate", "[cli][width]") {
  ::setenv("COLUMNS", "60", 1);
  auto h = run_cli({"help", "plan"});
  auto e = run_cli({"estimate", testdata(kLlama), "--vram", "1G", "--explain"});
  ::unsetenv("COLUMNS");
  CHECK(h.exit_code == 0);
  // Help: only the option names column (34) and unbreakable words may push a line past 60.
  std::istringstream in(h.out);
  size_t over = 0, lines = 0;
  for (std::string line; std::getline(in, line); ++lines) over += columns(line) > 60;
  CHECK(over * 5 < lines);
  CHECK(widest(e.out) <= 60);
}

TEST_CASE("messages: values the files do not give print as 'unknown'", "[cli][inspect]") {
  TempDir d;
  // The llama fixture's weights without its config.json: heads and context are not in the tensors.
  write_file(d.file("model.safetensors"), read_text(testdata("models/llama/model.safetensors")));
  auto r = run_cli({"inspect", d.path.string()});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("heads unknown (kv unknown, head_dim unknown)"));
  CHECK_THAT(r.out, Catch::Contains("context unknown"));
  CHECK_THAT(r.out, Catch::Contains("(inferred from tensor names and shapes)"));
  CHECK_THAT(r.out, !Catch::Contains("heads 0"));
}

TEST_CASE("messages: an error names its path once", "[cli][run]") {
  // The llama fixture has weights and config but no tokenizer.json.
  auto r = run_cli({"run", testdata(kLlama), "--max-tokens", "1"}, "hi\n");
  CHECK(r.exit_code == 2);
  const std::string path = testdata(kLlama);
  const size_t first = r.err.find(path);
  REQUIRE(first != std::string::npos);
  CHECK(r.err.find(path, first + path.size()) == std::string::npos);
  CHECK_THAT(r.err, Catch::Contains("no tokenizer.json beside the weights"));
}

namespace {
// "1 tensors", "1 requests", ...: a count of one followed by a plural word (not "0.1 s", not "21 tensors").
bool has_one_plural(const std::string& text) {
  static const std::regex one_plural("(^|[^0-9.])1 (tensor|file|module|request|thread|token|layer|key|item|shard|part|slot|position|GPU|byte|head|expert|value)s\\b");
  return std::regex_search(text, one_plural);
}
}  // namespace

TEST_CASE("plurals: one of a thing is singular in load, convert, run and inspect", "[cli][plural]") {
  TempDir d;
  // One F32 tensor: every count in the output is 1.
  std::string header = R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  while (header.size() % 8) header += ' ';
  std::vector<uint8_t> b(8);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(uint64_t(header.size()) >> (8 * i));
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), 4, 0);
  write_file(d.file("one.safetensors"), b);

  auto load = run_cli({"load", d.file("one.safetensors"), "--verify"});
  REQUIRE(load.exit_code == 0);
  CHECK_THAT(load.out, Catch::Contains("(safetensors, 1 tensor, 4 B)"));
  CHECK_THAT(load.out, Catch::Contains("1 module"));
  CHECK_THAT(load.out, Catch::Contains("verify: 1 tensor matches"));
  CHECK_FALSE(has_one_plural(load.out));

  auto conv = run_cli({"convert", d.file("one.safetensors"), d.file("out")});
  REQUIRE(conv.exit_code == 0);
  CHECK_THAT(conv.out, Catch::Contains(": 1 tensor, "));
  CHECK_THAT(conv.out, Catch::Contains(" in 1 file\n"));
  CHECK_FALSE(has_one_plural(conv.out));

  auto ins = run_cli({"inspect", d.file("one.safetensors"), "--verify"});
  REQUIRE(ins.exit_code == 0);
  CHECK_THAT(ins.out, Catch::Contains("1 tensor "));
  CHECK_FALSE(has_one_plural(ins.out));

  // One request, one generated token; the prompt is several tokens (plural stays plural).
  auto run = run_cli({"run", testdata("run/llama-spm"), "--raw", "--max-tokens", "1"}, "Once upon a time\n");
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.err, Catch::Contains("1 request (0 failed): "));
  CHECK_THAT(run.err, Catch::Contains(" prompt tokens + 1 generated token in "));
  CHECK_FALSE(has_one_plural(run.err));
  // And two are plural.
  auto two = run_cli({"run", testdata("run/llama-spm"), "--raw", "--max-tokens", "2"}, "Once\nThe cat\n");
  REQUIRE(two.exit_code == 0);
  CHECK_THAT(two.err, Catch::Contains("2 requests (0 failed): "));
  CHECK_THAT(two.err, Catch::Contains(" + 4 generated tokens in "));
  // Streamed from disk: the engine's line counts modules and slots.
  auto streamed = run_cli({"run", testdata("run/llama-spm"), "--raw", "--max-tokens", "1", "--context", "64", "--cpu-ram", "750K", "--threads", "1", "--batch-size", "8"},
                          "Once upon a time\n");
  REQUIRE(streamed.exit_code == 0);
  CHECK_THAT(streamed.err, Catch::Contains("streamed 5 of 5 modules through 2 slots of "));
  CHECK_FALSE(has_one_plural(streamed.err));
  // Batch 1 (estimate's default): one KV slot, one GPU.
  auto est = run_cli({"estimate", testdata("run/llama-spm"), "--device", "cpu", "--explain"});
  REQUIRE(est.exit_code == 0);
  CHECK_THAT(est.out, Catch::Contains("KV cache: 1 slot × 256 positions"));
  CHECK_FALSE(has_one_plural(est.out));
  auto train = run_cli({"estimate", testdata("run/llama-spm"), "--mode", "lora"});
  CHECK_THAT(train.out, Catch::Contains("on 1 GPU,"));
  CHECK_FALSE(has_one_plural(train.out));
}

namespace {
void copy_into(const std::string& from_dir, const TempDir& to) {
  for (const auto& e : std::filesystem::directory_iterator(from_dir))
    std::filesystem::copy_file(e.path(), to.path / e.path().filename(), std::filesystem::copy_options::skip_existing);
}
}  // namespace

TEST_CASE("mixed formats: GGUF beside safetensors is exit 2 naming both and how to choose", "[cli][mixed]") {
  TempDir d;
  copy_into(testdata("models/llama"), d);
  std::filesystem::copy_file(testdata("models/llama-gguf/model.gguf"), d.path / "model.gguf");
  for (const char* sub : {"inspect", "estimate", "plan", "load"}) {
    INFO(sub);
    auto r = run_cli({sub, d.path.string()});
    CHECK(r.exit_code == 2);
    CHECK(r.out.empty());
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK_THAT(r.err, Catch::Contains("2 formats: safetensors (model.safetensors) and GGUF (model.gguf)"));
    CHECK_THAT(r.err, Catch::Contains("(hint: name the one to use: " + d.file("model.safetensors") + " or " +
                                      d.file("model.gguf") + ")"));
  }
  // Each named path opens that format alone (tensor counts: testdata/expected/fixtures.json).
  const json fx = read_json(testdata("expected/fixtures.json"))["fixtures"];
  for (const auto& [file, rel] : {std::pair<std::string, std::string>{"model.safetensors", "models/llama"},
                                  {"model.gguf", "models/llama-gguf/model.gguf"}}) {
    auto r = run_cli({"inspect", d.file(file), "--json"});
    REQUIRE(r.exit_code == 0);
    CHECK(json::parse(r.out)["num_tensors"] == fx[rel]["tensor_count"]);
  }
}

TEST_CASE("mixed formats: a split GGUF beside sharded safetensors names the index and the first part", "[cli][mixed]") {
  TempDir d;
  copy_into(testdata("models/llama-sharded"), d);
  copy_into(testdata("models/llama-gguf-split"), d);
  auto r = run_cli({"inspect", d.path.string()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("safetensors (model.safetensors.index.json and 5 more) and GGUF "
                                    "(model-00001-of-00003.gguf and 2 more)"));
  CHECK_THAT(r.err, Catch::Contains(d.file("model.safetensors.index.json") + " or " + d.file("model-00001-of-00003.gguf")));
}

TEST_CASE("mixed formats: safetensors beside PyTorch weights reads the safetensors with a warning", "[cli][mixed]") {
  TempDir d;
  copy_into(testdata("models/llama-sharded"), d);
  copy_into(testdata("models/llama-bin"), d);
  auto r = run_cli({"inspect", d.path.string(), "--json"});
  REQUIRE(r.exit_code == 0);
  const json j = json::parse(r.out);
  CHECK(j["format"] == "safetensors");
  CHECK(j["files"].size() == 5);
  REQUIRE(j["warnings"].size() == 1);
  CHECK_THAT(j["warnings"][0].get<std::string>(),
             Catch::Contains("PyTorch weights (pytorch_model.bin.index.json and 5 more)") &&
                 Catch::Contains("pass " + d.file("pytorch_model.bin.index.json")));
  // A trainer checkpoint: optimizer/scheduler/training args beside the weights are not weights.
  TempDir t;
  copy_into(testdata("models/llama"), t);
  for (const char* f : {"optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin"}) write_file(t.file(f), std::string("x"));
  auto tr = run_cli({"inspect", t.path.string(), "--json"});
  REQUIRE(tr.exit_code == 0);
  CHECK(json::parse(tr.out)["warnings"].empty());
}

TEST_CASE("no GPU: a host without the NVIDIA driver reads 'no NVIDIA GPU/driver found' everywhere", "[cli][nogpu]") {
  // The independent fact: the driver library is not there to load.
  if (void* h = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
    ::dlclose(h);
    WARN("skipped: this host has the NVIDIA driver (libcuda.so.1 loads)");
    return;
  }
  const bool built_with_cuda = run_cli({"--version"}).out.find("CUDA: compiled in") != std::string::npos;
  const std::string expected = built_with_cuda ? "no NVIDIA GPU/driver found" : "built without CUDA";
  const std::string m = testdata(kLlama);
  const std::vector<std::vector<std::string>> cases = {
      {"--version"},                                     // device_info.cu
      {"load", m},                                       // loader.cu, via the placement note
      {"load", m, "--device", "cuda"},                   // loader.cu, as the error
      {"run", testdata("run/llama-spm"), "--device", "cuda", "--max-tokens", "1"},  // engine_ops.cu
  };
  for (const auto& args : cases) {
    INFO(args[0] << " " << args.back());
    auto r = run_cli(args, "hi\n");
    const std::string all = r.out + r.err;
    CHECK_THAT(all, Catch::Contains(expected));
    CHECK_THAT(all, !Catch::Contains("insufficient") && !Catch::Contains("cudaGetDeviceCount"));
    if (args.size() > 2 && args[2] == "--device") {
      CHECK(r.exit_code == 2);
      CHECK_THAT(r.err, Catch::StartsWith("nunchaku: error: "));
    }
  }
}

namespace {
// Output of a shell command ("" when it fails).
std::string shell(const std::string& cmd) {
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    if (::pclose(p) != 0) out.clear();
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}
// VALUE of "NAME:TYPE=VALUE" in the build's CMakeCache.txt.
std::string cmake_cache(const std::string& name) {
  std::istringstream in(read_text(std::filesystem::path(NUNCHAKU_BINARY).parent_path() / "CMakeCache.txt"));
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + ":", 0) == 0) return line.substr(line.find('=') + 1);
  return "";
}
}  // namespace

TEST_CASE("version: commit, build type, compiler, CUDA toolkit and the CPU's instruction set, as text and JSON", "[cli][version]") {
  ::unsetenv("NUNCHAKU_ISA");
  auto r = run_cli({"--version", "--json"});
  REQUIRE(r.exit_code == 0);
  const json j = json::parse(r.out);
  CHECK(j["command"] == "version");
  CHECK(j["format_version"] == 2);
  CHECK(j["version"].get<std::string>().rfind("0.", 0) == 0);
  // The commit git reports for the source tree (this test runs right after its build).
  const std::string head = shell("git -C '" NUNCHAKU_SOURCE_DIR "' rev-parse --short=12 HEAD 2>/dev/null");
  if (head.empty()) CHECK(j["git_commit"].is_null());
  else CHECK(j["git_commit"].get<std::string>().rfind(head, 0) == 0);
  CHECK(j["build_type"] == cmake_cache("CMAKE_BUILD_TYPE"));
#if defined(__clang__)
  CHECK(j["compiler"].get<std::string>().rfind("clang " + std::to_string(__clang_major__) + ".", 0) == 0);
#else
  CHECK(j["compiler"].get<std::string>().rfind("GCC " + std::to_string(__GNUC__) + ".", 0) == 0);
#endif
  // CUDA: the toolkit version is the one nvcc itself reports ("..., V12.4.131").
  const std::string nvcc = cmake_cache("CMAKE_CUDA_COMPILER");
  const bool cuda_on = cmake_cache("NUNCHAKU_CUDA") != "OFF" && !nvcc.empty() && nvcc.find("NOTFOUND") == std::string::npos;
  CHECK(j["cuda"]["compiled_in"] == cuda_on);
  if (cuda_on) {
    CHECK_THAT(shell("'" + nvcc + "' --version"), Catch::Contains("V" + j["cuda"]["toolkit_version"].get<std::string>()));
  } else {
    CHECK(j["cuda"]["toolkit_version"].is_null());
  }
  CHECK(j["cuda"]["devices"].empty() == !j["cuda"]["no_devices_reason"].is_null());
  // The engine's ISA: the best this CPU's /proc/cpuinfo flags allow.
  const std::string cpuinfo = read_text("/proc/cpuinfo");
  const std::string flags = cpuinfo.substr(cpuinfo.find("\nflags"), cpuinfo.find('\n', cpuinfo.find("\nflags") + 1) - cpuinfo.find("\nflags")) + " ";
  auto has = [&](const char* f) { return flags.find(std::string(" ") + f + " ") != std::string::npos; };
  const std::string best = has("avx512f") && has("avx512bw") && has("avx512vl") ? "avx512"
                           : has("avx2") && has("fma") && has("f16c")        ? "avx2"
                                                                            : "scalar";
  CHECK(j["cpu"]["isa"] == best);
  // Text: the same facts, one per line.
  auto t = run_cli({"--version"});
  REQUIRE(t.exit_code == 0);
  CHECK(t.out.rfind("nunchaku " + j["version"].get<std::string>(), 0) == 0);
  if (!j["git_commit"].is_null()) CHECK_THAT(t.out, Catch::Contains("(git " + j["git_commit"].get<std::string>() + ")"));
  CHECK_THAT(t.out, Catch::Contains("build: " + j["build_type"].get<std::string>() + ", " + j["compiler"].get<std::string>()));
  CHECK_THAT(t.out, Catch::Contains("CUDA: " + std::string(cuda_on ? "compiled in (toolkit " : "not compiled in")));
  CHECK_THAT(t.out, Catch::Contains("CPU engine: " + best));
}

TEST_CASE("json: every document says which command wrote it and its format_version", "[cli][json]") {
  const std::string m = testdata(kLlama);
  TempDir d;
  struct Case {
    std::string command;
    std::vector<std::string> args;
    std::string file;  // the document is this file, not stdout
  };
  const std::vector<Case> cases = {
      {"inspect", {"inspect", m, "--json"}, ""},
      {"inspect", {"inspect", m, "--json", "--verify"}, ""},
      {"estimate", {"estimate", m, "--json"}, ""},
      {"estimate", {"estimate", m, "--json", "--runtime", "all"}, ""},
      {"plan", {"plan", m, "--vram", "600M", "--json"}, ""},
      {"plan", {"plan", m, "--vram", "0", "--cpu-ram", "1G", "--format", "json", "-o", d.file("plan.json")}, d.file("plan.json")},
      {"load", {"load", m, "--json"}, ""},
      {"convert", {"convert", m, d.file("out"), "--json"}, ""},
      {"run", {"run", testdata("run/llama-spm"), "--max-tokens", "1", "-q", "--stats", d.file("stats.json")}, d.file("stats.json")},
      {"version", {"--version", "--json"}, ""},
  };
  for (const auto& c : cases) {
    INFO(c.args[0] << " " << c.args.back());
    auto r = run_cli(c.args, "hi\n");
    REQUIRE(r.exit_code == 0);
    const json j = json::parse(c.file.empty() ? r.out : read_text(c.file));
    CHECK(j["command"] == c.command);
    // docs/json.md: version 2 renamed each document's keys to the one vocabulary.
    CHECK(j["format_version"] == 2);
  }
  // A plan file with the stamp is still a plan load and run take.
  CHECK(run_cli({"load", m, "--plan", d.file("plan.json")}).exit_code == 0);
}

TEST_CASE("width: load's report fits 100 columns or $COLUMNS", "[cli][width]") {
  const std::string m = testdata("models/llama-sharded");
  auto piped = run_cli({"load", m, "--verify"});  // a pipe without $COLUMNS: nothing wrapped
  REQUIRE(piped.exit_code == 0);
  CHECK_THAT(piped.out, Catch::Contains("page cache (no copy; --copy to copy)\n"));
  CHECK(widest(piped.out) > 100);
  ::setenv("COLUMNS", "100", 1);
  auto r = run_cli({"load", m, "--verify"});
  ::unsetenv("COLUMNS");
  REQUIRE(r.exit_code == 0);
  CHECK(widest(r.out) <= 100);
  // The longest line before wrapping (the mapped-modules line) is all there, wrapped.
  std::string joined = r.out;
  for (size_t at; (at = joined.find("\n  --copy")) != std::string::npos;) joined.replace(at, 3, " ");
  CHECK_THAT(joined, Catch::Contains("(no copy; --copy to copy)"));
  ::setenv("COLUMNS", "60", 1);
  auto narrow = run_cli({"load", m, "--verify"});
  ::unsetenv("COLUMNS");
  REQUIRE(narrow.exit_code == 0);
  CHECK(widest(narrow.out) <= 60);
  CHECK_THAT(narrow.out, Catch::Contains("verify: 21 tensors match"));
  // A path longer than the line stays whole, one piece to copy (as inspect prints it); the
  // rest still fits.
  TempDir d;
  const std::string longer = d.file(std::string(70, 'p'));
  std::filesystem::create_directory_symlink(m, longer);
  ::setenv("COLUMNS", "60", 1);
  auto cut = run_cli({"load", longer, "--verify"});
  ::unsetenv("COLUMNS");
  REQUIRE(cut.exit_code == 0);
  CHECK_THAT(cut.out, Catch::Contains("\n  " + longer + "\n") || Catch::Contains("\n  " + longer + " "));
  std::string rest = cut.out;
  rest.replace(rest.find(longer), longer.size(), "P");
  CHECK(widest(rest) <= 60);
}

TEST_CASE("completion: bash completes commands and each command's options, zsh via bashcompinit", "[cli][completion]") {
  if (shell("command -v bash").empty()) {
    WARN("skipped: no bash");
    return;
  }
  auto complete = [](const std::string& words, int cword) {
    return shell("bash -c 'source <(\"" NUNCHAKU_BINARY "\" completion bash); COMP_WORDS=(" + words + "); COMP_CWORD=" +
                 std::to_string(cword) + "; _nunchaku; echo \"${COMPREPLY[*]}\"'");
  };
  CHECK(complete("nunchaku insp", 1) == "inspect");
  CHECK(complete("nunchaku tok", 1) == "tokenize");
  CHECK(complete("nunchaku tokenize m --no-", 3) == "--no-bos");
  CHECK(complete("nunchaku plan m --vr", 3) == "--vram");
  CHECK(complete("nunchaku inspect m --me", 3) == "--metadata");
  CHECK(complete("nunchaku run m --max-t", 3) == "--max-tokens");
  auto z = run_cli({"completion", "zsh"});
  REQUIRE(z.exit_code == 0);
  CHECK_THAT(z.out, Catch::StartsWith("autoload -U +X bashcompinit && bashcompinit\n"));
  auto bad = run_cli({"completion", "tcsh"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("unknown shell 'tcsh'"));
}

namespace {
// The commands `nunchaku --help` lists, and the long options `nunchaku help CMD` lists.
std::vector<std::string> help_commands() {
  auto r = run_cli({"--help"});
  std::vector<std::string> out;
  const size_t at = r.out.find("\nSubcommands:");
  const std::string text = r.out.substr(at, r.out.find("\n\n", at + 1) - at);
  static const std::regex row(R"(\n  ([a-z]+) )");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), row); it != std::sregex_iterator(); ++it) out.push_back((*it)[1]);
  return out;
}
std::vector<std::string> help_long_options(const std::string& cmd) {
  auto r = run_cli({"help", cmd});
  std::vector<std::string> out;
  static const std::regex row(R"(\n  (?:-[a-zA-Z],)?--([a-z][a-z0-9-]*))");
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), row); it != std::sregex_iterator(); ++it) out.push_back((*it)[1]);
  return out;
}
}  // namespace

TEST_CASE("completion: fish gets one complete line per command and option, each in fish's form", "[cli][completion]") {
  auto r = run_cli({"completion", "fish"});
  REQUIRE(r.exit_code == 0);
  // Every line: complete -c nunchaku [-n 'CONDITION'] then -f | -F | -a WORDS | [-s X] [-l NAME]... [-r], [-d 'TEXT'].
  static const std::regex form(
      R"(complete -c nunchaku( -f| -n '[^'\\]*'( -F| -a ('[a-z ]+'|[a-z]+)( -d '([^'\\]|\\.)*')?|( -s [a-zA-Z])?( -l [a-z][a-z0-9-]*)*( -r)? -d '([^'\\]|\\.)*')))");
  std::set<std::string> top_words, help_words;
  std::map<std::string, std::set<std::string>> longs;  // command -> its --options
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    INFO(line);
    CHECK(std::regex_match(line, form));
    std::smatch m;
    static const std::regex cond(R"(-n '([^']*)')"), arg(R"( -a ('[^']*'|\S+))"), lopt(R"( -l (\S+))");
    const std::string c = std::regex_search(line, m, cond) ? m[1].str() : "";
    const std::string who = c.starts_with("__fish_seen_subcommand_from ") ? c.substr(28) : c.empty() ? "" : "nunchaku";
    if (std::regex_search(line, m, arg)) {
      std::string words = m[1];
      if (words.front() == '\'') words = words.substr(1, words.size() - 2);
      std::istringstream ws(words);
      for (std::string w; ws >> w;) (who == "help" ? help_words : top_words).insert(w);
    }
    if (std::regex_search(line, m, lopt)) longs[who].insert(m[1]);
  }
  const auto commands = help_commands();
  REQUIRE(commands.size() >= 7);
  for (const auto& cmd : commands) {
    INFO(cmd);
    CHECK(top_words.count(cmd));
    CHECK(help_words.count(cmd));
    for (const auto& o : help_long_options(cmd)) {
      INFO("--" << o);
      CHECK(longs[cmd].count(o));
    }
    CHECK(longs[cmd].size() == help_long_options(cmd).size());
  }
  CHECK(top_words.count("help"));
  CHECK(longs["nunchaku"].count("version"));

  // fish itself (scripts/setup.sh installs it): the script parses and completes as bash's does.
  if (shell("command -v fish").empty()) {
    WARN("skipped fish -n and fish's own completion: no fish");
    return;
  }
  TempDir d;
  write_file(d.file("nunchaku.fish"), r.out);
  CHECK(std::system(("fish -n '" + d.file("nunchaku.fish") + "'").c_str()) == 0);
  auto complete = [&](const std::string& line) {
    std::string out = shell("fish -c \"source '" + d.file("nunchaku.fish") + "'; complete -C'" + line + "'\" | cut -f1");
    std::replace(out.begin(), out.end(), '\n', ' ');
    return out;
  };
  CHECK(complete("nunchaku insp") == "inspect");
  CHECK(complete("nunchaku plan m --vr") == "--vram");
  CHECK(complete("nunchaku inspect m --me") == "--metadata");
  CHECK(complete("nunchaku run m --max-t") == "--max-tokens");
  CHECK(complete("nunchaku help es") == "estimate");
  CHECK(complete("nunchaku completion f") == "fish");
  CHECK(complete("nunchaku --vers") == "--version");
  // Arguments are paths: the fixture directory completes.
  CHECK_THAT(complete("nunchaku inspect " + testdata("models/llam")), Catch::Contains(testdata("models/llama-gguf/")));
}
