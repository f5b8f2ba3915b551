// Unicode normalization (src/tokenizer/unicode_norm.hpp):
//  - NFC/NFD/NFKC/NFKD of the strings in testdata/tokenizers/unicode_norm.json, whose
//    expected forms come from HF tokenizers' normalizers (scripts/make_unicode_norm_fixtures.py);
//  - the normalization-form invariants over every code point (UAX #15: NFC(x) = NFC(NFD(x)),
//    NFKC(x) = NFC(NFKD(x)), ...), idempotence, invalid UTF-8;
//  - tokenizer.json fixtures with NFC/NFD/NFKC/NFKD in their normalizer Sequence: token ids
//    of non-normalized text equal HF tokenizers' ids.
#include <catch2/catch.hpp>

#include <cstdio>
#include <map>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/helpers.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/unicode_norm.hpp"
#include "tokenizer/utf8.hpp"

using namespace nunchaku;
using nlohmann::json;

namespace {

constexpr NormForm kForms[] = {NormForm::NFC, NormForm::NFD, NormForm::NFKC, NormForm::NFKD};
const char* name_of(NormForm f) {
  switch (f) {
    case NormForm::NFC: return "NFC";
    case NormForm::NFD: return "NFD";
    case NormForm::NFKC: return "NFKC";
    case NormForm::NFKD: return "NFKD";
  }
  return "?";
}

// "U+0065 U+0301" for messages; bytes that are not UTF-8 as "\xNN".
std::string code_points(const std::string& s) {
  std::string out;
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) {
      std::snprintf(buf, sizeof buf, "\\x%02X ", c);
      out += buf;
      ++i;
      continue;
    }
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    std::snprintf(buf, sizeof buf, "U+%04X ", cp);
    out += buf;
    i += n;
  }
  return out;
}

std::string utf8(uint32_t cp) {
  std::string out;
  append_utf8(out, cp);
  return out;
}

const json& fixture() {
  static const json j = test::read_json(test::testdata("tokenizers/unicode_norm.json"));
  return j;
}

}  // namespace

TEST_CASE("unicode_norm: NFC/NFD/NFKC/NFKD match HF tokenizers", "[tokenizer]") {
  const json& cases = fixture()["cases"];
  REQUIRE(cases.size() > 300);
  size_t differs_from_unicodedata = 0;
  for (const json& c : cases) {
    const std::string text = c["text"].get<std::string>();
    if (c.contains("unicodedata")) ++differs_from_unicodedata;
    for (NormForm f : kForms) {
      const std::string want = c[name_of(f)].get<std::string>();
      INFO(c["group"].get<std::string>() << " " << name_of(f) << " of " << code_points(text));
      CHECK(code_points(normalize(text, f)) == code_points(want));
      std::string in_place = text;
      CHECK(normalize_in_place(in_place, f) == (want != text));
      CHECK(in_place == want);
    }
  }
  // The fixture's "unicode version" group: Python's newer data gives other results there;
  // we follow tokenizers (see scripts/make_unicode_norm.py).
  CHECK(differs_from_unicodedata > 0);
  CHECK(!unicode_norm_version().empty());
}

TEST_CASE("unicode_norm: fixture strings joined into one text", "[tokenizer]") {
  // A space composes with nothing and nothing reorders across it, so the normal form of
  // the joined text is the join of the normal forms; this crosses the quick check's
  // eight-byte ASCII skip and cuts stretches at safe boundaries inside a long text.
  for (NormForm f : kForms) {
    std::string text, want;
    for (const json& c : fixture()["cases"]) {
      text += " " + c["text"].get<std::string>() + " plain ascii words ";
      want += " " + c[name_of(f)].get<std::string>() + " plain ascii words ";
    }
    INFO(name_of(f));
    CHECK(normalize(text, f) == want);
  }
}

