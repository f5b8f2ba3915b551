// Throughput of encode/decode, hidden from the normal run (tag [.tokenizer_bench]);
// scripts/bench_tokenizer.sh runs it next to HF tokenizers on the same text:
//   NUNCHAKU_BENCH_TOKENIZER=<hf dir> NUNCHAKU_BENCH_TEXT=<file> nunchaku_tests "[.tokenizer_bench]"
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "tests/helpers.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/unicode_norm.hpp"

using namespace nunchaku;

TEST_CASE("tokenizer: encode/decode throughput", "[.tokenizer_bench]") {
  const char* dir = std::getenv("NUNCHAKU_BENCH_TOKENIZER");
  const char* file = std::getenv("NUNCHAKU_BENCH_TEXT");
  if (!dir || !file) {
    WARN("set NUNCHAKU_BENCH_TOKENIZER and NUNCHAKU_BENCH_TEXT");
    return;
  }
  const std::string text = test::read_text(file);
  Tokenizer tok = Tokenizer::from_hf_dir(dir);
  using clock = std::chrono::steady_clock;
  std::vector<int32_t> ids;
  double best_enc = 1e30, best_dec = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = clock::now();
    ids = tok.encode(text, false, false);
    auto t1 = clock::now();
    std::string back = tok.decode(ids, false);
    auto t2 = clock::now();
    best_enc = std::min(best_enc, std::chrono::duration<double>(t1 - t0).count());
    best_dec = std::min(best_dec, std::chrono::duration<double>(t2 - t1).count());
  }
  // The NFC quick check alone (what an NFC normalizer adds to encode on normalized text).
  double best_nfc = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    std::string copy = text;
    auto t0 = clock::now();
    normalize_in_place(copy, NormForm::NFC);
    best_nfc = std::min(best_nfc, std::chrono::duration<double>(clock::now() - t0).count());
  }
  std::printf("nunchaku encode_s=%.6f decode_s=%.6f nfc_s=%.6f tokens=%zu bytes=%zu\n", best_enc, best_dec, best_nfc, ids.size(),
              text.size());
  CHECK(!ids.empty());
}
