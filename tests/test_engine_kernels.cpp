// matmul_rows over every path it takes: decode tiles (few activation rows), the blocked
// prefill GEMM (kMatmulGemmBatch rows and more, column blocks for long rows), row ranges
// that start and end anywhere, odd row counts and column tails. Two expectations, both
// independent of the kernels' blocking: (1) each output equals a float64 dot product of
// dequant_row (checked against gguf-py elsewhere) with x, to fp32 summation accuracy;
// (2) each activation row's outputs are bit-identical whatever the batch size and row
// range: batch invariance, which generate's continuous batching relies on.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "engine/backend.hpp"
#include "engine/kernels.hpp"
#include "memory/engine_memory.hpp"
#include "format/dtype.hpp"
#include "tests/test_engine_helpers.hpp"

using namespace nunchaku;
using namespace nunchaku::engine;

namespace {

struct Lcg {
  uint64_t s;
  uint32_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return uint32_t(s >> 33);
  }
  float uniform() { return float(next() & 0xffffff) / float(0x1000000) * 2.0f - 1.0f; }  // [-1, 1)
};

uint16_t to_bf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return uint16_t(b >> 16);
}

// Random weights of `dtype`: floats in [-1, 1); quantized blocks with random quants and a
// valid half scale (0.03125, and dmin 0.0625 for K-quants) so every value is finite.
std::vector<uint8_t> random_matrix(DType dt, int64_t rows, int64_t cols, Lcg& g, size_t& row_bytes) {
  row_bytes = size_t(*dtype_nbytes(dt, uint64_t(cols)));
  std::vector<uint8_t> out(row_bytes * size_t(rows));
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = out.data() + size_t(r) * row_bytes;
    if (dt == DType::F32) {
      for (int64_t i = 0; i < cols; ++i) {
        float f = g.uniform();
        std::memcpy(row + 4 * i, &f, 4);
      }
    } else if (dt == DType::BF16) {
      for (int64_t i = 0; i < cols; ++i) {
        uint16_t h = to_bf16(g.uniform());
        std::memcpy(row + 2 * i, &h, 2);
      }
    } else if (dt == DType::F16) {
      for (int64_t i = 0; i < cols; ++i) {
        uint16_t h = uint16_t(0x3000 + (g.next() % 0x0c00)) | uint16_t((g.next() & 1) << 15);  // +-[0.125, 0.5)
        std::memcpy(row + 2 * i, &h, 2);
      }
    } else {
      for (size_t i = 0; i < row_bytes; ++i) row[i] = uint8_t(g.next());
      const auto& info = dtype_info(dt);
      const uint16_t d = 0x2800, dmin = 0x2c00;  // 0.03125, 0.0625
      for (size_t blk = 0; blk < row_bytes; blk += info.block_bytes) {
        uint8_t* b = row + blk;
        if (dt == DType::Q6_K) {
          std::memcpy(b + 208, &d, 2);
        } else {
          std::memcpy(b, &d, 2);
          if (dt == DType::Q4_1 || dt == DType::Q5_1 || dt == DType::Q4_K || dt == DType::Q5_K) std::memcpy(b + 2, &dmin, 2);
        }
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("for_each_isa: every available ISA in order, the one active before restored after a throw", "[engine]") {
  std::vector<Isa> want, seen;
  for (Isa isa : kAllIsas)
    if (isa_available(isa)) want.push_back(isa);
  const Isa start = active_isa();
  REQUIRE(set_isa(Isa::Scalar) == Isa::Scalar);  // not the best one, so a restore shows
  CHECK_THROWS_WITH(test::for_each_isa([&](Isa now) {
                      CHECK(active_isa() == now);
                      seen.push_back(now);
                      if (seen.size() == want.size()) throw std::runtime_error("last one fails");
                    }),
                    "last one fails");
  CHECK(seen == want);
  CHECK(active_isa() == Isa::Scalar);
  set_isa(start);
}

TEST_CASE("matmul_rows: every path equals a float64 reference and is batch-invariant to the bit", "[engine]") {
  struct Shape {
    int64_t rows, cols;
  };
  const DType types[] = {DType::F32, DType::BF16, DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                         DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  const int64_t batches[] = {1, 2, 5, 7, 15, 16, 17, 48, 53, 100};
  test::for_each_isa([&](Isa now) {
    for (DType dt : types) {
      const int64_t be = dtype_info(dt).block_elems;
      // Column counts: a tail after the 8-wide lanes (plain dtypes), one short block, one
      // row within one GEMM column block, and rows split into 2 and 4 column blocks; from
      // 1024 columns on AVX2 takes its wide GEMM tile (3 rows: 70 = a 63-row block + 2 x 3
      // + 1, 5 = 3 + 2); at 8192 AVX2's Q6_K kernel takes 16 activation rows per chunk.
      std::vector<Shape> shapes = {{67, 256}, {5, 1280}, {33, 2560}, {70, 1024}, {3, 8192}};
      if (be == 1) shapes.push_back({9, 37});
      if (be == 32) shapes.push_back({70, 96});
      for (Shape sh : shapes) {
        INFO(dtype_name(dt) << " " << sh.rows << "x" << sh.cols << " on " << isa_name(now));
        Lcg g{uint64_t(sh.rows * 131 + sh.cols)};
        size_t rb = 0;
        auto data = random_matrix(dt, sh.rows, sh.cols, g, rb);
        WeightMatrix w{data.data(), dt, sh.rows, sh.cols, rb, "w"};
        const int64_t maxB = 100;
        std::vector<float> x(size_t(maxB * sh.cols));
        for (float& v : x) v = g.uniform();

        // Reference: float64 dot products over the dequantized rows, and their error scale.
        std::vector<double> ref(size_t(maxB * sh.rows)), mag(size_t(maxB * sh.rows));
        std::vector<float> wr(static_cast<size_t>(sh.cols));
        for (int64_t r = 0; r < sh.rows; ++r) {
          dequant_row(w, r, wr.data());
          for (int64_t b = 0; b < maxB; ++b) {
            double s = 0, m = 0;
            for (int64_t i = 0; i < sh.cols; ++i) {
              s += double(wr[size_t(i)]) * x[size_t(b * sh.cols + i)];
              m += std::abs(double(wr[size_t(i)]) * x[size_t(b * sh.cols + i)]);
            }
            ref[size_t(b * sh.rows + r)] = s;
            mag[size_t(b * sh.rows + r)] = m;
          }
        }

        // Batch 1 over all rows, one call per row range of 1..3 rows: the baseline bits.
        std::vector<float> base(size_t(maxB * sh.rows));
        for (int64_t b = 0; b < maxB; ++b)
          for (int64_t r = 0; r < sh.rows; r += 1 + r % 3)
            matmul_rows(w, x.data() + b * sh.cols, sh.cols, 1, base.data() + b * sh.rows, sh.rows, r,
                        std::min(sh.rows, r + 1 + r % 3));
        // fp32 accumulation: relative to the sum of |terms|, a few units of 2^-24 per
        // sequential addition along the lane, far below 1e-5 for these lengths.
        size_t worst = 0;
        double worst_err = 0;
        for (size_t i = 0; i < base.size(); ++i)
          if (double e = std::abs(base[i] - ref[i]) / (mag[i] + 1e-30); e > worst_err) worst_err = e, worst = i;
        INFO("worst: row " << worst % size_t(sh.rows) << " batch row " << worst / size_t(sh.rows) << ": " << base[worst]
                           << " vs float64 " << ref[worst]);
        CHECK(worst_err < 1e-5);

        for (int64_t B : batches) {
          // The whole matrix at once, and the rows split unevenly (an odd first range).
          for (int64_t split : {sh.rows, int64_t(3)}) {
            std::vector<float> y(size_t(B * sh.rows), NAN);
            for (int64_t r = 0; r < sh.rows; r += split)
              matmul_rows(w, x.data(), sh.cols, B, y.data(), sh.rows, r, std::min(sh.rows, r + split));
            size_t first_diff = y.size();
            for (size_t i = 0; i < y.size() && first_diff == y.size(); ++i)
              if (std::memcmp(&y[i], &base[i], 4) != 0) first_diff = i;
            INFO("batch " << B << " split " << split << ": first difference at row " << first_diff % size_t(sh.rows)
                          << " batch row " << first_diff / size_t(sh.rows));
            CHECK(first_diff == y.size());
          }
        }
      }
    }
  });
}

// Exactness of the SIMD dequantization itself: with one-hot activation rows each output is
// one weight times 1 plus zeros, so every path must give dequant_row's float exactly. The
// scales are random normal halves here (the test above keeps them powers of two, where
// no product rounds), so a kernel that rounds (d*sc)*q - dmin*m differently, or decodes a
// scale bit wrong, shows as a differing value.
TEST_CASE("matmul_rows: every path reads each block weight as dequant_row gives it, to the bit", "[engine]") {
  const DType types[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                         DType::Q4_K, DType::Q5_K, DType::Q6_K};
  const int64_t rows = 11, cols = 512;  // decode tiles of 8 or 4 rows and their tails; 2 K blocks
  test::for_each_isa([&](Isa now) {
    for (DType dt : types) {
      INFO(dtype_name(dt) << " on " << isa_name(now));
      Lcg g{uint64_t(dt) * 977 + 5};
      const auto& info = dtype_info(dt);
      const size_t rb = size_t(*dtype_nbytes(dt, uint64_t(cols)));
      std::vector<uint8_t> data(rb * size_t(rows));
      for (uint8_t& b : data) b = uint8_t(g.next());
      const auto random_half = [&] {  // +-[2^-8, 2^-3), all 10 mantissa bits random
        return uint16_t(((7 + g.next() % 5) << 10) | (g.next() & 0x3ff) | ((g.next() & 1) << 15));
      };
      const bool mins = dt == DType::Q4_1 || dt == DType::Q5_1 || dt == DType::Q4_K || dt == DType::Q5_K;
      for (size_t blk = 0; blk < data.size(); blk += info.block_bytes) {
        uint16_t h = random_half();
        std::memcpy(data.data() + blk + (dt == DType::Q6_K ? 208 : 0), &h, 2);
        if (mins) h = random_half(), std::memcpy(data.data() + blk + 2, &h, 2);
      }
      WeightMatrix w{data.data(), dt, rows, cols, rb, "w"};
      std::vector<float> ref(size_t(rows * cols));
      for (int64_t r = 0; r < rows; ++r) dequant_row(w, r, ref.data() + r * cols);

      // B one-hot activation rows, row b at column c0 + b; y[b][r] must be ref[r][c0 + b].
      // Counts the differing values into n; the first one of a path is reported.
      const auto compare = [&](int64_t B, int64_t c0, const char* path, int64_t& n) {
        std::vector<float> x(size_t(B * cols), 0.0f), y(size_t(B * rows), NAN);
        for (int64_t b = 0; b < B; ++b) x[size_t(b * cols + c0 + b)] = 1.0f;
        matmul_rows(w, x.data(), cols, B, y.data(), rows, 0, rows);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t r = 0; r < rows; ++r)
            if (const float got = y[size_t(b * rows + r)], want = ref[size_t(r * cols + c0 + b)]; got != want && n++ == 0)
              UNSCOPED_INFO(path << ": row " << r << " column " << c0 + b << ": " << got << " where dequant_row gives "
                                 << want);
      };
      int64_t decode = 0, small = 0, gemm = 0;
      for (int64_t c = 0; c < cols; ++c) compare(1, c, "decode", decode);
      for (int64_t c = 0; c + 7 <= cols; c += 7) compare(7, c, "small batch", small);
      compare(cols, 0, "prefill GEMM", gemm);
      CHECK(decode == 0);
      CHECK(small == 0);
      CHECK(gemm == 0);
    }
  });
}

TEST_CASE("attention kernels: scores and weighted sums over cache rows equal float64", "[engine]") {
  test::for_each_isa([&](Isa now) {
    for (bool half : {false, true})
      for (int64_t d : {3, 8, 64, 100, 128})
        for (int64_t n : {1, 5, 37}) {
          INFO((half ? "f16" : "f32") << " d " << d << " n " << n << " on " << isa_name(now));
          Lcg g{uint64_t(d * 7 + n)};
          const int64_t stride = d + 5;  // rows of a wider cache (other heads between them)
          std::vector<float> q(static_cast<size_t>(d)), w(static_cast<size_t>(n)), rows(size_t(n * stride));
          std::vector<uint16_t> hrows(rows.size());
          for (float& v : q) v = g.uniform();
          for (float& v : w) v = g.uniform();
          for (size_t i = 0; i < rows.size(); ++i) {
            hrows[i] = uint16_t(0x3000 + (g.next() % 0x0c00)) | uint16_t((g.next() & 1) << 15);
            rows[i] = g.uniform();
          }
          auto row_val = [&](int64_t p, int64_t i) {  // the cache element as the kernels see it
            if (!half) return double(rows[size_t(p * stride + i)]);
            uint16_t h = hrows[size_t(p * stride + i)];  // normal halves only: +-2^(e-15) * (1 + m/1024)
            return (h & 0x8000 ? -1.0 : 1.0) * std::ldexp(1.0 + double(h & 0x3ff) / 1024.0, int((h >> 10) & 31) - 15);
          };
          const void* base = half ? static_cast<const void*>(hrows.data()) : static_cast<const void*>(rows.data());
          std::vector<float> sc(static_cast<size_t>(n)), out(static_cast<size_t>(d));
          attn_scores(q.data(), base, half, stride, n, d, 0.5f, sc.data());
          attn_mix(w.data(), base, half, stride, n, d, out.data());
          double worst = 0;
          for (int64_t p = 0; p < n; ++p) {
            double s = 0, m = 0;
            for (int64_t i = 0; i < d; ++i) s += q[size_t(i)] * row_val(p, i), m += std::abs(q[size_t(i)] * row_val(p, i));
            worst = std::max(worst, test::abs_diff(sc[size_t(p)], 0.5 * s) / (0.5 * m + 1e-30));
          }
          for (int64_t i = 0; i < d; ++i) {
            double s = 0, m = 0;
            for (int64_t p = 0; p < n; ++p) s += w[size_t(p)] * row_val(p, i), m += std::abs(w[size_t(p)] * row_val(p, i));
            worst = std::max(worst, test::abs_diff(out[size_t(i)], s) / (m + 1e-30));
          }
          CHECK(worst < 1e-6);
        }
  });
}

TEST_CASE("cpu backend: fused matmul_act / matmul_add equal the plain ops they replace, bit for bit", "[engine]") {
  // Reference: Backend's default fused ops (matmul, then act_mul / add), run on the same
  // CPU backend; the override computes, adds biases and applies SiLU / the residual inside
  // the tasks. Batch 1 (decode tiles), 5 (small batch) and 20 (GEMM); with and without bias.
  EngineDims d{256, 4, 2, 64, 320, 64, 1};
  const ModelSpec spec = test::spec_with_dims(d, 32);
  const EngineConfig c{.max_batch = 1, .max_context = 32, .max_tokens = 20, .logit_rows = 1, .threads = 2};
  std::vector<float> inv_freq(size_t(d.head_dim / 2), 1.0f);
  auto be = make_cpu_backend(2);
  be->allocate({d, engine_memory(spec, c), 1e-5f, RopeStyle::NeoX, inv_freq});
  Lcg g{7};
  size_t rb_gate = 0, rb_up = 0, rb_down = 0;
  auto gate = random_matrix(DType::Q4_1, d.inter, d.hidden, g, rb_gate);
  auto up = random_matrix(DType::Q4_K, d.inter, d.hidden, g, rb_up);
  auto down = random_matrix(DType::BF16, d.hidden, d.inter, g, rb_down);
  WeightMatrix wg{gate.data(), DType::Q4_1, d.inter, d.hidden, rb_gate, "gate"};
  WeightMatrix wu{up.data(), DType::Q4_K, d.inter, d.hidden, rb_up, "up"};
  WeightMatrix wd{down.data(), DType::BF16, d.hidden, d.inter, rb_down, "down"};
  std::vector<float> bias_i(size_t(d.inter)), bias_h(size_t(d.hidden));
  for (float& v : bias_i) v = g.uniform();
  for (float& v : bias_h) v = g.uniform();
  auto rand = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& f : v) f = g.uniform();
    return v;
  };
  for (int64_t T : {1, 5, 20}) {
    std::vector<int32_t> id(static_cast<size_t>(T), 0), slot(static_cast<size_t>(T), 0);
    std::vector<int64_t> pos(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = t;
    be->set_tokens({id, slot, pos});
    for (bool with_bias : {false, true}) {
      INFO("batch " << T << (with_bias ? " with bias" : " without bias"));
      const VecRef bi = with_bias ? VecRef{bias_i.data(), DType::F32, d.inter} : VecRef{};
      const VecRef bh = with_bias ? VecRef{bias_h.data(), DType::F32, d.hidden} : VecRef{};
      const MatmulJob jg{&wg, Buf::Gate, bi}, ju{&wu, Buf::Up, bi}, jd{&wd, Buf::Tmp, bh};
      const auto xn = rand(T * d.hidden), h = rand(T * d.inter), x = rand(T * d.hidden);

      be->write(Buf::XN, xn);
      for (Activation act : {Activation::Silu, Activation::GeluTanh}) {
        INFO(activation_name(act));
        be->write(Buf::XN, xn);
        be->Backend::matmul_act(jg, ju, Buf::XN, act);
        const auto want_gate = be->read(Buf::Gate, T);
        be->write(Buf::XN, xn);
        be->matmul_act(jg, ju, Buf::XN, act);
        CHECK(be->read(Buf::Gate, T) == want_gate);
      }

      be->write(Buf::Gate, h);
      be->write(Buf::X, x);
      be->Backend::matmul_add(jd, Buf::Gate, Buf::X);
      const auto want_x = be->read(Buf::X, T);
      be->write(Buf::Gate, h);
      be->write(Buf::X, x);
      be->matmul_add(jd, Buf::Gate, Buf::X);
      CHECK(be->read(Buf::X, T) == want_x);
    }
  }
}

TEST_CASE("cpu backend: fused rope_and_cache / add_norm equal the primitives they compose, bit for bit", "[engine]") {
  // Reference: Backend's default compositions (norm per head, rope, store_kv; add, norm) on
  // the same backend; then attention over what each wrote must agree to the bit. Every norm
  // kind, both rotary tables, a partial rotary, and a sliding layer whose ring wraps.
  EngineDims d{64, 4, 2, 16, 128, 32, 2};
  ModelSpec spec = test::spec_with_dims(d, 32);
  spec.architecture = "gemma3", spec.layer_windows = {0, 3}, spec.rope_local_theta = 1e6;
  const EngineConfig c{.max_batch = 1, .max_context = 32, .max_tokens = 6, .logit_rows = 1, .threads = 2};
  const EngineMemory mem = engine_memory(spec, c);
  REQUIRE(mem.kv_positions == std::vector<int64_t>{32, 8});
  std::vector<float> f0, f1;
  for (int i = 0; i < 6; ++i) f0.push_back(std::pow(1e4f, -i / 6.0f)), f1.push_back(std::pow(1e6f, -i / 6.0f));
  Lcg g{11};
  auto rand = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& f : v) f = g.uniform();
    return v;
  };
  const auto qn = rand(d.head_dim), kn = rand(d.head_dim), wn = rand(d.hidden), bn = rand(d.hidden);
  auto fused = make_cpu_backend(2), plain = make_cpu_backend(2);
  for (auto* be : {fused.get(), plain.get()}) be->allocate({d, mem, 1e-6f, RopeStyle::NeoX, f0, f1, 12});
  for (int64_t start : {0, 6, 12}) {  // positions 12..17 wrap layer 1's ring of 8
    std::vector<int32_t> id(6, 0), slot(6, 0);
    std::vector<int64_t> pos(6);
    for (int64_t t = 0; t < 6; ++t) pos[size_t(t)] = start + t;
    const auto q = rand(6 * d.q_dim()), k = rand(6 * d.kv_dim()), v = rand(6 * d.kv_dim()), x = rand(6 * d.hidden),
               delta = rand(6 * d.hidden);
    for (int64_t layer : {0, 1}) {
      for (NormKind kind : {NormKind::Rms, NormKind::RmsOnePlus, NormKind::Layer}) {
        INFO("positions from " << start << ", layer " << layer << ", norm " << norm_kind_name(kind));
        const Norm nq{{qn.data(), DType::F32, d.head_dim}, kind}, nk{{kn.data(), DType::F32, d.head_dim}, kind};
        const Norm nh{{wn.data(), DType::F32, d.hidden}, kind, {bn.data(), DType::F32, d.hidden}};
        const Attention att{layer ? 3 : 0, 0.25f, 2.0f, {}};
        for (auto* be : {fused.get(), plain.get()}) {
          be->set_tokens({id, slot, pos});
          be->write(Buf::Q, q);
          be->write(Buf::K, k);
          be->write(Buf::V, v);
          be->write(Buf::X, x);
          be->write(Buf::Tmp, delta);
        }
        fused->rope_and_cache(layer, nq, nk, int(layer));
        plain->Backend::rope_and_cache(layer, nq, nk, int(layer));
        CHECK(fused->read(Buf::Q, 6) == plain->read(Buf::Q, 6));
        CHECK(fused->read(Buf::K, 6) == plain->read(Buf::K, 6));
        fused->attention(layer, att);
        plain->attention(layer, att);
        CHECK(fused->read(Buf::Att, 6) == plain->read(Buf::Att, 6));
        fused->add_norm(Buf::X, Buf::Tmp, Buf::XN, nh);
        plain->Backend::add_norm(Buf::X, Buf::Tmp, Buf::XN, nh);
        CHECK(fused->read(Buf::XN, 6) == plain->read(Buf::XN, 6));
        CHECK(fused->read(Buf::X, 6) == plain->read(Buf::X, 6));
      }
    }
  }
}

