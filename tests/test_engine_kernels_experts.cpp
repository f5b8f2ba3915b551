// The expert kernels behind matmul_expert_rows (kernels_experts*.cpp): MXFP4 in HF's split
// form and in ggml's blocks, and input-major F32/F16/BF16 stacks. Expectations independent
// of the kernels: MXFP4 values decoded here from the e2m1 bits and 2^(s - 127); float64 dot
// products; for input-major matrices the sequential fp32 sum the contract names, formed here
// one rounding at a time. Every ISA must give the scalar kernels' bits (NaN: NaN), on shapes
// that leave tails everywhere: one row, row counts off the 8- and 4-row tiles, batches 1..9
// and 40, rows of one block and of 90 (a 64-value last run), output tiles of 256 plus a rest.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <vector>

#include "engine/kernels.hpp"
#include "engine/kernels_experts_impl.hpp"
#include "engine/quant_blocks.hpp"
#include "tests/test_engine_helpers.hpp"

using namespace nunchaku;
using namespace nunchaku::engine;

namespace {

// FP4 e2m1 from its bits: sign, 2 exponent bits (bias 1), 1 mantissa bit; 0 exponent: m/2.
double e2m1(uint8_t c) {
  const int e = (c >> 1) & 3, m = c & 1;
  const double v = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, e - 1);
  return (c & 8) ? -v : v;
}
double e8m0(uint8_t s) { return s == 255 ? NAN : std::ldexp(1.0, int(s) - 127); }

// A logical MXFP4 matrix (a code per value, a scale per 32 values) and both stored forms.
struct Mxfp4 {
  int64_t rows, cols;
  std::vector<uint8_t> codes, scales, split, ggml;
  Mxfp4(int64_t r, int64_t c) : rows(r), cols(c), codes(size_t(r * c)), scales(size_t(r * c / 32)) {}
  double value(int64_t r, int64_t c) const {
    return e2m1(codes[size_t(r * cols + c)]) * e8m0(scales[size_t(r * (cols / 32) + c / 32)]);
  }
  void pack() {  // split: value 2j low nibble of byte j, 2j+1 high; ggml: scale, then j low, j+16 high
    split.assign(size_t(rows * cols / 2), 0);
    ggml.assign(size_t(rows * cols / 32 * 17), 0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols / 32; ++k) {
        const uint8_t* v = codes.data() + r * cols + k * 32;
        uint8_t* s = split.data() + r * cols / 2 + k * 16;
        uint8_t* g = ggml.data() + (r * (cols / 32) + k) * 17;
        g[0] = scales[size_t(r * (cols / 32) + k)];
        for (int j = 0; j < 16; ++j) {
          s[j] = uint8_t(v[2 * j] | v[2 * j + 1] << 4);
          g[1 + j] = uint8_t(v[j] | v[j + 16] << 4);
        }
      }
  }
  WeightMatrix split_matrix() const {
    WeightMatrix w{split.data(), DType::MXFP4, rows, cols, size_t(cols / 2), "split"};
    w.scales = scales.data();
    return w;
  }
  WeightMatrix ggml_matrix() const { return {ggml.data(), DType::MXFP4, rows, cols, size_t(cols / 32 * 17), "ggml"}; }
};

// matmul_expert_rows over all rows in ranges of `step` rows (the last one shorter).
std::vector<float> expert_rows(const WeightMatrix& w, const std::vector<float>& x, int64_t B, int64_t step) {
  std::vector<float> y(size_t(B * w.rows), 12345.0f);  // overwritten, never added to
  for (int64_t r = 0; r < w.rows; r += step) matmul_expert_rows(w, x.data(), w.cols, B, y.data(), w.rows, r, std::min(w.rows, r + step));
  return y;
}

// The index of the first value whose bits differ (both NaN: equal), or a.size().
size_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::isnan(a[i]) && std::isnan(b[i])) && std::memcmp(&a[i], &b[i], 4) != 0) return i;
  return a.size();
}

template <class F>
std::vector<float> on_scalar(F&& f) {
  const Isa was = active_isa();
  set_isa(Isa::Scalar);
  auto y = f();
  set_isa(was);
  return y;
}

