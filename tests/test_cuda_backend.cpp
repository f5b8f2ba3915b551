// The CUDA backend against the CPU backend (the oracle), op by op on seeded random inputs,
// one case per op and weight type, then whole models against the transformers goldens and
// the CPU engine's greedy tokens. Needs a CUDA device: without one every case reports
// "skipped: no CUDA device" (scripts/gpu-check.sh fails on that line), except the first,
// which checks the refusal itself.
//
// Tolerances (max |gpu - cpu| over a buffer, relative to the buffer's largest |cpu| value):
//   exact (0): embedding gathers (same dequantization function, no arithmetic after it);
//   1e-6: norms, residual adds, SiLU, RoPE (double-precision sums and cos/sin on both
//         sides; the device's expf/sqrt differ from glibc's by an ulp or two);
//   1e-4: matmuls and attention (fp32 sums of up to 512 products in a different order:
//         warp-shuffle trees or cuBLAS tiles against the CPU's blocked SIMD sums; the
//         engine's goldens use the same bound for the same reason, and a wrong pairing,
//         offset or scale moves results by > 1e-2).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "cuda/engine_ops.hpp"
#include "cuda/loader.hpp"
#include "engine/backend.hpp"
#include "engine/backend_split.hpp"
#include "io/convert.hpp"
#include "tests/helpers.hpp"
#include "tests/test_cuda_helpers.hpp"
#include "tests/test_engine_helpers.hpp"

using namespace nunchaku;
using namespace nunchaku::engine;
using namespace nunchaku::test;

namespace {

// q (with a bias of `bias_type`) and gate from XN in one dispatch, then down from Gate, on
// both backends of the rig with the same random weights: within 1e-4.
void check_qkv_and_down(Rig& r, DType t, int64_t T, DType bias_type, std::mt19937& rng) {
  TwinMatrix q(t, r.d.q_dim(), r.d.hidden, rng), gate(t, r.d.inter, r.d.hidden, rng), down(t, r.d.hidden, r.d.inter, rng);
  TwinVec bias(bias_type, r.d.q_dim(), rng);
  r.write(Buf::XN, randn(size_t(T * r.d.hidden), rng));
  const MatmulJob jc[2] = {{&q.cpu, Buf::Q, bias.cpu}, {&gate.cpu, Buf::Gate, {}}};
  const MatmulJob jg[2] = {{&q.gpu, Buf::Q, bias.gpu}, {&gate.gpu, Buf::Gate, {}}};
  r.cpu->matmul(jc, Buf::XN);
  r.gpu->matmul(jg, Buf::XN);
  CHECK(r.diff(Buf::Q, T) < 1e-4);
  CHECK(r.diff(Buf::Gate, T) < 1e-4);
  const MatmulJob dc[1] = {{&down.cpu, Buf::Tmp, {}}};
  const MatmulJob dg[1] = {{&down.gpu, Buf::Tmp, {}}};
  r.cpu->matmul(dc, Buf::Gate);
  r.gpu->matmul(dg, Buf::Gate);
  CHECK(r.diff(Buf::Tmp, T) < 1e-4);
}

const DType kWeightTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                              DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};

const char* norm_name(NormKind k) { return k == NormKind::Rms ? "rms" : k == NormKind::RmsOnePlus ? "rms(1+w)" : "layer"; }

}  // namespace

