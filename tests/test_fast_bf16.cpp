// Fast math for BF16 weights (kernels_fast_bf16.hpp): the bf16 rounding against hand-worked
// values, the scalar twin against vdpbf16ps itself (the CPU's instruction is the
// independent party: where the CPU has AVX512_BF16 the AVX-512 kernel must give the twin's
// bits, at every batch size and row range), the twin against a long-double sum within the
// fp32 summation bound, the error against the exact path within what rounding the
// activations to bf16 allows, and the CPU backend's dispatch.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/backend.hpp"
#include "engine/kernels.hpp"
#include "engine/kernels_fast_bf16.hpp"
#include "engine/kernels_q8.hpp"
#include "memory/cpu_kernel_buffers.hpp"
#include "memory/engine_memory.hpp"
#include "tests/test_engine_helpers.hpp"

using namespace nunchaku;
using namespace nunchaku::engine;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
float bf16_value(uint16_t h) { return from_bits(uint32_t(h) << 16); }

// AVX-512 active for the test's scope (fast_bf16_available() needs it), restored after.
struct Avx512Scope {
  Isa was = active_isa();
  Avx512Scope() { set_isa(Isa::Avx512); }
  ~Avx512Scope() { set_isa(was); }
};

// A BF16 matrix of `rows` x `cols` and its WeightMatrix view: values of both signs over
// ~2^-10 .. 2^3, with `specials` adding subnormals, zeros of both signs and large values.
struct Bf16Matrix {
  std::vector<uint16_t> v;
  WeightMatrix w;
  Bf16Matrix(int64_t rows, int64_t cols, uint32_t seed, bool specials) : v(size_t(rows * cols)) {
    std::mt19937 rng(seed);
    for (auto& h : v) {
      h = uint16_t((rng() & 0x8000u) | ((0x75u + rng() % 14u) << 7) | (rng() & 0x7fu));
      if (specials && rng() % 53 == 0) h = uint16_t((rng() & 0x8000u) | (rng() & 0x7fu));  // subnormal or zero
      if (specials && rng() % 97 == 0) h = uint16_t((rng() & 0x8000u) | (0xf0u << 7) | (rng() & 0x7fu));  // ~2^113
    }
    w = {reinterpret_cast<const uint8_t*>(v.data()), DType::BF16, rows, cols, size_t(cols) * 2, "w"};
  }
};
std::vector<float> activations(int64_t n, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& f : x) {
    f = float(int(rng() % 20001) - 10000) / 997.0f;
    if (specials && rng() % 61 == 0) f = from_bits((rng() & 0x80000000u) | (rng() & 0x7fffffu));  // subnormal
    if (specials && rng() % 89 == 0) f = from_bits((rng() & 0x80000000u) | (0x8au << 23) | (rng() & 0x7fffffu));  // ~2^-117
  }
  return x;
}
std::vector<uint16_t> rounded(const std::vector<float>& x) {
  std::vector<uint16_t> r(x.size());
  round_bf16_row(x.data(), int64_t(x.size()), r.data());
  return r;
}

}  // namespace

TEST_CASE("fast math bf16: activations round to nearest, ties to even", "[engine][fast-math]") {
  struct Case {
    uint32_t in;
    uint16_t want;
  } cases[] = {
      {0x3f800000u, 0x3f80},  // 1
      {0x3f808000u, 0x3f80},  // 1 + 2^-8: the tie goes to the even 1
      {0x3f818000u, 0x3f82},  // 1 + 3 * 2^-8: the tie goes to the even 1 + 2^-6
      {0x3f808001u, 0x3f81},  // just above the tie
      {0x3f807fffu, 0x3f80},  // just below it
      {0xc0200000u, 0xc020},  // -2.5, exact
      {0x7f7fffffu, 0x7f80},  // the largest float rounds to infinity
      {0x7f800000u, 0x7f80},  // infinity
      {0xff800000u, 0xff80},  // -infinity
      {0x7fa00001u, 0x7fe0},  // a signalling NaN comes back quiet
      {0xffc00000u, 0xffc0},  // a quiet negative NaN stays one
      {0x000116c2u, 0x0001},  // a subnormal is rounded, not flushed
      {0x80000000u, 0x8000},  // -0
  };
  for (const auto& c : cases) {
    INFO("input 0x" << std::hex << c.in);
    const float f = from_bits(c.in);
    uint16_t out = 0;
    round_bf16_row(&f, 1, &out);
    CHECK(out == c.want);
  }
}

