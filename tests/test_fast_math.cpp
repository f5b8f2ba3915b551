// Fast math (kernels_q8.hpp): the Q8_K activation quantizer and the Q4_K/Q5_K/Q6_K x Q8_K matmuls
// against llama.cpp's own reference functions (testdata/engine/fast_math_kquants.json, written
// by scripts/make_fast_math_fixture.py through ggml's C code), the same bits on every ISA
// and batch size, and the error against the exact path within the bound that rounding the
// activations to 8 bits allows.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/backend.hpp"
#include "engine/kernels.hpp"
#include "engine/kernels_q8.hpp"
#include "engine/moe_route.hpp"
#include "engine/quant_blocks.hpp"
#include "memory/cpu_kernel_buffers.hpp"
#include "memory/engine_memory.hpp"
#include "tests/helpers.hpp"
#include "tests/test_engine_helpers.hpp"

using namespace nunchaku;
using namespace nunchaku::engine;
using json = nlohmann::json;

namespace {

std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> b(hex.size() / 2);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return b;
}

// Activation rows quantized into one 64-byte-aligned buffer, as the CPU backend lays them out.
struct Q8Buf {
  std::vector<uint8_t> raw;
  uint8_t* base = nullptr;
  size_t ld = 0;
  Q8Buf(const std::vector<float>& x, int64_t rows, int64_t cols) : raw(size_t(rows) * cpu_q8k_row_bytes(cols) + 64) {
    ld = cpu_q8k_row_bytes(cols);
    base = raw.data() + (64 - reinterpret_cast<uintptr_t>(raw.data()) % 64) % 64;
    for (int64_t r = 0; r < rows; ++r) quantize_q8k(x.data() + r * cols, cols, base + size_t(r) * ld);
  }
  const uint8_t* row(int64_t r) const { return base + size_t(r) * ld; }
};

// Random K-quant rows: random codes and scales, f16 d (and dmin) in ~[0.001, 0.05).
int64_t block_bytes(DType t) { return t == DType::Q4_K ? 144 : t == DType::Q5_K ? 176 : 210; }
std::vector<uint8_t> random_k(DType t, uint64_t seed, int64_t rows, int64_t cols) {
  const int64_t bb = block_bytes(t);
  std::vector<uint8_t> b(size_t(rows * cols / 256 * bb));
  uint64_t s = seed;
  for (auto& v : b) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = uint8_t(s >> 56);
  }
  for (size_t k = 0; k < b.size(); k += size_t(bb))
    for (size_t at : t == DType::Q6_K ? std::vector<size_t>{208} : std::vector<size_t>{0, 2}) {
      const uint16_t f16 = uint16_t(0x1400 + (b[k + at] | (b[k + at + 1] << 8)) % 0x1600);
      b[k + at] = uint8_t(f16), b[k + at + 1] = uint8_t(f16 >> 8);
    }
  return b;
}
WeightMatrix k_matrix(DType t, const std::vector<uint8_t>& b, int64_t rows, int64_t cols) {
  return {b.data(), t, rows, cols, size_t(cols / 256 * block_bytes(t)), std::string(dtype_name(t))};
}
constexpr DType kTypes[] = {DType::Q4_K, DType::Q5_K, DType::Q6_K};

// f(name) under every kernel build the machine can run: each ISA, and on AVX-512 with and
// without its VNNI build (the one used by default where the CPU has VNNI).
template <class F>
void for_each_fast_kernel(F&& f) {
  test::for_each_isa([&](Isa isa) {
    if (isa != Isa::Avx512) return f(std::string(isa_name(isa)));
    if (!fast_math_vnni_available()) {
      WARN("fast-math kernels for avx512 + vnni skipped: not built in or not supported by this CPU");
      return f(std::string("avx512"));
    }
    f(std::string("avx512 + vnni"));
    const bool was = set_fast_math_vnni(false);
    try {
      f(std::string("avx512, no vnni"));
    } catch (...) {
      set_fast_math_vnni(was);
      throw;
    }
    set_fast_math_vnni(was);
  });
}

}  // namespace

