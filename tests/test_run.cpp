// nunchaku run end to end: tokenizer + chat template + engine + batch I/O against what
// transformers generated for the same tiny models and prompts (scripts/make_run_fixture.py),
// request parsing, per-request errors, stop strings, and stories260K through the CLI.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "batch/requests.hpp"
#include "engine/kernels_fast_bf16.hpp"
#include "tests/helpers.hpp"
#include "tests/json_schema_check.hpp"

using namespace nunchaku;
using nlohmann::json;

namespace {

std::vector<json> jsonl(const std::string& out) {
  std::vector<json> v;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) v.push_back(json::parse(line));
  return v;
}

}  // namespace

TEST_CASE("run: greedy tokens and text equal transformers' generate on the fixtures", "[run]") {
  for (const std::string name : {"llama-spm", "qwen2-bpe"}) {
    const std::string dir = test::testdata("run/" + name);
    const json exp = test::read_json(dir + "/expected.json");
    std::string raw_in, chat_in;
    std::vector<json> raw_cases, chat_cases;
    for (const auto& c : exp["cases"]) {
      if (c["mode"] == "raw") raw_in += json({{"prompt", c["prompt"]}}).dump() + "\n", raw_cases.push_back(c);
      else chat_in += json({{"messages", c["prompt"]}}).dump() + "\n", chat_cases.push_back(c);
    }
    const std::string max_tokens = std::to_string(exp["max_tokens"].get<int>());
    for (int chat = 0; chat < 2; ++chat) {
      const auto& cases = chat ? chat_cases : raw_cases;
      if (cases.empty()) continue;
      std::vector<std::string> args = {"run", dir, "--max-tokens", max_tokens, "--batch-size", "3", "-q"};
      if (!chat) args.push_back("--raw");
      auto r = test::run_cli(args, chat ? chat_in : raw_in);
      INFO(name << (chat ? " chat" : " raw") << ": " << r.err);
      REQUIRE(r.exit_code == 0);
      auto out = jsonl(r.out);
      REQUIRE(out.size() == cases.size());
      for (size_t i = 0; i < cases.size(); ++i) {
        CHECK(out[i]["id"] == i);  // input order
        CHECK(out[i]["usage"]["prompt_tokens"] == cases[i]["prompt_ids"].size());
        CHECK(out[i]["token_ids"] == cases[i]["completion_ids"]);
        CHECK(out[i]["finish_reason"] == cases[i]["finish_reason"]);
        CHECK(out[i]["text"] == cases[i]["text"]);
      }
    }
  }
}

TEST_CASE("run: a bad request fails alone, ids, custom_ids and the OpenAI batch shape", "[run]") {
  const std::string dir = test::testdata("run/qwen2-bpe");
  const std::string in =
      "{\"custom_id\": \"req-a\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\", "
      "\"body\": {\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 3}}\n"
      "{\"id\": 7, \"prompt\": \"hello\", \"max_tokens\": 2}\n"
      "{not json\n"
      "\n"
      "{\"prompt\": 5}\n"
      "plain text line\n";
  auto r = test::run_cli({"run", dir, "--max-tokens", "4", "-q"}, in);
  REQUIRE(r.exit_code == 0);
  auto out = jsonl(r.out);
  REQUIRE(out.size() == 5);  // the blank line is skipped
  CHECK(out[0]["custom_id"] == "req-a");
  CHECK(out[0]["response"]["body"]["usage"]["completion_tokens"] <= 3);
  CHECK(out[1]["id"] == 7);
  CHECK(out[1]["token_ids"].size() <= 2);
  CHECK(out[2]["finish_reason"] == "error");
  CHECK_THAT(out[2]["error"]["message"].get<std::string>(), Catch::Contains("line 3"));
  CHECK(out[3]["finish_reason"] == "error");
  CHECK_THAT(out[3]["error"]["message"].get<std::string>(), Catch::Contains("\"prompt\" must be a string"));
  CHECK(out[4]["id"] == 4);
  CHECK(out[4]["finish_reason"] != "error");
}