TEST_CASE("cpu kernels: gelu-tanh, softcap, layer norm and a softmax with a sink against hand-computed values", "[engine]") {
  // gelu_tanh(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), torch.nn.functional.gelu(
  // approximate="tanh") in float64: 1 -> 0.8411919906, -2 -> -0.0454023059, 0.5 -> 0.3457140.
  float g[] = {1.0f, -2.0f, 0.5f};
  const float u[] = {1.0f, 1.0f, 2.0f};
  gelu_tanh_mul(g, u, 3);
  CHECK(g[0] == Approx(0.8411919906).epsilon(1e-6));
  CHECK(g[1] == Approx(-0.0454023059).epsilon(1e-5));
  CHECK(g[2] == Approx(2 * 0.3457140).epsilon(1e-5));
  float s[] = {3.0f, -30.0f};
  softcap_inplace(s, 2, 2.5f);  // 2.5 tanh(1.2) = 2.0841365..., 2.5 tanh(-12) = -2.4999999...
  CHECK(s[0] == Approx(2.0841365).epsilon(1e-6));
  CHECK(s[1] == Approx(-2.5).epsilon(1e-6));
  // layer norm of {1, 2, 3, 6}: mean 3, variance 3.5; (x - 3) / sqrt(3.5) * w + b.
  const float x[] = {1, 2, 3, 6}, w[] = {1, 2, 1, 1}, b[] = {0, 0, 1, 0};
  float out[4];
  layernorm(x, w, b, 0.0f, 4, out);
  CHECK(out[0] == Approx(-2 / std::sqrt(3.5)));
  CHECK(out[1] == Approx(-2 / std::sqrt(3.5)));
  CHECK(out[2] == Approx(1.0));
  CHECK(out[3] == Approx(3 / std::sqrt(3.5)));
  // softmax of {0, ln 2} with a sink logit 0: weights 1/4 and 2/4 (the sink takes 1/4).
  float p[] = {0.0f, std::log(2.0f)};
  softmax_with_sink(p, 2, 0.0f);
  CHECK(p[0] == Approx(0.25));
  CHECK(p[1] == Approx(0.5));
}
