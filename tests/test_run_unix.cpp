// `nunchaku run` as a Unix citizen, through the built binary (fork/exec, pipes, signals):
// streaming input, SIGINT/SIGTERM with -o, outputs that never destroy inputs or follow
// planted links, concurrent writers, stdout/stdin failures, bounded cost of huge prompts,
// BOM, OpenAI batch output, flag and field ranges. Tiny models from testdata/run keep each
// case to a second or two.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/helpers.hpp"
#include "tests/unix_child.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace nunchaku;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

using test::Child;
using test::jsonl;
using test::long_input;
using test::others_in;
using test::read_line;
using test::spawn;
using test::wait_catches;
using test::wait_exit;
using test::wait_for_first_result;
using test::write_all;

const std::string kModel = "run/llama-spm";

// The part of JSON Schema pydantic emits for the openai package's types: $ref, anyOf,
// type, enum, const, required, properties, items. Appends what does not match to `why`.
void check_schema(const json& v, const json& schema, const json& root, const std::string& at, std::vector<std::string>& why) {
  if (schema.contains("$ref")) {
    const std::string ref = schema["$ref"];  // "#/$defs/Name"
    return check_schema(v, root["$defs"][ref.substr(ref.rfind('/') + 1)], root, at, why);
  }
  if (schema.contains("anyOf")) {
    for (const auto& alt : schema["anyOf"]) {
      std::vector<std::string> w;
      check_schema(v, alt, root, at, w);
      if (w.empty()) return;
    }
    why.push_back(at + ": matches none of anyOf");
    return;
  }
  if (schema.contains("const") && v != schema["const"]) why.push_back(at + ": not " + schema["const"].dump());
  if (schema.contains("enum") && std::find(schema["enum"].begin(), schema["enum"].end(), v) == schema["enum"].end())
    why.push_back(at + ": " + v.dump() + " not in enum");
  if (schema.contains("type")) {
    const std::string t = schema["type"];
    const bool ok = t == "object"    ? v.is_object()
                    : t == "array"   ? v.is_array()
                    : t == "string"  ? v.is_string()
                    : t == "integer" ? v.is_number_integer()
                    : t == "number"  ? v.is_number()
                    : t == "boolean" ? v.is_boolean()
                    : t == "null"    ? v.is_null()
                                     : false;
    if (!ok) return why.push_back(at + ": not of type " + t);
  }
  if (v.is_object()) {
    const json required = schema.value("required", json::array()), props = schema.value("properties", json::object());
    for (const auto& r : required)
      if (!v.contains(r.get<std::string>())) why.push_back(at + ": no required " + r.get<std::string>());
    for (const auto& [k, sub] : props.items())
      if (v.contains(k)) check_schema(v[k], sub, root, at + "." + k, why);
  }
  if (v.is_array() && schema.contains("items"))
    for (size_t i = 0; i < v.size(); ++i) check_schema(v[i], schema["items"], root, at + "[" + std::to_string(i) + "]", why);
}

}  // namespace

TEST_CASE("run streams: the first result arrives before the second line is written", "[run][unix]") {
  test::TempDir dir;
  Child c = spawn({"run", test::testdata(kModel), "--raw", "--max-tokens", "4", "-q"}, "", "", dir.file("err"));
  write_all(c.to_child, "{\"id\": \"a\", \"prompt\": \"Once upon a time\"}\n");
  const std::string first = read_line(c.from_child);
  INFO(test::read_text(dir.file("err")));
  REQUIRE(!first.empty());
  CHECK(json::parse(first)["id"] == "a");
  write_all(c.to_child, "{\"id\": \"b\", \"prompt\": \"The cat\"}\n");
  ::close(c.to_child);
  const std::string second = read_line(c.from_child);
  CHECK(json::parse(second)["id"] == "b");
  CHECK(read_line(c.from_child, 5).empty());  // EOF
  ::close(c.from_child);
  CHECK(wait_exit(c.pid) == 0);
}

