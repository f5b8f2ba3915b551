// tokenizer.json size limits (tokenizer/json_prescan.hpp): a file past a limit is refused
// by the streaming pre-pass, naming the field and the byte offset of the first value past
// it, before any DOM is built; a tokenizer of a real model's size still loads.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "tests/helpers.hpp"
#include "tokenizer/json_prescan.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace nunchaku;

namespace {

struct Refusal {
  std::string code, message;
  uint64_t offset = 0;
};

Refusal refusal_of(const std::string& text) {
  try {
    (void)Tokenizer::from_hf_json(text, "big/tokenizer.json");
  } catch (const Error& e) {
    CHECK(e.exit_code() == 2);
    CHECK(e.context().file == "big/tokenizer.json");
    return {e.code(), e.message(), e.context().offset.value_or(UINT64_MAX)};
  }
  return {"no error", "", 0};
}

// {"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[<n times "a b">]}}
// `first_past` is set to the offset of entry #limit (0-based), the first one past it.
std::string with_merges(uint64_t n, uint64_t limit, size_t& first_past) {
  std::string s = R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[)";
  s.reserve(s.size() + n * 6 + 8);
  for (uint64_t i = 0; i < n; ++i) {
    if (i) s += ',';
    if (i == limit) first_past = s.size();
    s += "\"a b\"";
  }
  return s + "]}}";
}

// A Llama-3-sized byte-free BPE: 64 letters, all 4,096 pairs, then triples up to 128,000
// ids; each pair has one merge, each triple two ("xy z" and "x yz"): 251,776 merges, more
// merges than tokens as in Llama-3 (128,000 / 280,147). 256 special added tokens after.
struct RealSized {
  std::string json;
  std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  static constexpr int kVocab = 128000, kAdded = 256;
  int merges = 0;
  RealSized() {
    std::vector<std::string> tokens;
    for (char c : alphabet) tokens.emplace_back(1, c);
    for (char x : alphabet)
      for (char y : alphabet) tokens.push_back(std::string{x, y});
    for (char x : alphabet)
      for (char y : alphabet)
        for (char z : alphabet)
          if (tokens.size() < kVocab) tokens.push_back(std::string{x, y, z});
    json = R"({"version":"1.0","added_tokens":[)";
    for (int i = 0; i < kAdded; ++i)
      json += (i ? "," : "") + std::string(R"({"id":)") + std::to_string(kVocab + i) +
              R"(,"content":"<|reserved_special_token_)" + std::to_string(i) +
              R"(|>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true})";
    json += R"(],"model":{"type":"BPE","vocab":{)";
    for (size_t i = 0; i < tokens.size(); ++i) json += (i ? ",\"" : "\"") + tokens[i] + "\":" + std::to_string(i);
    json += R"(},"merges":[)";
    auto merge = [&](const std::string& a, const std::string& b) {
      json += (merges++ ? ",[\"" : "[\"") + a + "\",\"" + b + "\"]";
    };
    for (size_t i = 64; i < tokens.size(); ++i) {
      const std::string& t = tokens[i];
      if (t.size() == 2) merge(t.substr(0, 1), t.substr(1));
    }
    for (size_t i = 64; i < tokens.size(); ++i) {
      const std::string& t = tokens[i];
      if (t.size() == 3) {
        merge(t.substr(0, 2), t.substr(2));
        merge(t.substr(0, 1), t.substr(1));
      }
    }
    json += "]}}";
  }
};

}  // namespace

TEST_CASE("tokenizer.json limits: one merge past the limit is refused, naming field and offset", "[tokenizer][hostile]") {
  size_t at = 0;
  const std::string past = with_merges(kMaxTokenizerMerges + 1, kMaxTokenizerMerges, at);
  Refusal r = refusal_of(past);
  CHECK(r.code == "tokenizer.too_large");
  CHECK(r.message.find("model.merges") != std::string::npos);
  CHECK(r.offset == at);
  CHECK(past.compare(at, 5, "\"a b\"") == 0);
  // At the limit exactly the pre-pass lets it through, and it loads (a repeated merge is
  // legal: the first rank wins).
  size_t unused = 0;
  CHECK(refusal_of(with_merges(kMaxTokenizerMerges, kMaxTokenizerMerges, unused)).code == "no error");
}