// The op table is several cases (gathers, norms, element-wise ops and the head; then the
// matmuls, a few weight types per case; then rope, KV and attention, one cache type per case),
// so each stays under 30 s on the emulator in the sanitizer build (the first two parts were
// one case of 42 s there). Every row of the one table is in one of them.
TEST_CASE("cuda ops: the op table, gathers, norms, element-wise ops and the head (against the CPU backend, NMSE bound)",
          "[cuda][ops]") {
  if (!have_gpu()) return;
  std::mt19937 rng(21);
  std::vector<Row> table;
  Rig r;
  const int64_t T = 5;
  set_batch(r, {0, 0, 1, 2, 3}, {0, 1, 0, 0, 0});
  for (DType t : kWeightTypes)
    for (float scale : {1.0f, 5.656854f}) {
      TwinMatrix m(t, r.d.vocab, r.d.hidden, rng);
      row(table, r, "embed", fmt::format("{} x{}", dtype_name(t), scale), Buf::X, T, kExact,
          [&](Backend& b, bool g) { b.embed(g ? m.gpu : m.cpu, scale); });
    }
  for (NormKind k : {NormKind::Rms, NormKind::RmsOnePlus, NormKind::Layer})
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
      TwinVec w(t, r.d.hidden, rng), bias(t, r.d.hidden, rng), wh(t, r.d.head_dim, rng);
      const std::string ty = fmt::format("{} w {}", norm_name(k), dtype_name(t));
      auto n = [&](bool g, const TwinVec& v) { return Norm{g ? v.gpu : v.cpu, k, k == NormKind::Layer ? (g ? bias.gpu : bias.cpu) : VecRef{}}; };
      r.write(Buf::X, randn(size_t(T * r.d.hidden), rng, 3.0f));
      r.write(Buf::Tmp, randn(size_t(T * r.d.hidden), rng));
      r.write(Buf::Q, randn(size_t(T * r.d.q_dim()), rng));
      row(table, r, "norm", ty, Buf::XN, T, kElementwise, [&](Backend& b, bool g) { b.norm(Buf::X, Buf::XN, n(g, w)); });
      row(table, r, "norm per head", ty, Buf::Q, T, kElementwise, [&](Backend& b, bool g) { b.norm(Buf::Q, Buf::Q, n(g, wh)); });
      row(table, r, "add_norm (fused)", ty, Buf::XN, T, kElementwise,
          [&](Backend& b, bool g) { b.add_norm(Buf::X, Buf::Tmp, Buf::XN, n(g, w)); });
      CHECK(nmse(r, Buf::X, T) <= kElementwise);
      const std::vector<int64_t> rows = {4, 1, 3};
      row(table, r, "select_rows", ty, Buf::Sel, 3, kElementwise, [&](Backend& b, bool g) { b.select_rows(rows, n(g, w)); });
    }
  for (Activation a : {Activation::Silu, Activation::GeluTanh}) {
    r.write(Buf::Gate, randn(size_t(T * r.d.inter), rng, 4.0f));
    r.write(Buf::Up, randn(size_t(T * r.d.inter), rng));
    row(table, r, "act_mul", std::string(activation_name(a)), Buf::Gate, T, kElementwise,
        [&](Backend& b, bool) { b.act_mul(Buf::Gate, Buf::Up, a); });
  }
  r.write(Buf::X, randn(size_t(T * r.d.hidden), rng, 3.0f));
  r.write(Buf::Tmp, randn(size_t(T * r.d.hidden), rng));
  row(table, r, "add", "f32", Buf::X, T, kElementwise, [&](Backend& b, bool) { b.add(Buf::X, Buf::Tmp); });
  row(table, r, "scale", "f32 x0.37", Buf::X, T, kElementwise, [&](Backend& b, bool) { b.scale(Buf::X, 0.37f); });
  row(table, r, "softcap", "f32 cap 2.5", Buf::X, T, kElementwise, [&](Backend& b, bool) { b.softcap(Buf::X, 2.5f); });
  {
    TwinMatrix head(DType::Q8_0, r.d.vocab, r.d.hidden, rng);
    TwinVec w(DType::F32, r.d.hidden, rng);
    row(table, r, "head + softcap", "q8_0 cap 30", Buf::Logits, 3, kSums, [&](Backend& b, bool g) {
      const std::vector<int64_t> rows = {0, 2, 4};
      b.select_rows(rows, Norm{g ? w.gpu : w.cpu});
      b.head(g ? head.gpu : head.cpu, 3);
      b.softcap(Buf::Logits, 30.0f);
    });
  }
  print(table);
}

namespace {

// The op table's matmul rows for weight types `types`: GEMV batches of 1 and 3 tokens and a
// cuBLAS batch of 20, plain and fused with each activation.
void op_table_matmuls(std::initializer_list<DType> types, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Row> table;
  Rig r;
  for (DType t : types)
    for (int64_t B : {1, 3, 20}) {
      std::vector<int32_t> slot(size_t(B), 0);
      std::vector<int64_t> pos(static_cast<size_t>(B));
      for (int64_t i = 0; i < B; ++i) pos[size_t(i)] = i;
      set_batch(r, slot, pos);
      TwinMatrix gate(t, r.d.inter, r.d.hidden, rng), up(t, r.d.inter, r.d.hidden, rng);
      r.write(Buf::XN, randn(size_t(B * r.d.hidden), rng));
      row(table, r, fmt::format("matmul T={}", B), std::string(dtype_name(t)), Buf::Gate, B, kSums, [&](Backend& b, bool g) {
        const MatmulJob j[1] = {{g ? &gate.gpu : &gate.cpu, Buf::Gate, {}}};
        b.matmul(j, Buf::XN);
      });
      for (Activation a : {Activation::Silu, Activation::GeluTanh})
        row(table, r, fmt::format("matmul_act T={}", B), fmt::format("{} {}", dtype_name(t), activation_name(a)), Buf::Gate, B,
            kSums, [&](Backend& b, bool g) {
              b.matmul_act({g ? &gate.gpu : &gate.cpu, Buf::Gate, {}}, {g ? &up.gpu : &up.cpu, Buf::Up, {}}, Buf::XN, a);
            });
    }
  print(table);
}

}  // namespace

// The op table's matmul rows in four cases by weight type (two cases of five and six types
// were 28 s and 30+ s under the sanitizers).
TEST_CASE("cuda ops: the op table, matmul and matmul_act for f32, f16 and bf16 weights (NMSE bound)", "[cuda][ops]") {
  if (!have_gpu()) return;
  op_table_matmuls({DType::F32, DType::F16, DType::BF16}, 23);
}