TEST_CASE("run: weights truncated while it runs: the finished result is out, then exit 2 naming file, tensor, offset",
          "[run][unix][hostile][faults]") {
  test::TempDir dir;
  fs::copy(test::testdata(kModel), dir.path / "m", fs::copy_options::recursive);
  const std::string weights = (dir.path / "m" / "model.safetensors").string();
  // Default placement: the weights are read through file mappings while decoding.
  Child c = spawn({"run", (dir.path / "m").string(), "--raw", "--max-tokens", "4", "-q"}, "", "", dir.file("err"));
  write_all(c.to_child, "{\"id\": \"a\", \"prompt\": \"Once upon a time\"}\n");
  const std::string first = read_line(c.from_child);
  REQUIRE(!first.empty());
  CHECK(json::parse(first)["id"] == "a");
  REQUIRE(::truncate(weights.c_str(), 4096) == 0);
  write_all(c.to_child, "{\"id\": \"b\", \"prompt\": \"The cat\"}\n");
  ::close(c.to_child);
  CHECK(read_line(c.from_child, 30).empty());  // nothing computed from zeroed weights
  ::close(c.from_child);
  CHECK(wait_exit(c.pid) == 2);
  const std::string err = test::read_text(dir.file("err"));
  INFO(err);
  CHECK(err.rfind("nunchaku: error: ", 0) == 0);
  CHECK(err.find('\n') == err.size() - 1);  // one line
  CHECK_THAT(err, Catch::Contains(fs::canonical(weights).string() + ": tensor '"));
  CHECK_THAT(err, Catch::Contains("': at byte "));
  CHECK_THAT(err, Catch::Contains("1 of 2 requests completed"));
}

TEST_CASE("run: SIGINT in decode, SIGTERM in prefill keep the finished results in -o, in order", "[run][unix]") {
  for (int sig : {SIGINT, SIGTERM}) {
    test::TempDir dir;
    const std::string in = dir.file("in.jsonl"), out = dir.file("out.jsonl");
    test::write_file(in, long_input(300, sig == SIGTERM));
    Child c = spawn({"run", test::testdata(kModel), "--raw", "--batch-size", "2", "--prefill-chunk", sig == SIGTERM ? "1" : "64", "-i",
                     in, "-o", out, "-q"},
                    "/dev/null", dir.file("stdout"), dir.file("err"));
    REQUIRE(wait_for_first_result(dir.path));
    ::kill(c.pid, sig);
    const int code = wait_exit(c.pid);
    const std::string err = test::read_text(dir.file("err"));
    INFO(err);
    CHECK(code == 128 + sig);
    auto results = jsonl(test::read_text(out));  // complete JSONL
    REQUIRE(!results.empty());
    CHECK(results.size() < 300);
    for (size_t i = 1; i < results.size(); ++i) CHECK(results[i]["id"].get<int>() > results[i - 1]["id"].get<int>());
    CHECK(results[0]["id"] == 0);
    for (const auto& r : results) {  // requests that ran (prefilled and generated), not refused ones
      CHECK(!r.contains("error"));
      CHECK(r["usage"]["completion_tokens"].get<int>() >= 1);
    }
    CHECK_THAT(err, Catch::Contains(std::to_string(results.size()) + " of "));
    CHECK_THAT(err, Catch::Contains(sig == SIGINT ? "SIGINT" : "SIGTERM"));
    CHECK(others_in(dir.path, {"in.jsonl", "out.jsonl", "stdout", "err"}).empty());  // no temporary left
  }
}

TEST_CASE("run: a second SIGINT exits at once and removes the temporary", "[run][unix]") {
  test::TempDir dir;
  const std::string in = dir.file("in.jsonl"), out = dir.file("out.jsonl");
  test::write_file(in, long_input(300));
  // stdin stays open: after the first SIGINT run would write what finished and exit; the
  // second arrives while the first is still being handled or after, either way quickly.
  Child c = spawn({"run", test::testdata(kModel), "--raw", "-i", in, "-o", out, "-q"}, "/dev/null", dir.file("stdout"),
                  dir.file("err"));
  REQUIRE(wait_for_first_result(dir.path));
  ::kill(c.pid, SIGINT);
  ::kill(c.pid, SIGINT);
  CHECK(wait_exit(c.pid, 10) == 130);
  for (const auto& n : others_in(dir.path, {"in.jsonl", "out.jsonl", "stdout", "err"})) FAIL("left behind: " << n);
}

