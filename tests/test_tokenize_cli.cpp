// nunchaku tokenize, against what other tools say the model sees:
//  - testdata/tokenize/expected.json (scripts/make_tokenize_goldens.py): transformers' ids
//    (BOS, add_special_tokens=False, split_special_tokens, apply_chat_template), vocabulary
//    strings (convert_ids_to_tokens; gguf-py's tokenizer.ggml.tokens for the GGUF copies
//    llama.cpp's converter wrote) and the bytes each token stands for;
//  - testdata/run/*/expected.json: the prompt ids transformers' generate was given, which
//    test_run holds `run` to as well; and run's own usage.prompt_tokens on the same input;
//  - llama.cpp's tokenizer test vectors in ../shared/testfiles/vocab (skipped when absent).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/text.hpp"
#include "tests/helpers.hpp"
#include "tests/json_schema_check.hpp"

using nlohmann::json;
using namespace nunchaku;
using namespace nunchaku::test;

namespace {

std::vector<json> json_lines(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

// The golden's input as the JSONL request run reads.
std::string request_line(const json& c) {
  return (c.contains("messages") ? json{{"messages", c["messages"]}} : json{{"prompt", c["prompt"]}}).dump() + "\n";
}

std::string hex_bytes(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += char(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

}  // namespace

TEST_CASE("tokenize --json: ids, vocabulary strings and pieces as transformers and gguf-py give them", "[cli][tokenize]") {
  const json golden = read_json(testdata("tokenize/expected.json"));
  const json schema = read_json(std::string(NUNCHAKU_SOURCE_DIR) + "/docs/schema/tokenize.json");
  for (const auto& [name, m] : golden["models"].items()) {
    // Cases with the same flags go through one process, one JSONL line each.
    std::map<std::vector<std::string>, std::vector<json>> by_flags;
    for (const json& c : m["cases"]) by_flags[c["flags"].get<std::vector<std::string>>()].push_back(c);
    for (const bool gguf : {false, true}) {
      const std::string model = testdata(m[gguf ? "gguf" : "hf_dir"].get<std::string>());
      for (const auto& [flags, cases] : by_flags) {
        std::string in;
        for (const json& c : cases) in += request_line(c);
        std::vector<std::string> args = {"tokenize", model, "--json"};
        args.insert(args.end(), flags.begin(), flags.end());
        auto r = run_cli(args, in);
        INFO(model << " " << fmt::format("{}", fmt::join(flags, " ")) << "\nstderr: " << r.err);
        REQUIRE(r.exit_code == 0);
        const auto got = json_lines(r.out);
        REQUIRE(got.size() == cases.size());
        for (size_t i = 0; i < cases.size(); ++i) {
          const json& c = cases[i];
          INFO("input " << request_line(c));
          CHECK(schema_errors(schema, got[i]).empty());
          CHECK(got[i]["id"] == i);
          CHECK(got[i]["token_ids"] == c["ids"]);
          CHECK(got[i]["prompt_tokens"] == c["ids"].size());
          CHECK(got[i]["tokens"] == c[gguf ? "gguf_tokens" : "tokens"]);
          CHECK(got[i]["pieces"] == c["pieces"]);
        }
      }
    }
  }
}

TEST_CASE("tokenize: the text table shows each piece escaped, special tokens and partial characters", "[cli][tokenize]") {
  const json golden = read_json(testdata("tokenize/expected.json"));
  for (const auto& [name, m] : golden["models"].items())
    for (const json& c : m["cases"]) {
      if (!c["flags"].empty() || !c.contains("prompt")) continue;
      const std::string text = c["prompt"];
      INFO(name << ": " << text);
      auto r = run_cli({"tokenize", testdata(m["hf_dir"]), text});
      REQUIRE(r.exit_code == 0);
      std::istringstream rows(r.out);
      std::string line;
      std::getline(rows, line);
      CHECK(line == fmt::format("prompt: {} token{}", c["ids"].size(), c["ids"].size() == 1 ? "" : "s"));
      for (size_t i = 0; i < c["ids"].size(); ++i) {
        REQUIRE(std::getline(rows, line));
        const std::string bytes = hex_bytes(c["piece_hex"][i]);
        std::string want = fmt::format("{:>10}  '{}'", c["ids"][i].get<int>(), printable(bytes));
        if (c["special"][i]) want += "  (special)";
        else if (c["pieces"][i].get<std::string>() != bytes) {  // not UTF-8 by itself
          want += "  (bytes";
          for (unsigned char b : bytes) want += fmt::format(" {:02x}", b);
          want += ")";
        }
        CHECK(line == want);
      }
      CHECK_FALSE(std::getline(rows, line));
    }
  // Several inputs: one block each, headed by where it came from; JSONL ids are shown.
  auto many = run_cli({"tokenize", testdata("run/qwen2-bpe")}, "hello world\n{\"id\": \"q1\", \"prompt\": \"hi\"}\n");
  REQUIRE(many.exit_code == 0);
  CHECK_THAT(many.out, Catch::StartsWith("stdin line 1: 3 tokens\n"));
  CHECK_THAT(many.out, Catch::Contains("\n\nstdin line 2 (id \"q1\"): 2 tokens\n"));
  // --ids: one JSON list per input; -p is TEXT.
  auto ids = run_cli({"tokenize", testdata("run/llama-spm"), "--ids", "-p", "hello world"});
  REQUIRE(ids.exit_code == 0);
  CHECK(ids.out == "[1,468,461,895]\n");  // run/llama-spm/expected.json's prompt_ids (transformers)
}

TEST_CASE("tokenize prints what run feeds: transformers' prompt ids, and run's own prompt_tokens", "[cli][tokenize][run]") {
  for (const char* name : {"llama-spm", "qwen2-bpe"}) {
    const json exp = read_json(testdata(std::string("run/") + name + "/expected.json"));
    for (const std::string model : {testdata(std::string("run/") + name), testdata(std::string("convert/gguf/") + name + ".gguf")}) {
      INFO(model);
      std::string raw_in, chat_in;
      std::vector<json> raw_ids, chat_ids;
      for (const json& c : exp["cases"]) {
        if (c["mode"] == "raw") raw_in += json{{"prompt", c["prompt"]}}.dump() + "\n", raw_ids.push_back(c["prompt_ids"]);
        else chat_in += json{{"messages", c["prompt"]}}.dump() + "\n", chat_ids.push_back(c["prompt_ids"]);
      }
      // tokenize as it is = run --raw; "messages" always through the template.
      auto raw = run_cli({"tokenize", model, "--json"}, raw_in);
      auto chat = run_cli({"tokenize", model, "--json"}, chat_in);
      REQUIRE(raw.exit_code == 0);
      REQUIRE(chat.exit_code == 0);
      const auto raw_got = json_lines(raw.out), chat_got = json_lines(chat.out);
      REQUIRE(raw_got.size() == raw_ids.size());
      REQUIRE(chat_got.size() == chat_ids.size());
      for (size_t i = 0; i < raw_ids.size(); ++i) CHECK(raw_got[i]["token_ids"] == raw_ids[i]);
      for (size_t i = 0; i < chat_ids.size(); ++i) CHECK(chat_got[i]["token_ids"] == chat_ids[i]);

      // run on the same lines with the same flags counts the same prompt tokens: plain prompts
      // through the template (--chat = run's default), raw with --no-bos, and --system.
      const std::string lines = "Once upon a time\n<|im_start|> and <s> as text\n" + chat_in;
      for (const std::vector<std::string>& flags : std::vector<std::vector<std::string>>{
               {"--chat"}, {}, {"--no-bos"}, {"--split-special"}, {"--chat", "--system", "Be kind."}}) {
        INFO(fmt::format("{}", fmt::join(flags, " ")));
        std::vector<std::string> targs = {"tokenize", model, "--json"}, rargs = {"run", model, "--max-tokens", "1", "-q"};
        for (const auto& f : flags) {
          targs.push_back(f);
          if (f != "--chat") rargs.push_back(f);
        }
        if (std::find(flags.begin(), flags.end(), "--chat") == flags.end()) rargs.push_back("--raw");
        auto t = run_cli(targs, lines);
        auto g = run_cli(rargs, lines);
        REQUIRE(t.exit_code == 0);
        REQUIRE(g.exit_code == 0);
        const auto tl = json_lines(t.out), gl = json_lines(g.out);
        REQUIRE(tl.size() == gl.size());
        for (size_t i = 0; i < tl.size(); ++i) CHECK(tl[i]["prompt_tokens"] == gl[i]["usage"]["prompt_tokens"]);
      }
    }
  }
}

TEST_CASE("tokenize: llama.cpp's tokenizer test vectors through the command line", "[cli][tokenize]") {
  NUNCHAKU_REQUIRE_SHARED();
  // test-tokenizer-0 encodes without BOS and with special-token text as text.
  for (const char* name : {"llama-spm", "gpt-2", "phi-3"}) {
    const std::string gguf = shared_testfile(std::string("vocab/ggml-vocab-") + name + ".gguf");
    INFO(gguf);
    const std::string inp = read_text(gguf + ".inp");
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::string in;
    for (size_t pos = 0; pos < inp.size();) {  // the file ends with a separator
      const size_t next = std::min(inp.find(sep, pos), inp.size());
      in += json{{"prompt", inp.substr(pos, next - pos)}}.dump() + "\n";
      pos = next + sep.size();
    }
    auto r = run_cli({"tokenize", gguf, "--json", "--no-bos", "--split-special"}, in);
    REQUIRE(r.exit_code == 0);
    const auto got = json_lines(r.out);
    std::istringstream out(read_text(gguf + ".out"));
    size_t i = 0;
    for (std::string line; std::getline(out, line); ++i) {
      REQUIRE(i < got.size());
      std::vector<int32_t> want;
      std::istringstream ids(line);
      for (long v; ids >> v;) want.push_back(int32_t(v));
      INFO("input " << i << ": " << got[i].dump());
      CHECK(got[i]["token_ids"].get<std::vector<int32_t>>() == want);
    }
    CHECK(i == got.size());
  }
}

TEST_CASE("tokenize: a split GGUF's vocabulary from any part, as from the unsplit file", "[cli][tokenize]") {
  auto whole = run_cli({"tokenize", testdata("models/llama-gguf/model.gguf"), "--json", "hello world"});
  auto part = run_cli({"tokenize", testdata("models/llama-gguf-split/model-00002-of-00003.gguf"), "--json", "hello world"});
  REQUIRE(whole.exit_code == 0);
  REQUIRE(part.exit_code == 0);
  CHECK(json::parse(whole.out)["token_ids"].size() > 2);
  json w = json::parse(whole.out), p = json::parse(part.out);
  CHECK(p["path"] == testdata("models/llama-gguf-split/model-00002-of-00003.gguf"));  // each names what it was given
  w.erase("path"), p.erase("path");
  CHECK(p == w);
}

TEST_CASE("tokenize: bad input is exit 2 naming the file and line", "[cli][tokenize]") {
  TempDir d;
  // A missing model.
  auto missing = run_cli({"tokenize", d.file("nope"), "hi"});
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::StartsWith("nunchaku: error: " + d.file("nope") + ": "));
  // Weights without a tokenizer.
  auto no_tok = run_cli({"tokenize", testdata("models/llama"), "hi"});
  CHECK(no_tok.exit_code == 2);
  CHECK_THAT(no_tok.err, Catch::Contains("no tokenizer.json beside the weights"));
  // A bad JSONL line: the lines before it are printed, the error names file and line.
  write_file(d.file("in.jsonl"), std::string("{\"prompt\": \"hi\"}\n{\"prompt\": 5}\n{\"prompt\": \"never read\"}\n"));
  auto bad = run_cli({"tokenize", testdata("run/qwen2-bpe"), "--json", "-i", d.file("in.jsonl")});
  CHECK(bad.exit_code == 2);
  CHECK(json_lines(bad.out).size() == 1);
  CHECK(bad.err == "nunchaku: error: " + d.file("in.jsonl") + ": line 2: \"prompt\" must be a string\n");
  auto bad_stdin = run_cli({"tokenize", testdata("run/qwen2-bpe")}, "ok\n\n{not json\n");
  CHECK(bad_stdin.exit_code == 2);
  CHECK_THAT(bad_stdin.err, Catch::StartsWith("nunchaku: error: stdin: line 3: "));
  // "messages" or --chat for a model without a chat template nunchaku knows.
  std::filesystem::create_directory(d.file("plain"));
  write_file(d.file("plain/tokenizer.json"), read_text(testdata("run/qwen2-bpe/tokenizer.json")));
  auto msgs = run_cli({"tokenize", d.file("plain")}, "hello\n{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n");
  CHECK(msgs.exit_code == 2);
  CHECK_THAT(msgs.err, Catch::Contains("stdin: line 2: \"messages\" given, but the model has no chat template"));
  auto chat = run_cli({"tokenize", d.file("plain"), "--chat", "hi"});
  CHECK(chat.exit_code == 2);
  CHECK_THAT(chat.err, Catch::Contains("--chat: the model has no chat template"));
  // Usage.
  CHECK(run_cli({"tokenize", testdata("run/qwen2-bpe"), "a", "-p", "b"}).exit_code == 2);
  CHECK(run_cli({"tokenize", testdata("run/qwen2-bpe"), "a", "--json", "--ids"}).exit_code == 2);
  CHECK(run_cli({"tokenize", testdata("run/qwen2-bpe"), "--input-format", "xml"}, "a\n").exit_code == 2);
}

TEST_CASE("tokenize on the Gemma and Phi-3 tokenizer fixtures gives transformers' ids for text and chat", "[cli][tokenize]") {
  // testdata/tokenizers/{gemma-spm,phi3-spm}/expected.json (scripts/make_tokenizer_fixtures.py):
  // tokenizer(text) ids with and without BOS and special-token parsing, and
  // apply_chat_template(messages, add_generation_prompt=True) ids from transformers 5.
  for (const char* name : {"gemma-spm", "phi3-spm"}) {
    const std::string dir = testdata(std::string("tokenizers/") + name);
    const json exp = read_json(dir + "/expected.json");
    std::string chat_in;
    std::vector<json> chat_ids;
    for (const json& c : exp["default_chat"]) {
      REQUIRE(c.contains("ids"));
      chat_in += json{{"messages", c["messages"]}}.dump() + "\n";
      chat_ids.push_back(c["ids"]);
    }
    REQUIRE(chat_ids.size() >= 5);
    auto chat = run_cli({"tokenize", dir, "--json"}, chat_in);
    REQUIRE(chat.exit_code == 0);
    const auto chat_got = json_lines(chat.out);
    REQUIRE(chat_got.size() == chat_ids.size());
    for (size_t i = 0; i < chat_ids.size(); ++i) {
      INFO(name << " conversation " << i);
      CHECK(chat_got[i]["token_ids"] == chat_ids[i]);
    }
    std::string raw_in;
    std::vector<const json*> cases;
    for (const json& c : exp["cases"])
      if (!c["text"].get<std::string>().empty()) raw_in += json{{"prompt", c["text"]}}.dump() + "\n", cases.push_back(&c);
    const std::vector<std::pair<std::vector<std::string>, const char*>> modes = {
        {{}, "ids_add_special"}, {{"--no-bos"}, "ids"}, {{"--no-bos", "--split-special"}, "ids_no_parse_special"}};
    for (const auto& [flags, key] : modes) {
      std::vector<std::string> args = {"tokenize", dir, "--json"};
      args.insert(args.end(), flags.begin(), flags.end());
      auto raw = run_cli(args, raw_in);
      REQUIRE(raw.exit_code == 0);
      const auto got = json_lines(raw.out);
      REQUIRE(got.size() == cases.size());
      for (size_t i = 0; i < cases.size(); ++i) {
        INFO(name << " " << key << " text: " << (*cases[i])["text"].dump());
        CHECK(got[i]["token_ids"] == (*cases[i])[key]);
      }
    }
  }
}