TEST_CASE("cuda ops: the op table, matmul and matmul_act for q8_0, q4_0 and q4_1 weights (NMSE bound)", "[cuda][ops]") {
  if (!have_gpu()) return;
  op_table_matmuls({DType::Q8_0, DType::Q4_0, DType::Q4_1}, 24);
}

TEST_CASE("cuda ops: the op table, matmul and matmul_act for q5_0 and q5_1 weights (NMSE bound)", "[cuda][ops]") {
  if (!have_gpu()) return;
  op_table_matmuls({DType::Q5_0, DType::Q5_1}, 26);
}

TEST_CASE("cuda ops: the op table, matmul and matmul_act for q4_k, q5_k and q6_k weights (NMSE bound)", "[cuda][ops]") {
  if (!have_gpu()) return;
  op_table_matmuls({DType::Q4_K, DType::Q5_K, DType::Q6_K}, 27);
}

namespace {

// The rope / KV ring / attention rows of the op table for a `kv` cache and rotary `style`:
// full and partial rotary, each over three steps (a prefill, one past the ring, a mixed batch).
void op_table_attention(DType kv, RopeStyle style, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Row> table;
  for (int64_t rot : {int64_t(0), int64_t(32)}) {
    // Layer 1 slides over 4 positions: its cache is a ring of 4 + 32 - 1 = 35 of the 64.
    Rig r(kv, style, 0, 8, {0, 4}, rot);
    REQUIRE(r.mem.kv_positions == std::vector<int64_t>{64, 35});
    const std::string ty = fmt::format("kv {} {} rot {}", dtype_name(kv), style == RopeStyle::NeoX ? "neox" : "inter",
                                       rot ? rot : r.d.head_dim);
    TwinVec qn(DType::BF16, r.d.head_dim, rng), kn(DType::F32, r.d.head_dim, rng), sinks(DType::F32, r.d.heads, rng);
    // Slot 1: positions 0..29, then 30..45 (past the ring: indices wrap), then 46 beside
    // slot 0's first token.
    struct Step {
      std::vector<int32_t> slot;
      std::vector<int64_t> pos;
    };
    std::vector<Step> steps(3);
    for (int64_t p = 0; p < 30; ++p) steps[0].slot.push_back(1), steps[0].pos.push_back(p);
    for (int64_t p = 30; p < 46; ++p) steps[1].slot.push_back(1), steps[1].pos.push_back(p);
    steps[2] = {{1, 0}, {46, 0}};
    for (size_t s = 0; s < steps.size(); ++s) {
      const int64_t T = int64_t(steps[s].slot.size());
      set_batch(r, steps[s].slot, steps[s].pos);
      for (int table_ix : {0, 1}) {
        r.write(Buf::Q, randn(size_t(T * r.d.q_dim()), rng));
        row(table, r, fmt::format("rope table {} step {}", table_ix, s), ty, Buf::Q, T, kElementwise,
            [&](Backend& b, bool) { b.rope(Buf::Q, table_ix); });
      }
      for (int64_t layer : {0, 1}) {
        r.write(Buf::Q, randn(size_t(T * r.d.q_dim()), rng));
        r.write(Buf::K, randn(size_t(T * r.d.kv_dim()), rng));
        r.write(Buf::V, randn(size_t(T * r.d.kv_dim()), rng));
        const NormKind k = layer ? NormKind::RmsOnePlus : NormKind::Rms;
        row(table, r, fmt::format("rope_and_cache L{} step {}", layer, s), ty + " qk " + norm_name(k), Buf::K, T,
            kElementwise, [&](Backend& b, bool g) {
              b.rope_and_cache(layer, {g ? qn.gpu : qn.cpu, k}, {g ? kn.gpu : kn.cpu, k}, int(layer));
            });
        CHECK(nmse(r, Buf::Q, T) <= kElementwise);
        const int64_t window = layer ? 4 : 0;
        for (float cap : {0.0f, 1.5f})
          for (bool sink : {false, true})
            row(table, r, fmt::format("attention L{} step {}", layer, s),
                fmt::format("{} w{} cap {} sink {}", ty, window, cap, sink), Buf::Att, T, kSums,
                [&](Backend& b, bool g) {
                  b.attention(layer, {window, 0.3f, cap, sink ? (g ? sinks.gpu : sinks.cpu) : VecRef{}});
                });
      }
      // The primitives the fused op stands for: store_kv after rope, into the ring.
      r.write(Buf::K, randn(size_t(T * r.d.kv_dim()), rng));
      r.write(Buf::V, randn(size_t(T * r.d.kv_dim()), rng));
      row(table, r, fmt::format("store_kv + attention L1 step {}", s), ty, Buf::Att, T, kSums, [&](Backend& b, bool) {
        b.rope(Buf::K, 1);
        b.store_kv(1);
        b.attention(1, {4, 0, 0, {}});
      });
    }
  }
  print(table);
}

}  // namespace