TEST_CASE("unicode_norm: form invariants over every code point", "[tokenizer]") {
  // UAX #15 / NormalizationTest.txt relations, with a base letter before the code point
  // so that marks also meet a starter: NFC(x) = NFC(NFD(x)), NFD(x) = NFD(NFC(x)),
  // NFKC(x) = NFC(NFKD(x)) = NFKC(NFC(x)), NFKD(x) = NFD(NFKD(x)) = NFKD(NFKC(x)), and every
  // form is idempotent.
  // Every code point below U+30000 (all that have a combining class or a decomposition are),
  // then a sample of the rest.
  size_t failures = 0;
  for (uint32_t cp = 0; cp < 0x110000; cp += cp < 0x30000 ? 1 : 251) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    for (const std::string& x : {utf8(cp), "a" + utf8(cp) + utf8(0x0323)}) {
      const std::string nfc = normalize(x, NormForm::NFC), nfd = normalize(x, NormForm::NFD);
      const std::string nfkc = normalize(x, NormForm::NFKC), nfkd = normalize(x, NormForm::NFKD);
      const bool ok = normalize(nfd, NormForm::NFC) == nfc && normalize(nfc, NormForm::NFD) == nfd &&
                      normalize(nfkd, NormForm::NFC) == nfkc && normalize(nfc, NormForm::NFKC) == nfkc &&
                      normalize(nfkd, NormForm::NFD) == nfkd && normalize(nfkc, NormForm::NFKD) == nfkd &&
                      normalize(nfc, NormForm::NFC) == nfc && normalize(nfd, NormForm::NFD) == nfd &&
                      normalize(nfkc, NormForm::NFKC) == nfkc && normalize(nfkd, NormForm::NFKD) == nfkd;
      if (!ok && ++failures <= 10) FAIL_CHECK("invariant broken for " << code_points(x));
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("unicode_norm: invalid UTF-8 passes through", "[tokenizer]") {
  // Each invalid byte stays as it is and acts as a starter that composes with nothing.
  CHECK(normalize("\xFF" "e\xCC\x81", NormForm::NFC) == "\xFF\xC3\xA9");
  CHECK(normalize("e\xCC", NormForm::NFC) == "e\xCC");                 // U+0301 cut short
  CHECK(normalize("e\xFF\xCC\x81", NormForm::NFC) == "e\xFF\xCC\x81");  // the byte blocks composition
  CHECK(normalize("\xED\xA0\x80\xCC\x81", NormForm::NFD) == "\xED\xA0\x80\xCC\x81");  // a surrogate's bytes
  CHECK(normalize("\xC0\xAF\xEF\xAC\x81", NormForm::NFKC) == "\xC0\xAF" "fi");  // overlong '/', then U+FB01
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::string s(rng() % 24, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 4 == 0 ? 0xCC + rng() % 4 : rng() % 256);
    for (NormForm f : kForms) {
      const std::string once = normalize(s, f);
      INFO(name_of(f) << " of " << code_points(s));
      CHECK(normalize(once, f) == once);
    }
  }
}

TEST_CASE("tokenizer: Unicode normalizers in tokenizer.json give HF tokenizers' ids", "[tokenizer]") {
  // testdata/tokenizers/<fixture>/tokenizer.json with its normalizer replaced; the ids
  // are HF tokenizers' encode(text, add_special_tokens=False) of the same file.
  const json& cases = fixture()["tokenizer_cases"];
  REQUIRE(cases.size() >= 40);
  std::map<std::string, Tokenizer> loaded;
  for (const json& c : cases) {
    const std::string fixture_name = c["fixture"].get<std::string>();
    const std::string key = fixture_name + c["normalizer"].dump();
    auto it = loaded.find(key);
    if (it == loaded.end()) {
      json tj = test::read_json(test::testdata("tokenizers/" + fixture_name + "/tokenizer.json"));
      tj["normalizer"] = c["normalizer"];
      it = loaded.emplace(key, Tokenizer::from_hf_json(tj.dump(), fixture_name + "/tokenizer.json")).first;
    }
    const std::string text = c["text"].get<std::string>();
    INFO(fixture_name << " normalizer " << c["normalizer"].dump() << "\ntext " << code_points(text));
    CHECK(it->second.encode(text, /*add_special=*/false, /*parse_special=*/true) == c["ids"].get<std::vector<int32_t>>());
  }
}