TEST_CASE("run: a stop string ends the text before it", "[run]") {
  const std::string dir = test::testdata("run/llama-spm");
  const json exp = test::read_json(dir + "/expected.json");
  const json& c = exp["cases"][0];  // raw "Once upon a time"
  const std::string full = c["text"];
  // A stop string from the middle of transformers' greedy text.
  const std::string stop = full.substr(full.size() / 2, 3);
  const size_t at = full.find(stop);
  auto r = test::run_cli({"run", dir, "--raw", "--max-tokens", "12", "--stop", stop, "-q"}, c["prompt"].get<std::string>() + "\n");
  REQUIRE(r.exit_code == 0);
  auto out = jsonl(r.out);
  REQUIRE(out.size() == 1);
  CHECK(out[0]["text"] == full.substr(0, at));
  CHECK(out[0]["finish_reason"] == "stop");
}

TEST_CASE("run: request parsing", "[run]") {
  auto r = parse_request("{\"prompt\": \"x\", \"stop\": [\"a\", \"b\"], \"seed\": 3, \"top_k\": 5}", 0, 1, InputFormat::Auto);
  CHECK(r.error.empty());
  CHECK(r.params.stop == std::vector<std::string>{"a", "b"});
  CHECK(r.params.seed == 3u);
  CHECK(r.params.top_k == 5);
  CHECK(parse_request("{\"prompt\": \"x\", \"seed\": -1}", 0, 1, InputFormat::Auto).error.find("negative") != std::string::npos);
  CHECK(parse_request("{\"prompt\": \"x\", \"top_k\": 1.5}", 0, 1, InputFormat::Auto).error.find("integer") != std::string::npos);
  CHECK(parse_request("{\"x\": 1}", 0, 1, InputFormat::Auto).error.find("no \"prompt\"") != std::string::npos);
  CHECK(parse_request("{\"a\"}", 0, 1, InputFormat::Lines).prompt == "{\"a\"}");  // lines: taken as text
  CHECK(!parse_request("plain", 0, 1, InputFormat::Jsonl).error.empty());
  auto m = parse_request("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, "
                         "{\"type\": \"text\", \"text\": \"b\"}]}]}",
                         0, 1, InputFormat::Auto);
  REQUIRE(m.error.empty());
  CHECK(m.messages.at(0).content == "ab");
  CHECK(find_stop("hello world", {"o w", "wor"}) == 4);
  CHECK(find_stop("hello", {"", "z"}) == std::string::npos);
}

TEST_CASE("run: usage errors are exit 2 before any output", "[run]") {
  const std::string dir = test::testdata("run/llama-spm");
  CHECK(test::run_cli({"run", dir, "--batch-size", "0"}, "x\n").exit_code == 2);
  CHECK(test::run_cli({"run", dir, "--kv-dtype", "q4"}, "x\n").exit_code == 2);
  CHECK(test::run_cli({"run", dir, "--device", "cuda"}, "x\n").exit_code == 2);
  auto r = test::run_cli({"run", test::testdata("models/llama")}, "x\n");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("tokenizer.json"));
  CHECK(r.out.empty());
}

TEST_CASE("run: stories260K.gguf from BOS tells llama2.c's greedy story", "[run]") {
  NUNCHAKU_REQUIRE_SHARED();
  // The opening of the greedy sample llama2.c publishes for stories260K (see test_engine.cpp).
  const std::string expected = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";
  auto r = test::run_cli({"run", test::shared_testfile("gguf/stories260K.gguf"), "--raw", "--max-tokens", "40", "-q"},
                         "{\"prompt\": \"\"}\n");
  REQUIRE(r.exit_code == 0);
  auto out = jsonl(r.out);
  REQUIRE(out.size() == 1);
  std::string text = out[0]["text"];
  if (!text.empty() && text[0] == ' ') text.erase(0, 1);
  CHECK(text.substr(0, expected.size()) == expected);
}