// One case per cache type and rotary style, so each stays under 30 s on the emulator in the
// sanitizer build (the four were one case of 42 s there, two of 42 s each at a higher load).
TEST_CASE("cuda ops: NeoX rope (tables, partial rotary), f32 KV ring and attention (window, softcap, sinks) against the CPU",
          "[cuda][ops]") {
  if (!have_gpu()) return;
  op_table_attention(DType::F32, RopeStyle::NeoX, 22);
}

TEST_CASE("cuda ops: interleaved rope (tables, partial rotary), f32 KV ring and attention (window, softcap, sinks) against the CPU",
          "[cuda][ops]") {
  if (!have_gpu()) return;
  op_table_attention(DType::F32, RopeStyle::Interleaved, 28);
}

TEST_CASE("cuda ops: NeoX rope (tables, partial rotary), f16 KV ring and attention (window, softcap, sinks) against the CPU",
          "[cuda][ops]") {
  if (!have_gpu()) return;
  op_table_attention(DType::F16, RopeStyle::NeoX, 25);
}

TEST_CASE("cuda ops: interleaved rope (tables, partial rotary), f16 KV ring and attention (window, softcap, sinks) against the CPU",
          "[cuda][ops]") {
  if (!have_gpu()) return;
  op_table_attention(DType::F16, RopeStyle::Interleaved, 29);
}

TEST_CASE("cuda backend: without a device (or without CUDA) it refuses with engine.no_cuda", "[cuda]") {
  std::string why;
  if (cuda::engine_available(&why)) {
    // With a device, an index past the last one is the refusal to check.
    try {
      make_cuda_backend(1000);
      FAIL("cuda:1000 accepted");
    } catch (const Error& e) {
      CHECK(e.code() == "engine.no_cuda");
    }
    return;
  }
  try {
    make_cuda_backend(0);
    FAIL("a CUDA backend started without a device");
  } catch (const Error& e) {
    CHECK(e.code() == "engine.no_cuda");
    CHECK(std::string(e.what()).find("cuda:0") != std::string::npos);
  }
}

TEST_CASE("cuda backend: embedding, norms, residual adds, SiLU and row selection equal the CPU backend", "[cuda]") {
  if (!have_gpu()) return;
  std::mt19937 rng(11);
  Rig r;
  r.tokens({5, 319, 0, 17, 5}, {0, 0, 1, 2, 3}, {0, 1, 0, 0, 0});
  for (DType t : kWeightTypes) {  // Q4_1/Q5_1/Q4_K/Q5_K: a*b+c that nvcc must not fuse
    INFO("embedding " << dtype_name(t) << ", table " << r.d.vocab << " x " << r.d.hidden);
    TwinMatrix table(t, r.d.vocab, r.d.hidden, rng);
    r.cpu->embed(table.cpu, 1.0f);
    r.gpu->embed(table.gpu, 1.0f);
    CHECK(r.diff(Buf::X, 5) == 0.0);
  }
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    INFO("norm weights " << dtype_name(t));
    TwinVec w(t, r.d.hidden, rng);
    r.write(Buf::X, randn(size_t(5 * r.d.hidden), rng, 3.0f));
    r.write(Buf::Tmp, randn(size_t(5 * r.d.hidden), rng));
    r.cpu->norm(Buf::X, Buf::XN, {w.cpu});
    r.gpu->norm(Buf::X, Buf::XN, {w.gpu});
    CHECK(r.diff(Buf::XN, 5) < 1e-6);
    r.cpu->add_norm(Buf::X, Buf::Tmp, Buf::XN, {w.cpu});
    r.gpu->add_norm(Buf::X, Buf::Tmp, Buf::XN, {w.gpu});
    CHECK(r.diff(Buf::X, 5) < 1e-6);
    CHECK(r.diff(Buf::XN, 5) < 1e-6);
    r.cpu->add(Buf::X, Buf::Tmp);
    r.gpu->add(Buf::X, Buf::Tmp);
    CHECK(r.diff(Buf::X, 5) < 1e-6);
    const std::vector<int64_t> rows = {4, 1, 3};
    r.cpu->select_rows(rows, {w.cpu});
    r.gpu->select_rows(rows, {w.gpu});
    CHECK(r.diff(Buf::Sel, 3) < 1e-6);
  }
  r.write(Buf::Gate, randn(size_t(5 * r.d.inter), rng, 4.0f));
  r.write(Buf::Up, randn(size_t(5 * r.d.inter), rng));
  r.cpu->act_mul(Buf::Gate, Buf::Up, Activation::Silu);
  r.gpu->act_mul(Buf::Gate, Buf::Up, Activation::Silu);
  CHECK(r.diff(Buf::Gate, 5) < 1e-6);
}