TEST_CASE("tokenizer.json limits: vocab, added tokens, values, depth and string length", "[tokenizer][hostile]") {
  SECTION("model.vocab: the offset is the first key past the limit") {
    std::string s = R"({"model":{"type":"BPE","vocab":{)";
    size_t at = 0;
    for (uint64_t i = 0; i <= kMaxTokenizerVocab; ++i) {
      if (i) s += ',';
      if (i == kMaxTokenizerVocab) at = s.size();
      s += "\"t" + std::to_string(i) + "\":" + std::to_string(i);
    }
    s += "}}}";
    Refusal r = refusal_of(s);
    CHECK(r.code == "tokenizer.too_large");
    CHECK(r.message.find("model.vocab") != std::string::npos);
    CHECK(r.offset == at);
    CHECK(s.compare(at, 9, "\"t1048576") == 0);
  }
  SECTION("added_tokens") {
    std::string s = R"({"added_tokens":[)";
    size_t at = 0;
    for (uint64_t i = 0; i <= kMaxTokenizerAdded; ++i) {
      if (i) s += ',';
      if (i == kMaxTokenizerAdded) at = s.size();
      s += "{}";
    }
    s += R"(],"model":{"vocab":{"a":0}}})";
    Refusal r = refusal_of(s);
    CHECK(r.code == "tokenizer.too_large");
    CHECK(r.message.find("added_tokens") != std::string::npos);
    CHECK(r.offset == at);
  }
  SECTION("values anywhere in the file") {
    std::string s = R"({"junk":[)";
    size_t at = 0;
    // values: the top object, the array, then its elements: #kMaxJsonValues - 2 is one too many.
    for (uint64_t i = 0; i + 2 <= kMaxJsonValues; ++i) {
      if (i) s += ',';
      if (i + 2 == kMaxJsonValues) at = s.size();
      s += "0";
    }
    s += "]}";
    Refusal r = refusal_of(s);
    CHECK(r.code == "tokenizer.too_large");
    CHECK(r.message.find("JSON values") != std::string::npos);
    CHECK(r.offset == at);
  }
  SECTION("nesting: the offset is the first bracket past the limit, the message has its path") {
    std::string s = R"({"normalizer":)";
    const size_t at = s.size() + kMaxJsonDepth - 1;  // the top object is level 1
    s += std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']') + "}";
    Refusal r = refusal_of(s);
    CHECK(r.code == "tokenizer.too_large");
    CHECK(r.message.find("normalizer[0][0]") != std::string::npos);
    CHECK(r.offset == at);
    // One level less parses (and fails later for what it is).
    std::string ok = R"({"normalizer":)" + std::string(kMaxJsonDepth - 1, '[') + std::string(kMaxJsonDepth - 1, ']') + "}";
    CHECK(refusal_of(ok).code != "tokenizer.too_large");
  }
  SECTION("one string longer than the limit") {
    const std::string s = R"({"model":{"type":"BPE","vocab":{"a":0},"merges":["a a", ")" + std::string(kMaxJsonStringBytes + 1, 'x') + "\"]}}";
    Refusal r = refusal_of(s);
    CHECK(r.code == "tokenizer.too_large");
    CHECK(r.message.find("model.merges[1]") != std::string::npos);
    CHECK(r.offset == s.find("\"xxx"));
  }
  SECTION("broken JSON: the offset is where the parser stopped") {
    const std::string s = R"({"model": {"vocab": {"a": 0,}}})";
    Refusal r = refusal_of(s);
    CHECK(r.code == "tokenizer.bad_json");
    CHECK(r.offset == s.find(",}") + 1);
  }
}

TEST_CASE("tokenizer.json limits: a Llama-3-sized tokenizer loads and encodes", "[tokenizer]") {
  const RealSized real;
  REQUIRE(real.merges == 4096 + 2 * (RealSized::kVocab - 64 - 4096));
  Tokenizer t = Tokenizer::from_hf_json(real.json, "real/tokenizer.json");
  CHECK(t.vocab_size() == RealSized::kVocab + RealSized::kAdded);
  // Ids by construction: "AB" is pair #1 (64 + 1), "AAC" is triple #2 (64 + 4096 + 2).
  CHECK(t.encode("AB", false, false) == std::vector<int32_t>{65});
  CHECK(t.encode("AAC", false, false) == std::vector<int32_t>{64 + 4096 + 2});
  CHECK(t.encode("<|reserved_special_token_7|>", false, true) == std::vector<int32_t>{RealSized::kVocab + 7});
  CHECK(t.decode(std::vector<int32_t>{65, 64 + 4096 + 2}, false) == "ABAAC");
}

TEST_CASE("tokenizer.json limits: run refuses a 2M-merge tokenizer.json with exit 2, file, field and offset", "[tokenizer][hostile][cli]") {
  test::TempDir dir;
  for (const auto& e : std::filesystem::directory_iterator(test::testdata("run/qwen2-bpe")))
    std::filesystem::copy(e.path(), dir.path / e.path().filename());
  size_t at = 0;
  test::write_file(dir.file("tokenizer.json"), with_merges(2000000, kMaxTokenizerMerges, at));
  test::RunResult r = test::run_cli({"run", dir.path.string(), "-i", "-"}, "hi\n");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find(dir.file("tokenizer.json") + ": at byte " + std::to_string(at) + ": model.merges has more than") !=
        std::string::npos);
}