TEST_CASE("fast math bf16: the scalar twin is within the fp32 summation bound of the exact sum",
          "[engine][fast-math]") {
  const int64_t rows = 5, cols = 1024;
  const Bf16Matrix m(rows, cols, 7, false);
  const auto xb = rounded(activations(cols, 8, false));
  std::vector<float> y(static_cast<size_t>(rows));
  scalar_matmul_rows_bf16x(m.w, xb.data(), cols, 1, y.data(), rows, 0, rows);
  for (int64_t r = 0; r < rows; ++r) {
    long double exact = 0, mag = 0;
    for (int64_t i = 0; i < cols; ++i) {
      const long double p = (long double)bf16_value(m.v[size_t(r * cols + i)]) * bf16_value(xb[size_t(i)]);
      exact += p;
      mag += std::fabs(p);
    }
    // 16 lanes of cols/16 fused steps each (one rounding per step), then 4 additions.
    const long double bound = (cols / 16 + 4) * std::ldexp(1.0L, -24) * mag;
    INFO("row " << r << " twin " << y[size_t(r)] << " exact " << double(exact));
    CHECK(std::fabs((long double)y[size_t(r)] - exact) <= bound);
  }
}

TEST_CASE("fast math bf16: the AVX512_BF16 kernel gives the twin's bits at every batch size and row range",
          "[engine][fast-math]") {
  Avx512Scope isa;
  if (!fast_bf16_available()) {
    WARN("fast math bf16 kernel skipped: AVX512_BF16 not built in or not supported by this CPU (the twin is tested)");
    return;
  }
  CHECK(fast_math_path(DType::BF16, 2048) == FastPath::BF16);
  CHECK(fast_math_path(DType::BF16, 2050) == FastPath::None);  // not whole 32-value steps
  CHECK(fast_math_path(DType::F16, 2048) == FastPath::None);
  for (int64_t cols : {32, 96, 2048}) {
    const int64_t rows = 21;
    const Bf16Matrix m(rows, cols, uint32_t(cols), true);
    for (int64_t B : {1, 2, 5, 6, 7, 13, 100}) {
      if (B == 100 && cols != 2048) continue;  // 100 rows of 2048 are two activation chunks
      INFO("cols " << cols << " batch " << B);
      const auto x = activations(B * cols, uint32_t(B * 31 + cols), true);
      const auto xb = rounded(x);
      std::vector<float> want(size_t(B * rows)), got(size_t(B * rows), -1.0f);
      scalar_matmul_rows_bf16x(m.w, xb.data(), cols, B, want.data(), rows, 0, rows);
      matmul_rows_bf16x(m.w, xb.data(), cols, B, got.data(), rows, 0, rows);
      size_t diff = 0;
      for (size_t i = 0; i < got.size(); ++i) diff += bits(got[i]) != bits(want[i]);
      CHECK(diff == 0);
      // a row range that starts inside a tile: the same bits, nothing outside it written
      std::vector<float> part(size_t(B * rows), -1.0f);
      matmul_rows_bf16x(m.w, xb.data(), cols, B, part.data(), rows, 3, 20);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t r = 0; r < rows; ++r) {
          const size_t i = size_t(b * rows + r);
          if (r >= 3 && r < 20) diff += bits(part[i]) != bits(want[i]);
          else diff += part[i] != -1.0f;
        }
      CHECK(diff == 0);
    }
  }
}