TEST_CASE("cuda backend: matmul for every weight type, decode (GEMV) and prefill (cuBLAS) batches, with bias",
          "[cuda]") {
  if (!have_gpu()) return;
  std::mt19937 rng(12);
  Rig r;
  for (int64_t T : {3, 20}) {
    const size_t n = static_cast<size_t>(T);
    std::vector<int32_t> id(n, 0), slot(n, 0);
    std::vector<int64_t> pos(n, 0);
    for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = t;
    r.tokens(id, slot, pos);
    for (DType t : kWeightTypes) {
      INFO(dtype_name(t) << " weights, " << T << " tokens (" << (T >= cuda::kGemmMinTokens ? "cuBLAS" : "GEMV") << ")");
      check_qkv_and_down(r, t, T, DType::BF16, rng);
    }
  }
  {
    INFO("16-bit weights 2 bytes off 16-byte alignment (the GEMV's scalar-load path), 3 tokens");
    std::vector<int32_t> id(3, 0), slot(3, 0);
    std::vector<int64_t> pos = {0, 1, 2};
    r.tokens(id, slot, pos);
    for (DType t : {DType::F16, DType::BF16}) {
      TwinMatrix q(t, r.d.q_dim(), r.d.hidden, rng, 2);
      r.write(Buf::XN, randn(size_t(3 * r.d.hidden), rng));
      const MatmulJob jc[1] = {{&q.cpu, Buf::Q, {}}};
      const MatmulJob jg[1] = {{&q.gpu, Buf::Q, {}}};
      r.cpu->matmul(jc, Buf::XN);
      r.gpu->matmul(jg, Buf::XN);
      CHECK(r.diff(Buf::Q, 3) < 1e-4);
    }
  }
  INFO("head (321 rows) over 3 selected rows, Q8_0");
  TwinMatrix head(DType::Q8_0, r.d.vocab, r.d.hidden, rng);
  r.write(Buf::Sel, randn(size_t(3 * r.d.hidden), rng));
  r.cpu->head(head.cpu, 3);
  r.gpu->head(head.gpu, 3);
  auto want = r.cpu->logits(3);
  std::vector<float> w(want.begin(), want.end());
  auto got = r.gpu->logits(3);
  REQUIRE(got.size() == w.size());
  double err = 0, scale = 0;
  for (size_t i = 0; i < w.size(); ++i) err = std::max(err, test::abs_diff(got[i], w[i])), scale = std::max(scale, double(std::abs(w[i])));
  CHECK(err / std::max(scale, 1.0) < 1e-4);
}