TEST_CASE("fast math: Q8_K activations equal ggml's quantize_row_q8_K_ref", "[engine][fast-math]") {
  const json c = json::parse(std::ifstream(test::testdata("engine/fast_math_kquants.json")));
  const int64_t cols = c.at("cols"), n = c.at("tokens");
  std::vector<float> x;
  for (const auto& r : c.at("x")) for (const auto& v : r) x.push_back(v.get<float>());
  Q8Buf q(x, n, cols);
  for (int64_t t = 0; t < n; ++t) {
    const auto ref = from_hex(c.at("q8k_hex")[size_t(t)]);  // per block: d f32, qs[256], bsums[16] int16
    const Q8KRow ours = q8k_row(q.row(t), cols);
    for (int64_t k = 0; k < cols / 256; ++k) {
      INFO("token " << t << " block " << k);
      const uint8_t* blk = ref.data() + k * 292;
      float d;
      std::memcpy(&d, blk, 4);
      CHECK(std::memcmp(&ours.d[k], &d, 4) == 0);
      CHECK(std::memcmp(ours.q + k * 256, blk + 4, 256) == 0);
      for (int j = 0; j < 16; ++j) {
        int16_t a;
        std::memcpy(&a, blk + 260 + 2 * j, 2);
        CHECK(ours.bs16[16 * k + j] == a);
      }
      for (int j = 0; j < 8; ++j) CHECK(ours.bs[8 * k + j] == ours.bs16[16 * k + 2 * j] + ours.bs16[16 * k + 2 * j + 1]);
    }
  }
}

TEST_CASE("fast math: K quants x Q8_K equal ggml's vec_dot_q*_K_q8_K on every ISA, the same bits everywhere",
          "[engine][fast-math]") {
  const json c = json::parse(std::ifstream(test::testdata("engine/fast_math_kquants.json")));
  const int64_t rows = c.at("rows"), cols = c.at("cols"), n = c.at("tokens");
  std::vector<float> x;
  for (const auto& r : c.at("x")) for (const auto& v : r) x.push_back(v.get<float>());
  Q8Buf q(x, n, cols);
  std::vector<float> deq(static_cast<size_t>(cols));
  for (DType t : kTypes) {
    const json& wc = c.at("weights").at(std::string(dtype_name(t)));
    const auto wbytes = from_hex(wc.at("hex"));
    const WeightMatrix w = k_matrix(t, wbytes, rows, cols);
    REQUIRE(wbytes.size() == size_t(rows) * w.row_bytes);
    std::vector<float> first;  // the first ISA's batch result: every other result must equal it
    for_each_fast_kernel([&](const std::string& kernel) {
      INFO(dtype_name(t) << " on " << kernel);
      std::vector<float> y(size_t(n * rows), NAN), y1(size_t(n * rows), NAN);
      matmul_rows_q8k(w, q.base, q.ld, n, y.data(), rows, 0, rows);
      for (int64_t tok = 0; tok < n; ++tok) {  // one token at a time (decode tiles), rows in two ranges
        matmul_rows_q8k(w, q.row(tok), q.ld, 1, y1.data() + tok * rows, rows, 0, 5);
        matmul_rows_q8k(w, q.row(tok), q.ld, 1, y1.data() + tok * rows, rows, 5, rows);
      }
      for (int64_t tok = 0; tok < n; ++tok)
        for (int64_t r = 0; r < rows; ++r) {
          INFO("token " << tok << " row " << r);
          const float ref = wc.at("dot")[size_t(tok)][size_t(r)].get<float>(), got = y[size_t(tok * rows + r)];
          // ggml adds the same exact integer sums in another float order: within a few fp32
          // roundings of the terms' magnitude, sum over blocks of |dx| * 127 * sum |w|.
          dequant_row(w, r, deq.data());
          double terms = 0;
          for (int64_t i = 0; i < cols; ++i)
            terms += std::abs(double(deq[size_t(i)]) * q8k_row(q.row(tok), cols).d[i / 256]) * 127;
          if (ref == 0) CHECK(got == 0);  // a zero activation row: d = 0, nothing to round
          else CHECK(test::abs_diff(got, ref) <= 1e-6 * terms);
          CHECK(std::memcmp(&got, &y1[size_t(tok * rows + r)], 4) == 0);
        }
      if (first.empty()) first = y;
      else CHECK(std::memcmp(first.data(), y.data(), y.size() * 4) == 0);
    });
  }
}

