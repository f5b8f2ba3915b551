// convert --names hf|gguf against an independent reference: testdata/models/llama-gguf/model.gguf
// holds the weights of testdata/models/llama written by gguf-py under llama.cpp's names, with
// Q/K rows permuted as convert_hf_to_gguf does (scripts/make_testdata.py), token_embd and
// layer 0 in F16, layer 1 and the norms in F32, output in Q8_0 (gguf.quants.quantize).
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>

#include "convert/names.hpp"
#include "core/file.hpp"
#include "format/open.hpp"
#include "tests/helpers.hpp"

using namespace nunchaku;
namespace fs = std::filesystem;

namespace {

const std::string kHF = "models/llama", kGGUF = "models/llama-gguf/model.gguf";

std::string bytes_of(const Checkpoint& ck, const TensorInfo& t) {
  std::string b(t.nbytes, '\0');
  File::open_read_only(ck.files[t.file].path).read_at(t.offset, b.data(), b.size());
  return b;
}

std::set<std::string> names(const Checkpoint& ck) {
  std::set<std::string> s;
  for (const auto& t : ck.tensors) s.insert(t.name);
  return s;
}

// Tensors of `ref` stored as `dtype` have the same bytes in `out` under the same name; returns how many.
int same_where(const Checkpoint& out, const Checkpoint& ref, DType dtype) {
  int n = 0;
  for (const auto& r : ref.tensors) {
    if (r.dtype != dtype) continue;
    INFO(r.name);
    const TensorInfo* o = out.find(r.name);
    REQUIRE(o);
    CHECK(o->dtype == dtype);
    CHECK(o->shape == r.shape);
    CHECK(bytes_of(out, *o) == bytes_of(ref, r));
    ++n;
  }
  return n;
}

test::RunResult run_convert(const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"convert"};
  a.insert(a.end(), extra.begin(), extra.end());
  a.push_back("-q");
  return test::run_cli(a);
}

}  // namespace

TEST_CASE("convert --names: the Q/K row permutation is convert_hf_to_gguf's and its inverse", "[convert][names]") {
  // head_dim 8: HF rows (0..3 | 4..7) = two halves; GGUF interleaves them: 0 4 1 5 2 6 3 7.
  const uint64_t want[] = {0, 4, 1, 5, 2, 6, 3, 7};
  for (uint64_t r = 0; r < 8; ++r) {
    CHECK(convert::qk_source_row(r, 8, true) == want[r]);
    CHECK(convert::qk_source_row(want[r], 8, false) == r);
    CHECK(convert::qk_source_row(16 + r, 8, true) == 16 + want[r]);  // third head
  }
}

TEST_CASE("convert --names gguf: HF llama gives gguf-py's tensors byte for byte", "[convert][names]") {
  const Checkpoint ref = open_checkpoint(test::testdata(kGGUF));
  test::TempDir d;
  auto r = run_convert({test::testdata(kHF), d.file("f32.gguf"), "--names", "gguf", "--verify"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const Checkpoint f32 = open_checkpoint(d.file("f32.gguf"));
  CHECK(names(f32) == names(ref));
  CHECK(same_where(f32, ref, DType::F32) == 12);  // layer 1's matrices (Q, K permuted) and the norms

  r = run_convert({test::testdata(kHF), d.file("f16.gguf"), "--names", "gguf", "--dtype", "fp16"});
  REQUIRE(r.exit_code == 0);
  CHECK(same_where(open_checkpoint(d.file("f16.gguf")), ref, DType::F16) == 8);  // token_embd, layer 0

  r = run_convert({test::testdata(kHF), d.file("q8.gguf"), "--names", "gguf", "--dtype", "q8_0"});
  REQUIRE(r.exit_code == 0);
  CHECK(same_where(open_checkpoint(d.file("q8.gguf")), ref, DType::Q8_0) == 1);  // output
}

TEST_CASE("convert --names hf: the GGUF gives transformers' names and rows back", "[convert][names]") {
  const Checkpoint hf = open_checkpoint(test::testdata(kHF));
  test::TempDir d;
  auto r = run_convert({test::testdata(kGGUF), d.file("hf"), "--names", "hf", "--dtype", "fp32", "--verify"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const Checkpoint out = open_checkpoint(d.file("hf"));
  CHECK(names(out) == names(hf));
  // Layer 1 and the norms were F32 in the GGUF: exactly the HF tensors again.
  int exact = 0;
  for (const auto& t : hf.tensors)
    if (t.name.find("layers.1.") != std::string::npos || t.name.ends_with("norm.weight")) {
      INFO(t.name);
      const TensorInfo* o = out.find(t.name);
      REQUIRE(o);
      CHECK(bytes_of(out, *o) == bytes_of(hf, t));
      ++exact;
    }
  CHECK(exact == 12);

  // HF -> GGUF -> HF is the identity on every byte.
  REQUIRE(run_convert({test::testdata(kHF), d.file("m.gguf"), "--names", "gguf"}).exit_code == 0);
  REQUIRE(run_convert({d.file("m.gguf"), d.file("back"), "--names", "hf"}).exit_code == 0);
  const Checkpoint back = open_checkpoint(d.file("back"));
  REQUIRE(back.tensors.size() == hf.tensors.size());
  for (const auto& t : hf.tensors) {
    INFO(t.name);
    const TensorInfo* o = back.find(t.name);
    REQUIRE(o);
    CHECK(bytes_of(back, *o) == bytes_of(hf, t));
  }
}

TEST_CASE("convert --names: refused before anything is written", "[convert][names]") {
  test::TempDir d;
  auto r = run_convert({test::testdata("models/gpt2"), d.file("g.gguf"), "--names", "gguf"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--names maps the architectures the engine runs, not 'gpt2'"));
  r = run_convert({test::testdata(kHF), d.file("x"), "--names", "llama"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--names takes hf or gguf"));
  CHECK(fs::is_empty(d.path));
}