TEST_CASE("cuda backend: prefill matmul over several dequantization panels, and the head at 20 rows (cuBLAS)",
          "[cuda]") {
  if (!have_gpu()) return;
  // A 100 KiB panel: 100 rows of 256 columns (q: 256 rows, gate: 512, head: 321 rows) or 50
  // of 512 (down: 256 rows), so every product runs as several SGEMMs at row offsets, the last
  // one partial, with the bias added after all of them.
  std::mt19937 rng(14);
  Rig r(DType::F32, RopeStyle::NeoX, 100 * 256 * 4, 20);
  const int64_t T = 20;
  std::vector<int32_t> id(size_t(T), 0), slot(size_t(T), 0);
  std::vector<int64_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = t;
  r.tokens(id, slot, pos);
  for (DType t : {DType::BF16, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    INFO(dtype_name(t) << " weights, " << T << " tokens, panels of 100 (256 columns) / 50 (512 columns) rows");
    check_qkv_and_down(r, t, T, DType::F32, rng);
  }
  INFO("head (Q4_K, 321 x 256) over 20 selected rows: logits [20 x 321], panels of 100 rows");
  TwinMatrix head(DType::Q4_K, r.d.vocab, r.d.hidden, rng);
  r.write(Buf::Sel, randn(size_t(T * r.d.hidden), rng));
  r.cpu->head(head.cpu, T);
  r.gpu->head(head.gpu, T);
  CHECK(r.diff(Buf::Logits, T) < 1e-4);
}

TEST_CASE("cuda backend: RoPE, KV cache writes and attention (GQA, window, f16 cache, q/k norm)", "[cuda]") {
  if (!have_gpu()) return;
  std::mt19937 rng(13);
  for (DType kv : {DType::F32, DType::F16}) {
    for (RopeStyle rope : {RopeStyle::NeoX, RopeStyle::Interleaved}) {
      for (int64_t window : {0, 4}) {
        for (bool qk_norm : {false, true}) {
          INFO("kv " << dtype_name(kv) << ", rope " << (rope == RopeStyle::NeoX ? "neox" : "interleaved") << ", window "
                     << window << ", q/k norm " << qk_norm);
          Rig r(kv, rope);
          TwinVec qn(DType::F32, r.d.head_dim, rng), kn(DType::BF16, r.d.head_dim, rng);
          const VecRef qc = qk_norm ? qn.cpu : VecRef{}, kc = qk_norm ? kn.cpu : VecRef{};
          const VecRef qg = qk_norm ? qn.gpu : VecRef{}, kg = qk_norm ? kn.gpu : VecRef{};
          // Step 1: a 10-token prefill in slot 1 and a 3-token one in slot 0. Step 2: one
          // decode token in each, attending to what step 1 cached.
          struct Step {
            std::vector<int32_t> slot;
            std::vector<int64_t> pos;
          };
          Step steps[2];
          for (int64_t p = 0; p < 10; ++p) steps[0].slot.push_back(1), steps[0].pos.push_back(p);
          for (int64_t p = 0; p < 3; ++p) steps[0].slot.push_back(0), steps[0].pos.push_back(p);
          steps[1] = {{1, 0}, {10, 3}};
          for (int s = 0; s < 2; ++s) {
            INFO("step " << s);
            const int64_t T = int64_t(steps[s].slot.size());
            r.tokens(std::vector<int32_t>(size_t(T), 0), steps[s].slot, steps[s].pos);
            r.write(Buf::Q, randn(size_t(T * r.d.q_dim()), rng));
            r.write(Buf::K, randn(size_t(T * r.d.kv_dim()), rng));
            r.write(Buf::V, randn(size_t(T * r.d.kv_dim()), rng));
            r.cpu->rope_and_cache(1, {qc}, {kc}, 0);
            r.gpu->rope_and_cache(1, {qg}, {kg}, 0);
            CHECK(r.diff(Buf::Q, T) < 1e-6);
            CHECK(r.diff(Buf::K, T) < 1e-6);
            r.cpu->attention(1, {window, 0, 0, {}});
            r.gpu->attention(1, {window, 0, 0, {}});
            CHECK(r.diff(Buf::Att, T) < 1e-4);
          }
        }
      }
    }
  }
}

namespace {

// The goldens' prompts per model (engine/goldens.json): one case each below.
constexpr size_t kGoldenPrompts = 3;

// A model on cuda:0 against its transformers golden and the CPU engine's greedy tokens, for
// prompt `p`: for prompt 0 also the logits of every position against the golden's.
void check_cuda_model(const char* key, size_t p) {
  const auto goldens = nlohmann::json::parse(std::ifstream(test::testdata("engine/goldens.json")));
  EngineOptions o;
  o.max_context = 64;
  o.logit_rows = 64;
  INFO(key << ", prompt " << p);
  const auto& g = goldens.at(key);
  REQUIRE(g.at("prompts").size() == kGoldenPrompts);
  auto gpu = test::load_engine_model(test::testdata(key), o, Device{Device::Kind::Cuda, 0});
  auto cpu = test::load_engine_model(test::testdata(key), o);
  CHECK(gpu.tf->describe().find("cuda:0") != std::string::npos);
  CHECK(gpu.tf->state_bytes() == gpu.tf->predicted().allocated());
  if (p == 0) {
    auto p0 = g.at("prompts")[0].get<std::vector<int32_t>>();
    SeqChunk ch{0, 0, p0, true};
    auto out = gpu.tf->forward({&ch, 1});
    const auto& ref = g.at("logits");
    REQUIRE(out.size() == ref.size() * size_t(gpu.tf->vocab()));
    double worst = 0;
    for (size_t row = 0; row < ref.size(); ++row) {
      double scale = 0, err = 0;
      for (size_t i = 0; i < ref[row].size(); ++i) {
        const double want = ref[row][i].get<double>();
        scale = std::max(scale, std::abs(want));
        err = std::max(err, test::abs_diff(out[row * size_t(gpu.tf->vocab()) + i], want));
      }
      worst = std::max(worst, err / std::max(scale, 1e-6));
    }
    INFO("largest logit error relative to the row's scale: " << worst);
    CHECK(worst < 1e-4);
  }
  auto prompt = g.at("prompts")[p].get<std::vector<int32_t>>();
  auto got = test::greedy(*gpu.tf, prompt, 16);
  CHECK(got == g.at("continuations")[p].get<std::vector<int32_t>>());
  CHECK(got == test::greedy(*cpu.tf, prompt, 16));
}

}  // namespace

// One case per model and prompt, so each stays under 30 s on the CUDA emulator in the
// sanitizer build (two cases of five models and three prompts each were 158 s and 115 s).
#define NUNCHAKU_CUDA_MODEL_CASE(KEY, P, WHAT)                                                   \
  TEST_CASE("cuda engine: " KEY " on cuda:0, prompt " #P ": " WHAT, "[cuda]") {                 \
    if (!have_gpu()) return;                                                                     \
    check_cuda_model(KEY, P);                                                                    \
  }
#define NUNCHAKU_CUDA_MODEL_CASES(KEY)                                                                           \
  NUNCHAKU_CUDA_MODEL_CASE(KEY, 0, "the logits and greedy tokens match the transformers golden and the CPU engine") \
  NUNCHAKU_CUDA_MODEL_CASE(KEY, 1, "greedy tokens match the transformers golden and the CPU engine")              \
  NUNCHAKU_CUDA_MODEL_CASE(KEY, 2, "greedy tokens match the transformers golden and the CPU engine")
// HF checkpoints of several families.
NUNCHAKU_CUDA_MODEL_CASES("models/llama")
NUNCHAKU_CUDA_MODEL_CASES("models/qwen2")
NUNCHAKU_CUDA_MODEL_CASES("models/mistral")
NUNCHAKU_CUDA_MODEL_CASES("engine/qwen3")
NUNCHAKU_CUDA_MODEL_CASES("engine/llama3-rope")
// Tied embeddings, 16-bit weights, GGUF quantized weights.
NUNCHAKU_CUDA_MODEL_CASES("engine/llama-tied")
NUNCHAKU_CUDA_MODEL_CASES("engine/llama-small-bf16")
NUNCHAKU_CUDA_MODEL_CASES("engine/llama-small-f16")
NUNCHAKU_CUDA_MODEL_CASES("engine/llama-small-gguf/llama-small-q8_0.gguf")
NUNCHAKU_CUDA_MODEL_CASES("engine/llama-small-gguf/llama-small-q4_0.gguf")

namespace {

// `key` split in two at layer 1 (variant 0: two cuda:0 parts; 1: the CPU runs layer 0 from
// host memory, cuda:0 the rest) against the same model on cuda:0 alone: prompt 0's logits
// (in prompt 0's case), then prompt `p`'s greedy tokens against the golden.
void check_split(const char* key, int variant, size_t p) {
  const auto goldens = nlohmann::json::parse(std::ifstream(test::testdata("engine/goldens.json")));
  EngineOptions o;
  o.max_context = 64;
  o.logit_rows = 64;
  INFO(key);
  const auto& g = goldens.at(key);
  auto one = test::load_engine_model(test::testdata(key), o, Device{Device::Kind::Cuda, 0});
  const auto p0 = g.at("prompts")[0].get<std::vector<int32_t>>();
  SeqChunk ch{0, 0, p0, true};
  const auto want_span = one.tf->forward({&ch, 1});
  const std::vector<float> want(want_span.begin(), want_span.end());
  // Layer 0 in host memory, the rest on cuda:0 (for the CPU + GPU split).
  std::optional<LoadResult> mixed;
  std::unique_ptr<ResidentProvider> mixed_weights;
  if (variant == 1) {
    LoadOptions lo;
    lo.placement = place_all(one.layout, Device{Device::Kind::Cuda, 0});
    for (const Module& m : one.layout.modules)
      if (m.kind == ModuleKind::Layer && m.layer == 0) lo.placement.modules[m.name] = Device{Device::Kind::Cpu, 0};
    mixed = load_checkpoint(one.ck, one.layout, lo);
    mixed_weights = std::make_unique<ResidentProvider>(one.layout, mixed->store);
  }
  INFO((variant == 0 ? "two cuda:0 parts, layers 0 | 1" : "cpu runs layer 0, cuda:0 the rest"));
  std::vector<std::unique_ptr<Backend>> parts;
  parts.push_back(variant == 0 ? make_cuda_backend(0) : make_cpu_backend(2));
  parts.push_back(make_cuda_backend(0));
  auto split = make_split_backend(std::move(parts), {{0, 1}, variant == 0 ? 0 : 1, 1, -1});
  WeightProvider& w = variant == 0 ? *one.engine.weights : *mixed_weights;
  Transformer tf(one.layout, w, *split, o);
  CHECK(tf.state_bytes() == tf.predicted().allocated());
  auto got = tf.forward({&ch, 1});
  REQUIRE(got.size() == want.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, test::abs_diff(got[i], want[i]));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  INFO("largest logit difference from one device: " << worst << " (row scale " << scale << ")");
  if (p == 0) CHECK(worst <= (variant == 0 ? 0.0 : 1e-4 * scale));  // same device, same kernels: identical
  INFO("prompt " << p);
  REQUIRE(g.at("prompts").size() == kGoldenPrompts);
  CHECK(test::greedy(tf, g.at("prompts")[p].get<std::vector<int32_t>>(), 16) ==
        g.at("continuations")[p].get<std::vector<int32_t>>());
}

}  // namespace

// One case per model, split and prompt, so each stays under 30 s on the CUDA emulator in the
// sanitizer build (the twelve in one case were 65 s there).
#define NUNCHAKU_SPLIT_CASE(KEY, NAME, VARIANT, HOW, P)                                                     \
  TEST_CASE("cuda split: " NAME " over " HOW ", prompt " #P ": the one-device logits and the golden tokens", \
            "[cuda]") {                                                                                     \
    if (!have_gpu()) return;                                                                                \
    check_split(KEY, VARIANT, P);                                                                           \
  }
#define NUNCHAKU_SPLIT_CASES(KEY, NAME, VARIANT, HOW) \
  NUNCHAKU_SPLIT_CASE(KEY, NAME, VARIANT, HOW, 0)     \
  NUNCHAKU_SPLIT_CASE(KEY, NAME, VARIANT, HOW, 1)     \
  NUNCHAKU_SPLIT_CASE(KEY, NAME, VARIANT, HOW, 2)
NUNCHAKU_SPLIT_CASES("engine/llama-small", "llama-small", 0, "two cuda:0 parts")
NUNCHAKU_SPLIT_CASES("engine/llama-small", "llama-small", 1, "the CPU and cuda:0")
NUNCHAKU_SPLIT_CASES("engine/qwen3", "qwen3", 0, "two cuda:0 parts")
NUNCHAKU_SPLIT_CASES("engine/qwen3", "qwen3", 1, "the CPU and cuda:0")

namespace {

// Every module but the embedding off the GPU: 2 layers + final norm + head through
// kStreamSlots (2) device slots, so slots are reused within each forward pass and across
// passes (the copy ring's events are what orders a slot's refill after its last use). From
// host memory (pinned by the loader), or from disk through the host stream pool (whose bytes
// are reused once a copy is done; the embedding is then gathered on the host). Same kernels
// on the same bytes: prompt `p`'s logits must equal the resident model's exactly, and its
// greedy tokens the golden's.
void check_streamed(const char* key, Device::Kind from, size_t p) {
  EngineOptions o;
  o.max_context = 64;
  o.logit_rows = 64;
  const auto goldens = nlohmann::json::parse(std::ifstream(test::testdata("engine/goldens.json")));
  const Device gpu{Device::Kind::Cuda, 0};
  const auto& g = goldens.at(key);
  auto one = test::load_engine_model(test::testdata(key), o, gpu);
  const Device off{from, 0};
  INFO(key << ", streamed from " << off.str());
  LoadOptions lo;
  lo.placement = place_all(one.layout, off);
  for (const Module& m : one.layout.modules)
    if (m.kind == ModuleKind::Embedding && off.kind == Device::Kind::Cpu) lo.placement.modules[m.name] = gpu;
  LoadResult load = load_checkpoint(one.ck, one.layout, lo);
  std::optional<StreamOptions> so;
  if (off.kind == Device::Kind::Disk) so = StreamOptions{};
  Engine e = make_engine(one.ck, one.layout, load.store, {o, 2, so, gpu});
  INFO(e.model->describe());
  CHECK(e.model->describe().find("streamed to cuda:0") != std::string::npos);
  INFO("prompt " << p);
  REQUIRE(g.at("prompts").size() == kGoldenPrompts);
  const auto prompt = g.at("prompts")[p].get<std::vector<int32_t>>();
  SeqChunk ch{0, 0, prompt, true};
  const auto want_span = one.tf->forward({&ch, 1});
  const std::vector<float> want(want_span.begin(), want_span.end());
  const auto got = e.model->forward({&ch, 1});
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (size_t k = 0; k < got.size(); ++k) worst = std::max(worst, test::abs_diff(got[k], want[k]));
  INFO("largest logit difference from the resident model: " << worst);
  CHECK(worst == 0.0);
  CHECK(test::greedy(*e.model, prompt, 16) == g.at("continuations")[p].get<std::vector<int32_t>>());
}

}  // namespace

// One case per model, source and prompt, so each stays under 30 s on the CUDA emulator in the
// sanitizer build (the twelve in one case were 177 s there).
#define NUNCHAKU_STREAMED_CASE(KEY, NAME, FROM, KIND, P)                                                     \
  TEST_CASE("cuda streamed layers: " NAME " from " FROM ", prompt " #P ": the resident logits, step after step", \
            "[cuda]") {                                                                                      \
    if (!have_gpu()) return;                                                                                 \
    check_streamed(KEY, Device::Kind::KIND, P);                                                              \
  }
#define NUNCHAKU_STREAMED_CASES(KEY, NAME, FROM, KIND) \
  NUNCHAKU_STREAMED_CASE(KEY, NAME, FROM, KIND, 0)     \
  NUNCHAKU_STREAMED_CASE(KEY, NAME, FROM, KIND, 1)     \
  NUNCHAKU_STREAMED_CASE(KEY, NAME, FROM, KIND, 2)
NUNCHAKU_STREAMED_CASES("engine/llama-small", "llama-small", "host memory", Cpu)
NUNCHAKU_STREAMED_CASES("engine/llama-small", "llama-small", "disk", Disk)
NUNCHAKU_STREAMED_CASES("engine/llama-small-gguf/llama-small-q4_0.gguf", "q4_0 GGUF", "host memory", Cpu)
NUNCHAKU_STREAMED_CASES("engine/llama-small-gguf/llama-small-q4_0.gguf", "q4_0 GGUF", "disk", Disk)