TEST_CASE("run: SIGINT while waiting for input writes what finished and exits 130", "[run][unix]") {
  test::TempDir dir;
  Child c = spawn({"run", test::testdata(kModel), "--raw", "--max-tokens", "3", "-q"}, "", "", dir.file("err"));
  write_all(c.to_child, "a\nb\n");
  CHECK(!read_line(c.from_child).empty());
  CHECK(!read_line(c.from_child).empty());
  ::kill(c.pid, SIGINT);  // stdin still open: run is waiting for a third line
  CHECK(wait_exit(c.pid, 10) == 130);
  CHECK_THAT(test::read_text(dir.file("err")), Catch::Contains("2 of 2 requests completed"));
  ::close(c.to_child);
  ::close(c.from_child);
}

TEST_CASE("run: a reader that goes away ends run as SIGPIPE ends any pipeline tool", "[run][unix]") {
  test::TempDir dir;
  test::write_file(dir.file("in"), long_input(300));
  Child c = spawn({"run", test::testdata(kModel), "--raw", "-q"}, dir.file("in"), "", dir.file("err"));
  CHECK(!read_line(c.from_child).empty());
  ::close(c.from_child);  // `| head -1`
  CHECK(wait_exit(c.pid) == 128 + SIGPIPE);
}

TEST_CASE("run: a terminal on stdin gets a one-line hint, Ctrl-D ends the input", "[run][unix]") {
  test::TempDir dir;
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  REQUIRE(master >= 0);
  REQUIRE(::grantpt(master) == 0);
  REQUIRE(::unlockpt(master) == 0);
  const std::string slave = ::ptsname(master);
  Child c = spawn({"run", test::testdata(kModel), "--raw", "--max-tokens", "2"}, slave, "", dir.file("err"));
  write_all(master, "Once upon a time\n");
  const std::string first = read_line(c.from_child);
  REQUIRE(!first.empty());  // answered while the terminal is still open
  CHECK(json::parse(first)["id"] == 0);
  write_all(master, "\x04");  // Ctrl-D
  CHECK(wait_exit(c.pid) == 0);
  ::close(master);
  ::close(c.from_child);
  const std::string err = test::read_text(dir.file("err"));
  CHECK_THAT(err, Catch::Contains("reading requests from the terminal"));
}