TEST_CASE("run: layers left on disk by --cpu-ram give the same tokens", "[run]") {
  const std::string dir = test::testdata("run/llama-spm");
  const json exp = test::read_json(dir + "/expected.json");
  // At batch 3 the engine's run state (engine_memory) is ~0.53 MiB and the weights 312 KiB:
  // with 0.8 MiB the modules stay on disk (streamed through two slots).
  auto p = test::run_cli({"plan", dir, "--batch", "3", "--cpu-ram", "0.8M", "--disk", "--format", "json", "--threads", "1"});
  REQUIRE(p.exit_code == 0);
  const json plan = json::parse(p.out);
  int on_disk = 0;
  for (const auto& [_, d] : plan["device_map"].items()) on_disk += d == "disk";
  CHECK(on_disk > 0);
  const json& c = exp["cases"][1];
  auto r = test::run_cli({"run", dir, "--raw", "--batch-size", "3", "--cpu-ram", "0.8M", "--threads", "1", "--max-tokens", "12", "-q"},
                         c["prompt"].get<std::string>() + "\n");
  REQUIRE(r.exit_code == 0);
  auto out = jsonl(r.out);
  REQUIRE(out.size() == 1);
  CHECK(out[0]["token_ids"] == c["completion_ids"]);
}

TEST_CASE("run --fast-math: says so when no weight takes the 8-bit path, and the tokens stay exact", "[run][fast-math]") {
  // The fixture's matrices are F32 (64 wide, not Q4_K): nothing changes but the note. The
  // 8-bit path itself is checked against ggml in test_fast_math.cpp.
  const std::string dir = test::testdata("run/llama-spm");
  const json exp = test::read_json(dir + "/expected.json");
  const json& c = exp["cases"][1];
  auto r = test::run_cli({"run", dir, "--raw", "--fast-math", "--max-tokens", "12"}, c["prompt"].get<std::string>() + "\n");
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("--fast-math: no weight of this model is Q4_K, Q5_K, Q6_K or BF16") != std::string::npos);
  auto out = jsonl(r.out);
  REQUIRE(out.size() == 1);
  CHECK(out[0]["token_ids"] == c["completion_ids"]);
  auto h = test::run_cli({"run", "--help"});
  CHECK(h.out.find("--fast-math") != std::string::npos);
}

TEST_CASE("run/bench without --fast-math: one line says when the model's weights have the fast path", "[run][fast-math]") {
  // BF16 matrices take the fast path on a CPU with AVX512_BF16 only (kernels_fast_bf16.hpp);
  // F32 never. The line is on stderr, once, and not with --fast-math or --quiet.
  const std::string bf16 = test::testdata("engine/llama-small-bf16");
  const std::string hint = "have a faster, approximate path";
  auto r = test::run_cli({"bench", bf16, "-p", "4", "-n", "2", "-r", "1"});
  REQUIRE(r.exit_code == 0);
  if (engine::fast_bf16_available()) {
    CHECK(r.err.find("BF16 weights " + hint) != std::string::npos);
    CHECK(r.err.find(hint) == r.err.rfind(hint));
  } else {
    CHECK(r.err.find(hint) == std::string::npos);
  }
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"bench", bf16, "-p", "4", "-n", "2", "-r", "1", "--fast-math"},
        std::vector<std::string>{"bench", test::testdata("engine/llama-small-gguf/llama-small-f32.gguf"), "-p", "4", "-n",
                                 "2", "-r", "1"}}) {
    auto q = test::run_cli(args);
    REQUIRE(q.exit_code == 0);
    CHECK(q.err.find(hint) == std::string::npos);
  }
}