TEST_CASE("fast math bf16: the error against the exact path stays within the bf16 rounding bound",
          "[engine][fast-math]") {
  const int64_t rows = 8, cols = 512, B = 3;
  const Bf16Matrix m(rows, cols, 11, false);
  const auto x = activations(B * cols, 12, false);
  const auto xb = rounded(x);
  std::vector<float> fast(size_t(B * rows)), exact(size_t(B * rows));
  scalar_matmul_rows_bf16x(m.w, xb.data(), cols, B, fast.data(), rows, 0, rows);
  matmul_rows(m.w, x.data(), cols, B, exact.data(), rows, 0, rows);
  size_t differ = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = 0; r < rows; ++r) {
      double mag = 0;
      for (int64_t i = 0; i < cols; ++i)
        mag += std::fabs(double(bf16_value(m.v[size_t(r * cols + i)])) * x[size_t(b * cols + i)]);
      // |x - bf16(x)| <= 2^-9 |x|, plus both paths' fp32 summation (n + 4 roundings at most)
      const double bound = std::ldexp(1.0, -9) * mag + 2 * (cols + 4) * std::ldexp(1.0, -24) * mag;
      const size_t i = size_t(b * rows + r);
      INFO("row " << r << " batch row " << b << " fast " << fast[i] << " exact " << exact[i]);
      CHECK(std::fabs(double(fast[i]) - exact[i]) <= bound);
      differ += fast[i] != exact[i];
    }
  CHECK(differ > 0);  // the rounding is real: the two paths are not the same computation
}

TEST_CASE("cpu backend, fast math: BF16 jobs read the bf16 rows where the CPU has AVX512_BF16, exact elsewhere",
          "[engine][fast-math]") {
  Avx512Scope isa;
  test::FastMathBackend fb;
  const EngineDims& d = fb.d;
  auto& be = fb.be;
  CHECK(be->allocated_bytes() + engine_host_tables(fb.mem.config) == fb.mem.allocated());
  const Bf16Matrix q(d.q_dim(), d.hidden, 5, false);
  std::vector<float> kf(size_t(d.kv_dim() * d.hidden));
  for (size_t i = 0; i < kf.size(); ++i) kf[i] = float(int(i * 7919 % 201) - 100) / 100.0f;
  const WeightMatrix wk{reinterpret_cast<const uint8_t*>(kf.data()), DType::F32, d.kv_dim(), d.hidden,
                        size_t(d.hidden) * 4, "k"};
  const bool fast = fast_bf16_available();
  if (!fast) WARN("AVX512_BF16 absent: checking that BF16 jobs stay exact under fast math");
  for (int64_t T : {1, 5, 20}) {
    INFO("batch " << T);
    std::vector<int32_t> id(static_cast<size_t>(T), 0), slot(static_cast<size_t>(T), 0);
    std::vector<int64_t> pos(static_cast<size_t>(T));
    be->set_tokens({id, slot, pos});
    const auto xn = activations(T * d.hidden, uint32_t(T), false);
    be->write(Buf::XN, xn);
    const MatmulJob jobs[2] = {{&q.w, Buf::Q, {}}, {&wk, Buf::K, {}}};
    be->matmul(jobs, Buf::XN);
    const auto xb = rounded(xn);
    std::vector<float> want_q(size_t(T * d.q_dim())), want_k(size_t(T * d.kv_dim()));
    if (fast) matmul_rows_bf16x(q.w, xb.data(), d.hidden, T, want_q.data(), d.q_dim(), 0, d.q_dim());
    else matmul_rows(q.w, xn.data(), d.hidden, T, want_q.data(), d.q_dim(), 0, d.q_dim());
    matmul_rows(wk, xn.data(), d.hidden, T, want_k.data(), d.kv_dim(), 0, d.kv_dim());
    CHECK(be->read(Buf::Q, T) == want_q);
    CHECK(be->read(Buf::K, T) == want_k);
  }
}