std::vector<float> uniform(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

}  // namespace

TEST_CASE("expert kernels: MXFP4 in both stored forms equals float64, and every ISA gives the scalar kernel's bits",
          "[engine][kernels]") {
  struct Shape {
    int64_t rows, cols;
  };
  const Shape shapes[] = {{1, 32}, {3, 96}, {13, 288}, {9, 2880}, {20, 512}};
  const int64_t batches[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 40};
  for (Shape sh : shapes) {
    std::mt19937 rng(uint32_t(sh.rows * 1000 + sh.cols));
    Mxfp4 m(sh.rows, sh.cols);
    for (uint8_t& c : m.codes) c = uint8_t(rng() & 15);
    for (uint8_t& s : m.scales) s = uint8_t(118 + rng() % 13);  // 2^-9 .. 2^3
    m.pack();
    const std::vector<float> x = uniform(size_t(40 * sh.cols), rng);
    for (int64_t B : batches) {
      INFO(sh.rows << "x" << sh.cols << " batch " << B);
      const auto base = on_scalar([&] { return expert_rows(m.split_matrix(), x, B, sh.rows); });
      // float64 over the values decoded here: fp32 sums of at most 2880 terms, far inside 1e-5
      // of the sum of |terms|.
      double worst = 0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t r = 0; r < sh.rows; ++r) {
          double s = 0, mag = 0;
          for (int64_t c = 0; c < sh.cols; ++c) {
            s += m.value(r, c) * x[size_t(b * sh.cols + c)];
            mag += std::abs(m.value(r, c) * x[size_t(b * sh.cols + c)]);
          }
          worst = std::max(worst, test::abs_diff(base[size_t(b * sh.rows + r)], s) / (mag + 1e-30));
        }
      CHECK(worst < 1e-5);
      test::for_each_isa([&](Isa now) {
        INFO("on " << isa_name(now));
        CHECK(expert_kernels_isa() == now);
        for (int64_t step : {sh.rows, int64_t(3), int64_t(5)}) {
          INFO("row ranges of " << step);
          CHECK(first_difference(expert_rows(m.split_matrix(), x, B, step), base) == base.size());
          CHECK(first_difference(expert_rows(m.ggml_matrix(), x, B, step), base) == base.size());
        }
      });
    }
  }
}

// One-hot activation rows: each output is one weight times 1 plus products with 0, so it must
// be the decoded value itself (-0 reads as 0), for every code and scales from 0 (subnormal
// values) to 252 (6 * 2^125, the largest whose values are all finite). A scale of 255 is NaN:
// its row's outputs are NaN.
TEST_CASE("expert kernels: MXFP4 reads every code and scale exactly, subnormal and NaN scales included on every ISA",
          "[engine][kernels]") {
  const int64_t rows = 11, cols = 64;  // an 8-row tile and 3 more; two blocks per row
  const uint8_t scale_set[] = {0, 1, 2, 3, 100, 126, 127, 128, 129, 200, 251, 252};
  Mxfp4 m(rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i) m.codes[size_t(i)] = uint8_t((i * 7 + i / 16) & 15);
  for (size_t k = 0; k < m.scales.size(); ++k) m.scales[k] = scale_set[(k * 5) % std::size(scale_set)];
  m.scales[5 * 2 + 1] = 255;  // row 5, second block
  m.pack();
  test::for_each_isa([&](Isa now) {
    for (const WeightMatrix& w : {m.split_matrix(), m.ggml_matrix()})
      for (int64_t B : {int64_t(1), int64_t(7)}) {
        int64_t bad = 0;
        for (int64_t c0 = 0; c0 + B <= cols; c0 += B) {
          std::vector<float> x(size_t(B * cols), 0.0f);
          for (int64_t b = 0; b < B; ++b) x[size_t(b * cols + c0 + b)] = 1.0f;
          const auto y = expert_rows(w, x, B, rows);
          for (int64_t b = 0; b < B; ++b)
            for (int64_t r = 0; r < rows; ++r) {
              const float got = y[size_t(b * rows + r)];
              const bool ok = r == 5 ? std::isnan(got) : got == float(m.value(r, c0 + b));
              if (!ok && bad++ == 0)
                UNSCOPED_INFO(w.name << " on " << isa_name(now) << ", batch " << B << ": row " << r << " column " << c0 + b
                                     << ": " << got << " where the value is " << m.value(r, c0 + b));
            }
        }
        CHECK(bad == 0);
      }
  });
}