TEST_CASE("fast math: batch-invariant to the bit at every tile shape, error within the 8-bit rounding bound",
          "[engine][fast-math]") {
  const int64_t rows = 37, cols = 2048, n = 21;  // odd row and batch counts: every tile and remainder
  std::vector<float> x(size_t(n * cols));
  uint64_t s = 11;
  for (int64_t i = 0; i < n * cols; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[size_t(i)] = float(int64_t(s >> 40) % 2001 - 1000) / 250.0f * (i % 97 == 0 ? 30.0f : 1.0f);
  }
  Q8Buf q(x, n, cols);
  std::vector<float> deq(static_cast<size_t>(cols));
  for (DType t : kTypes) {
  const auto wbytes = random_k(t, 7, rows, cols);
  const WeightMatrix w = k_matrix(t, wbytes, rows, cols);
  for_each_fast_kernel([&](const std::string& kernel) {
    INFO(dtype_name(t) << " on " << kernel);
    std::vector<float> all(size_t(n * rows));
    matmul_rows_q8k(w, q.base, q.ld, n, all.data(), rows, 0, rows);
    for (int64_t B : {1, 2, 3, 4, 5, 16}) {
      INFO("batch " << B);
      for (int64_t b0 = 0; b0 + B <= n; b0 += B) {
        std::vector<float> y(size_t(B * rows));
        matmul_rows_q8k(w, q.row(b0), q.ld, B, y.data(), rows, 3, rows);
        matmul_rows_q8k(w, q.row(b0), q.ld, B, y.data(), rows, 0, 3);
        CHECK(std::memcmp(y.data(), all.data() + b0 * rows, y.size() * 4) == 0);
      }
    }
    // Against the exact dot over the dequantized weights: rounding x to d * q moves each
    // value by at most |d| / 2 (plus the float rounding of 1 / d), so the results differ by
    // at most sum over blocks of |d| / 2 * sum |w| there.
    for (int64_t r = 0; r < rows; ++r) {
      dequant_row(w, r, deq.data());
      for (int64_t t = 0; t < n; ++t) {
        const Q8KRow xq = q8k_row(q.row(t), cols);
        double exact = 0, bound = 0;
        for (int64_t k = 0; k < cols / 256; ++k) {
          double wabs = 0;
          for (int64_t i = 256 * k; i < 256 * (k + 1); ++i) {
            exact += double(deq[size_t(i)]) * x[size_t(t * cols + i)];
            wabs += std::abs(double(deq[size_t(i)]));
          }
          bound += std::abs(double(xq.d[k])) * (0.5 + 1e-5) * wabs;
        }
        INFO("row " << r << " token " << t);
        CHECK(std::abs(double(all[size_t(t * rows + r)]) - exact) <= bound + 1e-4 * std::abs(exact));
      }
    }
  });
  }
}