TEST_CASE("run -o: a planted symlink is never followed, the mode of a replaced file is kept", "[run][unix]") {
  test::TempDir dir;
  const std::string victim = dir.file("victim"), out = dir.file("out.jsonl");
  test::write_file(victim, std::string("precious\n"));
  fs::create_symlink(victim, out + ".tmp-nunchaku");  // the name older versions used
  test::write_file(out, std::string("old\n"));
  ::chmod(out.c_str(), 0600);
  auto r = test::run_cli({"run", test::testdata(kModel), "--raw", "--max-tokens", "2", "-o", out, "-q"}, "hi\n");
  REQUIRE(r.exit_code == 0);
  CHECK(test::read_text(victim) == "precious\n");
  CHECK(fs::is_symlink(out + ".tmp-nunchaku"));
  CHECK(!fs::is_symlink(out));
  CHECK(jsonl(test::read_text(out)).size() == 1);
  struct stat st {};
  REQUIRE(::stat(out.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
}

TEST_CASE("run -o: two concurrent runs on one output both succeed and the file is one run's whole output", "[run][unix]") {
  test::TempDir dir;
  const std::string out = dir.file("out.jsonl");
  std::string a, b;
  for (int i = 0; i < 20; ++i) {
    a += json({{"custom_id", "a" + std::to_string(i)}, {"prompt", "x"}}).dump() + "\n";
    b += json({{"custom_id", "b" + std::to_string(i)}, {"prompt", "y"}}).dump() + "\n";
  }
  test::write_file(dir.file("a.jsonl"), a);
  test::write_file(dir.file("b.jsonl"), b);
  std::vector<Child> kids;
  for (const char* n : {"a", "b"})
    kids.push_back(spawn({"run", test::testdata(kModel), "--raw", "--max-tokens", "8", "-i", dir.file(std::string(n) + ".jsonl"),
                          "-o", out, "-q"},
                         "/dev/null", dir.file(std::string(n) + ".stdout"), dir.file(std::string(n) + ".err")));
  for (auto& k : kids) CHECK(wait_exit(k.pid) == 0);
  auto results = jsonl(test::read_text(out));
  REQUIRE(results.size() == 20);
  const char first = results[0]["custom_id"].get<std::string>()[0];
  for (size_t i = 0; i < results.size(); ++i) CHECK(results[i]["custom_id"] == std::string(1, first) + std::to_string(i));
  for (const auto& n : others_in(dir.path, {"out.jsonl", "a.jsonl", "b.jsonl", "a.stdout", "b.stdout", "a.err", "b.err"}))
    FAIL("left behind: " << n);
}

TEST_CASE("run -o: a write failure midway is exit 1 and leaves the old file and no temporary", "[run][unix]") {
  test::TempDir dir;
  const std::string in = dir.file("in.jsonl"), out = dir.file("out.jsonl");
  test::write_file(in, long_input(100));
  test::write_file(out, std::string("old\n"));
  Child c = spawn({"run", test::testdata(kModel), "--raw", "--max-tokens", "8", "-i", in, "-o", out, "-q"}, "/dev/null",
                  dir.file("stdout"), dir.file("err"), 0, 4096);
  CHECK(wait_exit(c.pid) == 1);
  CHECK_THAT(test::read_text(dir.file("err")), Catch::Contains("File too large") && Catch::Contains(out));
  CHECK(test::read_text(out) == "old\n");
  CHECK(others_in(dir.path, {"in.jsonl", "out.jsonl", "stdout", "err"}).empty());
}

TEST_CASE("run and plan refuse an output that is one of their inputs", "[run][unix]") {
  test::TempDir dir;
  const fs::path model = dir.path / "model";
  fs::copy(test::testdata(kModel), model);
  const std::string tok = (model / "tokenizer.json").string(), st = (model / "model.safetensors").string();
  const std::string tok_before = test::read_text(tok), st_before = test::read_text(st);
  auto r = test::run_cli({"run", model.string(), "-o", tok}, "hi\n");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("input"));
  auto p = test::run_cli({"plan", model.string(), "--format", "json", "-o", st});
  CHECK(p.exit_code == 2);
  CHECK(test::read_text(tok) == tok_before);
  CHECK(test::read_text(st) == st_before);
  // A hard link to an input is the same file.
  fs::create_hard_link(tok, dir.file("alias.json"));
  CHECK(test::run_cli({"run", model.string(), "-o", dir.file("alias.json")}, "hi\n").exit_code == 2);
  // -i itself.
  test::write_file(dir.file("req.txt"), std::string("hi\n"));
  CHECK(test::run_cli({"run", model.string(), "-i", dir.file("req.txt"), "-o", dir.file("req.txt")}).exit_code == 2);
  CHECK(test::read_text(dir.file("req.txt")) == "hi\n");
  CHECK(others_in(dir.path, {"model", "alias.json", "req.txt"}).empty());
}

TEST_CASE("run: stdout and stdin failures are not exit 0", "[run][unix]") {
  test::TempDir dir;
  test::write_file(dir.file("in"), std::string("hi\n"));
  const std::vector<std::string> args = {"run", test::testdata(kModel), "--raw", "--max-tokens", "2", "-q"};
  Child full = spawn(args, dir.file("in"), "/dev/full", dir.file("err1"));
  CHECK(wait_exit(full.pid) == 1);
  CHECK_THAT(test::read_text(dir.file("err1")), Catch::Contains("No space left"));
  Child closed = spawn(args, dir.file("in"), "-", dir.file("err2"));
  CHECK(wait_exit(closed.pid) == 2);
  CHECK_THAT(test::read_text(dir.file("err2")), Catch::Contains("stdout"));
  Child no_in = spawn(args, "-", dir.file("out3"), dir.file("err3"));
  CHECK(wait_exit(no_in.pid) == 2);
  CHECK_THAT(test::read_text(dir.file("err3")), Catch::Contains("stdin"));
  auto d = test::run_cli({"run", test::testdata(kModel), "-i", dir.path.string()});
  CHECK(d.exit_code == 2);
  CHECK_THAT(d.err, Catch::Contains("directory"));
  auto z = test::run_cli({"run", test::testdata(kModel), "-i", "/dev/zero"});
  CHECK(z.exit_code == 2);
  CHECK(z.out.empty());
}

TEST_CASE("run: a 50 MB prompt is that request's error under a 1 GiB address-space limit", "[run][unix]") {
#if defined(__SANITIZE_ADDRESS__)
  WARN("skipped: an ASan build reserves more address space than the limit");
  return;
#endif
  test::TempDir dir;
  std::string in = "{\"id\": \"big\", \"prompt\": \"" + std::string(50u << 20, 'a') + "\"}\n";
  in += std::string(10u << 20, 'b') + "\n";  // a plain-text line, too long as well
  in += "{\"id\": \"small\", \"prompt\": \"hi\"}\n";
  test::write_file(dir.file("in"), in);
  Child c = spawn({"run", test::testdata(kModel), "--raw", "--max-tokens", "2", "-q"}, dir.file("in"), dir.file("out"),
                  dir.file("err"), rlim_t(1) << 30);
  CHECK(wait_exit(c.pid) == 0);
  INFO(test::read_text(dir.file("err")));
  auto out = jsonl(test::read_text(dir.file("out")));
  REQUIRE(out.size() == 3);
  CHECK(out[0]["id"] == 0);  // not kept, so not parsed: answered under its index
  CHECK(out[0]["finish_reason"] == "error");
  CHECK_THAT(out[0]["error"]["message"].get<std::string>(), Catch::Contains("line 1"));
  CHECK(out[1]["finish_reason"] == "error");
  CHECK(out[2]["id"] == "small");
  CHECK(out[2]["finish_reason"] != "error");
}

TEST_CASE("load and run: a mapping the address-space limit refuses is exit 3 naming file and tensor", "[run][unix][hostile][oom]") {
#if defined(__SANITIZE_ADDRESS__)
  WARN("skipped: an ASan build reserves more address space than the limit");
  return;
#endif
  // Llama-2-7B in F16 (12.6 GiB, a file hole) under a 2 GiB address-space limit: the
  // planner is told the memory is there, so the mmap itself fails (ENOMEM).
  test::TempDir dir;
  test::write_sparse_llama(dir.path.string(), test::testdata("models/llama2-7b-config/config.json"));
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy(test::testdata(kModel) + "/" + f, dir.path / f);
  const std::vector<std::vector<std::string>> commands = {{"load", dir.path.string(), "--device", "cpu"},
                                                          {"run", dir.path.string(), "--device", "cpu", "-q"}};
  for (const auto& args : commands) {
    INFO(args[0]);
    Child c = spawn(args, "/dev/null", dir.file("out"), dir.file("err"), rlim_t(2) << 30);
    CHECK(wait_exit(c.pid) == 3);
    const std::string err = test::read_text(dir.file("err"));
    INFO(err);
    CHECK_THAT(err, Catch::StartsWith("nunchaku: error: ") && Catch::Contains("model.safetensors: tensor 'model.") &&
                        Catch::Contains("Cannot allocate memory") && Catch::Contains("ulimit -v"));
  }
}

TEST_CASE("run: a BOM before the first JSON line is dropped", "[run][unix]") {
  auto r = test::run_cli({"run", test::testdata(kModel), "--raw", "--max-tokens", "2", "-q"},
                         "\xEF\xBB\xBF{\"id\": \"x\", \"prompt\": \"hi\"}\n");
  REQUIRE(r.exit_code == 0);
  auto out = jsonl(r.out);
  REQUIRE(out.size() == 1);
  CHECK(out[0]["id"] == "x");
}

TEST_CASE("run: token_ids and usage agree, --unordered writes in finishing order", "[run][unix]") {
  const std::string in = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 12}\n{\"prompt\": \"The cat\", \"max_tokens\": 1}\n";
  auto ordered = test::run_cli({"run", test::testdata(kModel), "--raw", "--batch-size", "2", "-q"}, in);
  auto unordered = test::run_cli({"run", test::testdata(kModel), "--raw", "--batch-size", "2", "--unordered", "-q"}, in);
  REQUIRE(ordered.exit_code == 0);
  REQUIRE(unordered.exit_code == 0);
  auto a = jsonl(ordered.out), b = jsonl(unordered.out);
  REQUIRE(a.size() == 2);
  REQUIRE(b.size() == 2);
  CHECK(a[0]["id"] == 0);
  CHECK(b[0]["id"] == 1);  // one token: done at its first step, before request 0's twelve
  for (const auto& r : a) {
    CHECK(r["usage"]["completion_tokens"] == r["token_ids"].size());
    CHECK(r["usage"]["total_tokens"] == r["usage"]["prompt_tokens"].get<int>() + r["token_ids"].size());
    CHECK_FALSE(r.contains("completion_tokens"));
  }
  CHECK(a[0]["token_ids"] == b[1]["token_ids"]);
}

TEST_CASE("run: OpenAI batch input is answered in the OpenAI batch output shape", "[run][unix]") {
  const std::string in =
      "{\"custom_id\": \"c1\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\", "
      "\"body\": {\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 3}}\n"
      "{\"custom_id\": \"c2\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": {\"model\": \"m\", \"prompt\": \"Once\", "
      "\"max_tokens\": 3}}\n"
      "{\"custom_id\": \"c3\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": {\"prompt\": \"x\", \"top_p\": 5}}\n";
  auto r = test::run_cli({"run", test::testdata("run/qwen2-bpe"), "-q"}, in);
  REQUIRE(r.exit_code == 0);
  auto out = jsonl(r.out);
  REQUIRE(out.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    const json& o = out[i];
    CHECK(o["id"].is_string());
    CHECK(o["custom_id"] == "c" + std::to_string(i + 1));
    CHECK(o.contains("error"));
    REQUIRE(o["response"].is_object());
    CHECK(o["response"]["request_id"].is_string());
    CHECK(o["response"]["status_code"] == (i < 2 ? 200 : 400));
  }
  const json& chat = out[0]["response"]["body"];
  CHECK(chat["object"] == "chat.completion");
  CHECK(chat["choices"][0]["message"]["role"] == "assistant");
  CHECK(chat["choices"][0]["message"]["content"].is_string());
  CHECK(chat["usage"]["completion_tokens"].get<int>() <= 3);
  CHECK(chat["created"].is_number_integer());
  const json& text = out[1]["response"]["body"];
  CHECK(text["object"] == "text_completion");
  CHECK(text["choices"][0]["text"].is_string());
  CHECK(text["choices"][0]["finish_reason"].is_string());
  CHECK_THAT(out[2]["response"]["body"]["error"]["message"].get<std::string>(), Catch::Contains("top_p"));
  // The bodies against the openai package's ChatCompletion / Completion schemas
  // (scripts/make_openai_schema.py, which also validated such output with the types themselves).
  const json schemas = test::read_json(test::testdata("run/openai_schemas.json"));
  for (const json* body : {&chat, &text}) {
    std::vector<std::string> why;
    const json& schema = schemas[(*body)["object"].get<std::string>()];
    check_schema(*body, schema, schema, "body", why);
    for (const auto& w : why) FAIL_CHECK(w);
  }
  // A /v1/completions prompt is raw text: the same tokens as --raw, not the chat template's.
  auto raw = test::run_cli({"run", test::testdata("run/qwen2-bpe"), "--raw", "--max-tokens", "3", "-q"}, "Once\n");
  REQUIRE(raw.exit_code == 0);
  CHECK(jsonl(raw.out)[0]["usage"]["prompt_tokens"] == text["usage"]["prompt_tokens"]);
}

TEST_CASE("run: sampling flags out of range are usage errors, request fields name field and line", "[run][unix]") {
  const std::string m = test::testdata(kModel);
  for (std::vector<std::string> bad : {std::vector<std::string>{"--temperature", "-1"}, {"--temperature", "nan"}, {"--top-p", "5"},
                                       {"--top-p", "0"}, {"--min-p", "2"}, {"--repetition-penalty", "0"}, {"--max-tokens", "0"},
                                       {"--top-k", "-1"}}) {
    std::vector<std::string> args = {"run", m, "-q"};
    args.insert(args.end(), bad.begin(), bad.end());
    auto r = test::run_cli(args, "hi\n");
    INFO(bad[0] << " " << bad[1]);
    CHECK(r.exit_code == 2);
    CHECK(r.out.empty());
    CHECK_THAT(r.err, Catch::Contains(bad[0]));
  }
  auto r = test::run_cli({"run", m, "--raw", "--max-tokens", "2", "-q"}, "hi\n{\"prompt\": \"x\", \"temperature\": -0.5}\n");
  REQUIRE(r.exit_code == 0);
  auto out = jsonl(r.out);
  REQUIRE(out.size() == 2);
  const std::string msg = out[1]["error"]["message"];
  CHECK_THAT(msg, Catch::Contains("line 2") && Catch::Contains("\"temperature\""));
  // A role the chat templates do not render is that request's error, naming the message.
  auto roles = test::run_cli({"run", m, "--max-tokens", "2", "-q"},
                             "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n"
                             "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"wizard\", \"content\": \"x\"}]}\n");
  REQUIRE(roles.exit_code == 0);
  auto role_out = jsonl(roles.out);
  REQUIRE(role_out.size() == 2);
  CHECK(role_out[0]["finish_reason"] == "length");
  CHECK(role_out[1]["finish_reason"] == "error");
  CHECK_THAT(role_out[1]["error"]["message"].get<std::string>(),
             Catch::Contains("line 2") && Catch::Contains("message 2") && Catch::Contains("\"role\"") && Catch::Contains("wizard"));
  auto strict = test::run_cli({"run", m, "--raw", "--max-tokens", "2", "--exit-on-request-error", "-q"},
                              "hi\n{\"prompt\": 1}\n");
  CHECK(strict.exit_code == 2);
  CHECK(jsonl(strict.out).size() == 2);  // every result is still written
}

TEST_CASE("inspect --verify stops on SIGINT with exit 130", "[unix]") {
  test::TempDir dir;
  // A 16 GiB F32 tensor of zeros in a sparse file: reading it takes seconds, creating it none.
  const uint64_t n = uint64_t(1) << 32, bytes = 4 * n;
  std::string header = json({{"w", {{"dtype", "F32"}, {"shape", {n}}, {"data_offsets", {0, bytes}}}}}).dump();
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[size_t(i)] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  const std::string path = dir.file("big.safetensors");
  test::write_file(path, head + header);
  REQUIRE(::truncate(path.c_str(), off_t(8 + header.size() + bytes)) == 0);
  Child c = spawn({"inspect", path, "--verify"}, "/dev/null", dir.file("out"), dir.file("err"));
  CHECK(wait_catches(c.pid, SIGINT));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(c.pid, SIGINT);
  const int code = wait_exit(c.pid, 20);
  INFO(test::read_text(dir.file("err")));
  CHECK(code == 130);
  CHECK_THAT(test::read_text(dir.file("err")), Catch::Contains("interrupted by SIGINT"));
}

TEST_CASE("run --raw: special-token text becomes the token, --split-special keeps it text", "[run][unix]") {
  const std::string dir = test::testdata("run/qwen2-bpe");
  const Tokenizer tok = Tokenizer::from_hf_dir(dir);
  const std::string prompt = "hi<|im_end|>";
  const size_t special = tok.encode(prompt, true, /*parse_special=*/true).size();
  const size_t split = tok.encode(prompt, true, /*parse_special=*/false).size();
  REQUIRE(special < split);
  for (bool keep_text : {false, true}) {
    std::vector<std::string> args = {"run", dir, "--raw", "--max-tokens", "1", "-q"};
    if (keep_text) args.push_back("--split-special");
    auto r = test::run_cli(args, prompt + "\n");
    REQUIRE(r.exit_code == 0);
    CHECK(jsonl(r.out).at(0)["usage"]["prompt_tokens"] == (keep_text ? split : special));
  }
}