TEST_CASE("run: OpenAI n choices, greedy as transformers' generate and sampled each on its own seed", "[run]") {
  const std::string dir = test::testdata("run/llama-spm");
  const json exp = test::read_json(dir + "/expected.json");
  const json& raw = exp["cases"][0];  // transformers' greedy continuation of a raw prompt
  REQUIRE(raw["mode"] == "raw");
  const int n_tok = exp["max_tokens"].get<int>();
  auto line = [&](const std::string& id, const std::string& extra) {
    return fmt::format("{{\"custom_id\": \"{}\", \"url\": \"/v1/completions\", \"body\": {{\"prompt\": {}, "
                       "\"max_tokens\": {}{}}}}}\n", id, raw["prompt"].dump(), n_tok, extra);
  };
  const std::string in = line("greedy", ", \"temperature\": 0, \"n\": 3") +
                         line("sampled", ", \"temperature\": 1.5, \"seed\": 5, \"n\": 4") +
                         line("s5", ", \"temperature\": 1.5, \"seed\": 5") + line("s6", ", \"temperature\": 1.5, \"seed\": 6") +
                         line("s8", ", \"temperature\": 1.5, \"seed\": 8") + line("zero", ", \"n\": 0") +
                         line("big", ", \"n\": 129") + "{\"id\": \"own\", \"prompt\": \"hi\", \"n\": 2}\n";
  auto r = test::run_cli({"run", dir, "-q", "--raw"}, in);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto out = jsonl(r.out);
  REQUIRE(out.size() == 8);
  const json schemas = test::read_json(test::testdata("run/openai_schemas.json"));
  // Greedy: every choice is transformers' continuation; usage counts the prompt once.
  const json& g = out[0]["response"]["body"];
  REQUIRE(g["choices"].size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(g["choices"][i]["index"] == i);
    CHECK(g["choices"][i]["text"] == raw["text"]);
  }
  CHECK(g["usage"]["completion_tokens"] == 3 * n_tok);
  CHECK(g["usage"]["total_tokens"] == g["usage"]["prompt_tokens"].get<int>() + 3 * n_tok);
  for (const auto& w : test::schema_errors(schemas["text_completion"], g)) FAIL_CHECK(w);
  // Sampled: choice i is the request alone with seed 5 + i, so the choices are not copies.
  const json& sm = out[1]["response"]["body"];
  REQUIRE(sm["choices"].size() == 4);
  CHECK(sm["choices"][0]["text"] == out[2]["response"]["body"]["choices"][0]["text"]);
  CHECK(sm["choices"][1]["text"] == out[3]["response"]["body"]["choices"][0]["text"]);
  CHECK(sm["choices"][3]["text"] == out[4]["response"]["body"]["choices"][0]["text"]);
  CHECK(sm["choices"][0]["text"] != sm["choices"][1]["text"]);
  for (const auto& w : test::schema_errors(schemas["text_completion"], sm)) FAIL_CHECK(w);
  // Out of range, and nunchaku's own shape (one text per line): per-request errors.
  CHECK_THAT(out[5]["response"]["body"]["error"]["message"].get<std::string>(), Catch::Contains("\"n\" must be in [1, 128], not 0"));
  CHECK_THAT(out[6]["response"]["body"]["error"]["message"].get<std::string>(), Catch::Contains("not 129"));
  // (its error comes in the shape of the lines before it, as every failed line's does)
  CHECK_THAT(out[7]["response"]["body"]["error"]["message"].get<std::string>(),
             Catch::Contains("\"n\" above 1 is answered in the OpenAI batch shape"));
  // --format text prints one continuation: n above 1 is refused there.
  auto t = test::run_cli({"run", dir, "--raw", "-q", "--format", "text"}, line("t", ", \"n\": 2"));
  CHECK_THAT(t.err, Catch::Contains("needs JSON output"));
}