// Input-major stacks: y[b][r] = sum over inputs i in order of x[b][i] * W[i][r], each product
// and each sum rounded to fp32 (formed here through a volatile, so nothing fuses them).
TEST_CASE("expert kernels: input-major F32, F16 and BF16 sum the inputs in order, the same bits on every ISA",
          "[engine][kernels]") {
  struct Shape {
    int64_t outputs, inputs;
  };
  // 300 and 600 outputs: a 256-output tile and a rest with a tail after the 8 and 16 lanes.
  const Shape shapes[] = {{1, 1}, {7, 5}, {300, 19}, {37, 64}, {600, 3}};
  const int64_t batches[] = {1, 2, 3, 5, 8, 9, 40};
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    for (Shape sh : shapes) {
      std::mt19937 rng(uint32_t(sh.outputs * 31 + sh.inputs + int(dt)));
      const size_t elem = dt == DType::F32 ? 4 : 2, row_bytes = size_t(sh.outputs + 3) * elem;  // rows padded: a slice
      std::vector<uint8_t> data(row_bytes * size_t(sh.inputs));
      std::vector<float> wv(size_t(sh.inputs * sh.outputs));  // W[i][r] as fp32
      for (int64_t i = 0; i < sh.inputs; ++i)
        for (int64_t r = 0; r < sh.outputs; ++r) {
          uint8_t* p = data.data() + size_t(i) * row_bytes + size_t(r) * elem;
          float f = std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng), int(rng() % 21) - 10);
          if (dt == DType::F16) {  // any finite half, subnormals included
            uint16_t h;
            do h = uint16_t(rng()); while ((h & 0x7c00) == 0x7c00);
            std::memcpy(p, &h, 2);
            f = blocks::half_to_float(h);
          } else if (dt == DType::BF16) {
            uint32_t bits;
            std::memcpy(&bits, &f, 4);
            const uint16_t h = uint16_t(bits >> 16);
            std::memcpy(p, &h, 2);
            bits = uint32_t(h) << 16;
            std::memcpy(&f, &bits, 4);
          } else {
            std::memcpy(p, &f, 4);
          }
          wv[size_t(i * sh.outputs + r)] = f;
        }
      WeightMatrix w{data.data(), dt, sh.outputs, sh.inputs, row_bytes, "w"};
      w.input_major = true;
      const std::vector<float> x = uniform(size_t(40 * sh.inputs), rng);
      for (int64_t B : batches) {
        INFO(dtype_name(dt) << " " << sh.inputs << " inputs x " << sh.outputs << " outputs, batch " << B);
        std::vector<float> want(size_t(B * sh.outputs));
        double worst = 0;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t r = 0; r < sh.outputs; ++r) {
            float acc = 0.0f;
            double s = 0, mag = 0;
            for (int64_t i = 0; i < sh.inputs; ++i) {
              const float xi = x[size_t(b * sh.inputs + i)], wi = wv[size_t(i * sh.outputs + r)];
              volatile float p = xi * wi;
              acc = acc + p;
              s += double(xi) * wi;
              mag += std::abs(double(xi) * wi);
            }
            want[size_t(b * sh.outputs + r)] = acc;
            worst = std::max(worst, std::abs(acc - s) / (mag + 1e-30));
          }
        CHECK(worst < 1e-5);  // the order itself sums to within fp32 rounding of float64
        test::for_each_isa([&](Isa now) {
          INFO("on " << isa_name(now));
          CHECK(expert_kernels_isa() == now);
          for (int64_t step : {sh.outputs, int64_t(5), int64_t(260)}) {
            INFO("output ranges of " << step);
            CHECK(first_difference(expert_rows(w, x, B, step), want) == want.size());
          }
        });
      }
    }
  }
}