TEST_CASE("cpu backend, fast math: Q4_K jobs read the 8-bit rows, other jobs stay exact, as engine_memory charges",
          "[engine][fast-math]") {
  test::FastMathBackend fb;
  const EngineDims& d = fb.d;
  const EngineMemory& mem = fb.mem;
  auto& be = fb.be;
  CHECK(be->allocated_bytes() + engine_host_tables(mem.config) == mem.allocated());  // the tables are the Transformer's
  const ModelSpec& spec = fb.spec;
  EngineConfig exact = fb.config;
  exact.fast_math = false;
  // both roundings, 20 rows of the widest input (inter)
  CHECK(mem.scratch - engine_memory(spec, exact).scratch == 20 * (cpu_q8k_row_bytes(512) + cpu_bf16x_row_bytes(512)));
  CHECK(be->describe().find("fast math") != std::string::npos);

  const auto qbytes = random_k(DType::Q4_K, 3, d.q_dim(), d.hidden);
  const WeightMatrix wq = k_matrix(DType::Q4_K, qbytes, d.q_dim(), d.hidden);
  std::vector<float> kf(size_t(d.kv_dim() * d.hidden));
  for (size_t i = 0; i < kf.size(); ++i) kf[i] = float(int(i * 7919 % 201) - 100) / 100.0f;
  const WeightMatrix wk{reinterpret_cast<const uint8_t*>(kf.data()), DType::F32, d.kv_dim(), d.hidden,
                        size_t(d.hidden) * 4, "k"};
  for (int64_t T : {1, 5, 20}) {
    INFO("batch " << T);
    std::vector<int32_t> id(static_cast<size_t>(T), 0), slot(static_cast<size_t>(T), 0);
    std::vector<int64_t> pos(static_cast<size_t>(T));
    be->set_tokens({id, slot, pos});
    std::vector<float> xn(size_t(T * d.hidden));
    for (size_t i = 0; i < xn.size(); ++i) xn[i] = float(int((i * 104729) % 1999) - 999) / 300.0f;
    be->write(Buf::XN, xn);
    const MatmulJob jobs[2] = {{&wq, Buf::Q, {}}, {&wk, Buf::K, {}}};
    be->matmul(jobs, Buf::XN);
    Q8Buf q(xn, T, d.hidden);
    std::vector<float> want_q(size_t(T * d.q_dim())), want_k(size_t(T * d.kv_dim()));
    matmul_rows_q8k(wq, q.base, q.ld, T, want_q.data(), d.q_dim(), 0, d.q_dim());
    matmul_rows(wk, xn.data(), d.hidden, T, want_k.data(), d.kv_dim(), 0, d.kv_dim());
    CHECK(be->read(Buf::Q, T) == want_q);
    CHECK(be->read(Buf::K, T) == want_k);
  }
}