TEST_CASE("run: OpenAI logprobs (completions and chat), n and unsupported fields and urls per request", "[run]") {
  const std::string dir = test::testdata("run/qwen2-bpe");
  const std::string in =
      "{\"custom_id\": \"c\", \"method\": \"POST\", \"url\": \"/v1/completions\", "
      "\"body\": {\"prompt\": \"hello\", \"max_tokens\": 3, \"logprobs\": 2}}\n"
      "{\"custom_id\": \"m\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\", "
      "\"body\": {\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 3, \"logprobs\": true, \"top_logprobs\": 3}}\n"
      "{\"custom_id\": \"n\", \"url\": \"/v1/completions\", \"body\": {\"prompt\": \"hello\", \"n\": 2}}\n"
      "{\"custom_id\": \"e\", \"url\": \"/v1/embeddings\", \"body\": {\"input\": \"hello\"}}\n"
      "{\"custom_id\": \"k\", \"url\": \"/v1/completions\", \"body\": {\"prompt\": \"hello\", \"logprobs\": 21}}\n"
      "{\"custom_id\": \"x\", \"url\": \"/v1/completions\", \"body\": {\"prompt\": \"hello\", \"echo\": true}}\n"
      "{\"custom_id\": \"t\", \"url\": \"/v1/chat/completions\", \"body\": {\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"top_logprobs\": 2}}\n";
  auto r = test::run_cli({"run", dir, "-q"}, in);
  REQUIRE(r.exit_code == 0);
  auto out = jsonl(r.out);
  REQUIRE(out.size() == 7);
  const json& c = out[0]["response"]["body"]["choices"][0];
  INFO(out[0].dump());
  const json& lp = c["logprobs"];
  const size_t n = out[0]["response"]["body"]["usage"]["completion_tokens"].get<size_t>();
  CHECK(lp["tokens"].size() <= n);
  REQUIRE(lp["tokens"].size() == lp["token_logprobs"].size());
  REQUIRE(lp["top_logprobs"].size() == lp["tokens"].size());
  REQUIRE(lp["text_offset"].size() == lp["tokens"].size());
  std::string joined;
  for (size_t i = 0; i < lp["tokens"].size(); ++i) {
    CHECK(lp["text_offset"][i] == joined.size());
    joined += lp["tokens"][i].get<std::string>();
    CHECK(lp["token_logprobs"][i].get<double>() <= 0);
    // Greedy: the sampled token is the most likely, so it is among the top 2 (with the same value).
    CHECK(lp["top_logprobs"][i].size() <= 2);
    CHECK(lp["top_logprobs"][i][lp["tokens"][i].get<std::string>()] == lp["token_logprobs"][i]);
  }
  CHECK(joined.starts_with(c["text"].get<std::string>()));
  const json& content = out[1]["response"]["body"]["choices"][0]["logprobs"]["content"];
  INFO(out[1].dump());
  REQUIRE(!content.empty());
  for (const auto& e : content) {
    REQUIRE(e["top_logprobs"].size() == 3);
    CHECK(e["top_logprobs"][0]["logprob"] == e["logprob"]);  // greedy: the argmax
    CHECK(e["top_logprobs"][0]["logprob"] >= e["top_logprobs"][1]["logprob"]);
    CHECK(e["top_logprobs"][1]["logprob"] >= e["top_logprobs"][2]["logprob"]);
    std::string bytes;
    for (const auto& b : e["bytes"]) bytes.push_back(char(b.get<int>()));
    CHECK(bytes == e["token"].get<std::string>());
  }
  // Both bodies, logprobs included, against the openai package's schemas (scripts/make_openai_schema.py).
  const json schemas = test::read_json(test::testdata("run/openai_schemas.json"));
  for (size_t i : {0, 1}) {
    const json& body = out[i]["response"]["body"];
    for (const auto& w : test::schema_errors(schemas[body["object"].get<std::string>()], body)) FAIL_CHECK(w);
  }
  auto error_of = [&](size_t i) {
    CHECK(out[i]["response"]["status_code"] == 400);
    return out[i]["response"]["body"]["error"]["message"].get<std::string>();
  };
  CHECK(out[2]["response"]["body"]["choices"].size() == 2);  // "n" (its own case below)
  CHECK_THAT(error_of(3), Catch::Contains("url \"/v1/embeddings\" is not supported"));
  CHECK_THAT(error_of(4), Catch::Contains("\"logprobs\" must be in [0, 20], not 21"));
  CHECK_THAT(error_of(5), Catch::Contains("\"echo\" is not supported"));
  CHECK_THAT(error_of(6), Catch::Contains("\"top_logprobs\" needs \"logprobs\": true"));
  // nunchaku's own shape: the chat form under "logprobs"; n 1 and defaults are accepted.
  auto own = jsonl(test::run_cli({"run", dir, "-q", "--max-tokens", "2"},
                                 "{\"prompt\": \"hi\", \"logprobs\": 1, \"n\": 1, \"echo\": false, \"stream\": false}\n").out);
  REQUIRE(own.size() == 1);
  INFO(own[0].dump());
  CHECK(own[0]["logprobs"]["content"].size() == own[0]["token_ids"].size());
}
