// The one UTF-8 sanitizer and the one escaping function (core/text.hpp), and that
// file strings reaching a terminal go through them: a tensor name with ESC sequences
// and newlines prints as one line, --json keeps it exact.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/text.hpp"
#include "tests/helpers.hpp"

using namespace nunchaku;

namespace {

const std::string kFFFD = "\xEF\xBF\xBD";

// A safetensors file with one U8 tensor of 2 bytes named `name` (JSON-escaped here).
std::vector<uint8_t> one_tensor_file(const std::string& name) {
  const std::string header = "{" + nlohmann::json(name).dump() + R"(:{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
  std::vector<uint8_t> b(8);
  for (int i = 0; i < 8; ++i) b[size_t(i)] = uint8_t(header.size() >> (8 * i));
  b.insert(b.end(), header.begin(), header.end());
  b.push_back(1);
  b.push_back(2);
  return b;
}

}  // namespace

TEST_CASE("utf8_replace_invalid: one U+FFFD per maximal invalid subpart", "[hostile][text]") {
  // The example of the Unicode Standard, ch. 3 ("U+FFFD Substitution of Maximal Subparts").
  const std::string in = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  CHECK(utf8_replace_invalid(in) == "a" + kFFFD + kFFFD + kFFFD + "b" + kFFFD + "c" + kFFFD + kFFFD + "d");
  CHECK(utf8_replace_invalid("h\xC3\xA9llo") == "h\xC3\xA9llo");
  CHECK(utf8_replace_invalid("\xC0\xAF") == kFFFD + kFFFD);            // overlong '/'
  CHECK(utf8_replace_invalid("\xED\xA0\x80") == kFFFD + kFFFD + kFFFD);  // a surrogate
  CHECK(first_invalid_utf8("ab\xF4\x90\x80\x80") == 2u);         // past U+10FFFF
  CHECK(first_invalid_utf8("ok \xF0\x9F\x98\x80") == std::string::npos);
}

TEST_CASE("printable: controls escaped, invalid UTF-8 replaced, length capped", "[hostile][text]") {
  CHECK(printable("a\x1b[2J\nb\r\tc\x7f") == "a\\x1B[2J\\nb\\r\\tc\\x7F");
  CHECK(printable(std::string("nul\0x", 5)) == "nul\\x00x");
  CHECK(printable("c1 \xC2\x85 end") == "c1 \\x85 end");                      // NEL, a C1 control
  CHECK(printable("rtl \xE2\x80\xAE" "evil") == "rtl \\u{202E}evil");         // RIGHT-TO-LEFT OVERRIDE
  CHECK(printable("bad \xFF byte") == "bad " + kFFFD + " byte");
  CHECK(printable("caf\xC3\xA9 \xE6\x97\xA5") == "caf\xC3\xA9 \xE6\x97\xA5");  // printable UTF-8 untouched
  CHECK(printable("back\\slash") == "back\\slash");
  const std::string esc = printable("x\x1b\n");
  CHECK(printable(esc) == esc);
  // Capped at 200 bytes of output by default, cut at a character boundary, then "...".
  const std::string long_name(10'000, 'n');
  CHECK(printable(long_name) == std::string(200, 'n') + "...");
  std::string accents;
  for (int i = 0; i < 150; ++i) accents += "\xC3\xA9";  // 300 bytes of 2-byte characters
  CHECK(printable(accents) == accents.substr(0, 200) + "...");
  std::string ten_newlines;
  for (int i = 0; i < 10; ++i) ten_newlines += "\\n";
  CHECK(printable(std::string(300, '\n'), 20) == ten_newlines + "...");  // escapes are never cut in half
  CHECK(printable(std::string(300, '\n'), 21) == ten_newlines + "...");
}

TEST_CASE("Error lines escape what came from the file, message() stays exact", "[hostile][text]") {
  const std::string name = "w\x1b]0;owned\x07\nnunchaku: forged line";
  Error e("x.y", "bad \"" + name + "\"", {.file = "m\n.safetensors", .tensor = name});
  const std::string line = e.what();
  CHECK(line.find('\n') == std::string::npos);
  CHECK(line.find('\x1b') == std::string::npos);
  CHECK(line.find('\x07') == std::string::npos);
  CHECK(line == "m\\n.safetensors: tensor 'w\\x1B]0;owned\\x07\\nnunchaku: forged line': bad \"w\\x1B]0;owned\\x07\\nnunchaku: forged line\"");
  CHECK(e.message() == "bad \"" + name + "\"");
  // A 10 MB string is not echoed whole.
  Error big("x.y", std::string(10'000'000, 'd'));
  CHECK(std::string(big.what()).size() < 5000);
}

TEST_CASE("inspect: a tensor name with ESC and newlines prints as one line, --json keeps it", "[hostile][text][cli]") {
  test::TempDir dir;
  const std::string name = "evil\x1b[2J\x1b[31m\nwarning: forged\r";
  const std::string path = dir.file("evil.safetensors");
  test::write_file(path, one_tensor_file(name));
  auto r = test::run_cli({"inspect", "--tensors", path});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find('\x1b') == std::string::npos);
  CHECK(r.out.find('\r') == std::string::npos);
  CHECK(r.out.find("evil\\x1B[2J\\x1B[31m\\nwarning: forged\\r") != std::string::npos);
  CHECK(r.out.find("\nwarning: forged") == std::string::npos);
  auto j = test::run_cli({"inspect", "--json", path});
  REQUIRE(j.exit_code == 0);
  CHECK(nlohmann::json::parse(j.out)["tensors"][0]["name"] == name);
}

TEST_CASE("run --plan: a 10 MB device string is cut to a name's length, escaped, in one line", "[hostile][text][cli]") {
  test::TempDir dir;
  const std::string device = std::string(10'000'000, 'x') + "\x1b[2J";
  test::write_file(dir.file("plan.json"), nlohmann::json{{"modules", {{"model.embed_tokens\n", device}}}}.dump());
  for (const char* cmd : {"run", "load"}) {
    INFO(cmd);
    auto r = test::run_cli({cmd, test::testdata("run/llama-spm"), "--plan", dir.file("plan.json")}, "hi\n");
    CHECK(r.exit_code == 2);
    CHECK(r.err.find('\n') == r.err.size() - 1);
    CHECK(r.err.find('\x1b') == std::string::npos);
    CHECK(r.err.size() < 2 * kNameShown + 300);  // the device and the module name, each capped
    CHECK(r.err.find("unknown device 'xxx") != std::string::npos);
    CHECK(r.err.find("...' for module 'model.embed_tokens\\n'") != std::string::npos);
  }
}