TEST_CASE("cpu backend, fast math: K-quant routed experts read their rows as Q8_K, the router stays exact, as engine_memory charges",
          "[engine][fast-math][moe]") {
  // One layer of hidden 256, 4 experts of 256 (top 2): gate and up Q4_K, down Q6_K (a
  // Q4_K_M layer's mixture), the router f32.
  EngineDims shape{256, 4, 2, 64, 512, 64, 1};
  ModelSpec spec = test::spec_with_dims(shape, 32);
  spec.num_experts = 4, spec.num_experts_per_tok = 2, spec.moe_intermediate_size = 256;
  const EngineDims d = engine_dims(spec);
  const int64_t E = 4, k = 2, H = 256, I = 256;
  REQUIRE(d.experts == E);
  EngineConfig config{.max_batch = 1, .max_context = 32, .max_tokens = 40, .logit_rows = 1, .threads = 2, .fast_math = true};
  const EngineMemory mem = engine_memory(spec, config), exact_mem = engine_memory(spec, [&] {
    EngineConfig c = config;
    c.fast_math = false;
    return c;
  }());
  // by hand: the dense input rounding for 40 rows of the widest input (inter 512), and the 40 x 2
  // gathered rows of max(hidden, expert inter) = 256 values as Q8_K
  CHECK(mem.scratch - exact_mem.scratch == 40 * (cpu_q8k_row_bytes(512) + cpu_bf16x_row_bytes(512)) + 80 * cpu_q8k_row_bytes(256));
  std::vector<float> inv_freq(size_t(d.head_dim / 2), 1.0f);
  auto fast = make_cpu_backend(2), exact = make_cpu_backend(2);
  fast->allocate({d, mem, 1e-5f, RopeStyle::NeoX, inv_freq});
  exact->allocate({d, exact_mem, 1e-5f, RopeStyle::NeoX, inv_freq});
  CHECK(fast->allocated_bytes() + engine_host_tables(mem.config) == mem.allocated());

  std::vector<std::vector<uint8_t>> bytes;
  std::vector<WeightMatrix> mats;
  bytes.reserve(size_t(3 * E));
  mats.reserve(size_t(3 * E));
  for (int64_t e = 0; e < E; ++e)
    for (int which = 0; which < 3; ++which) {
      const DType t = which == 2 ? DType::Q6_K : DType::Q4_K;
      bytes.push_back(random_k(t, uint64_t(100 + 3 * e + which), which == 2 ? H : I, which == 2 ? I : H));
      mats.push_back(k_matrix(t, bytes.back(), which == 2 ? H : I, which == 2 ? I : H));
    }
  std::vector<MoeExpert> experts(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) experts[size_t(e)] = {&mats[size_t(3 * e)], &mats[size_t(3 * e + 1)], &mats[size_t(3 * e + 2)]};
  std::vector<float> rf(static_cast<size_t>(E * H));
  for (size_t i = 0; i < rf.size(); ++i) rf[i] = float(int(i * 7919 % 201) - 100) / 400.0f;
  const WeightMatrix router{reinterpret_cast<const uint8_t*>(rf.data()), DType::F32, E, H, size_t(H) * 4, "router"};
  MoeFfn f;
  f.router = &router;
  f.experts = experts;
  f.top_k = k;
  f.norm_topk = true;

  for (int64_t T : {1, 5, 40}) {  // 40 x 2 rows: the pool's path for the rounding and the routing
    INFO("tokens " << T);
    std::vector<int32_t> id(size_t(T), 0), slot(size_t(T), 0);
    std::vector<int64_t> pos(size_t(T), 0);
    std::vector<float> xn(static_cast<size_t>(T * H));
    for (size_t i = 0; i < xn.size(); ++i) xn[i] = float(int((i * 104729 + size_t(T)) % 1999) - 999) / 300.0f;
    for (auto* be : {fast.get(), exact.get()}) {
      be->set_tokens({id, slot, pos});
      be->write(Buf::XN, xn);
      be->moe(f);
    }
    const std::vector<float> got = fast->read(Buf::Tmp, T), plain = exact->read(Buf::Tmp, T);
    // By hand from the kernels: the exact router's choice, each chosen expert's gate and up over
    // x as Q8_K, silu(gate) * up rounded to Q8_K for down, weighted and summed in ascending expert order.
    double worst = 0, moved = 0;
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> logits(static_cast<size_t>(E));
      matmul_rows(router, xn.data() + t * H, H, 1, logits.data(), E, 0, E);
      std::vector<int32_t> choice(static_cast<size_t>(k));
      std::vector<float> weight(static_cast<size_t>(k));
      route_token(logits, true, choice, weight);
      const Q8Buf qx(std::vector<float>(xn.begin() + t * H, xn.begin() + (t + 1) * H), 1, H);
      std::vector<double> want(static_cast<size_t>(H), 0.0), mag(static_cast<size_t>(H), 1.0);
      std::vector<int32_t> order = {0, 1};
      if (choice[1] < choice[0]) std::swap(order[0], order[1]);
      for (int32_t j : order) {
        const MoeExpert& x = experts[size_t(choice[size_t(j)])];
        std::vector<float> g(static_cast<size_t>(I)), u(static_cast<size_t>(I)), y(static_cast<size_t>(H));
        matmul_rows_q8k(*x.gate, qx.base, qx.ld, 1, g.data(), I, 0, I);
        matmul_rows_q8k(*x.up, qx.base, qx.ld, 1, u.data(), I, 0, I);
        silu_mul(g.data(), u.data(), I);  // the engine's silu(gate) * up
        const Q8Buf qh(g, 1, I);
        matmul_rows_q8k(*x.down, qh.base, qh.ld, 1, y.data(), H, 0, H);
        for (int64_t i = 0; i < H; ++i) {
          want[size_t(i)] += double(weight[size_t(j)]) * y[size_t(i)];
          mag[size_t(i)] += std::abs(double(weight[size_t(j)]) * y[size_t(i)]);  // the float sum's rounding scales with this
        }
      }
      for (int64_t i = 0; i < H; ++i) {
        const double a = got[size_t(t * H + i)], scale = mag[size_t(i)];
        worst = std::max(worst, std::abs(a - want[size_t(i)]) / scale);
        moved = std::max(moved, std::abs(a - double(plain[size_t(t * H + i)])) / scale);
      }
    }
    INFO("worst " << worst << ", from the exact path " << moved);
    CHECK(worst < 1e-6);   // the Q8_K path, up to the float rounding of the weighted sum
    CHECK(moved > 1e-4);   // and not the exact path
  }
}
