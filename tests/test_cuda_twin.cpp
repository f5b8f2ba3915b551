// The CPU twin of the CUDA engine kernels: every per-element function of
// cuda/device_math.hpp (which the kernels in cuda/engine_ops.cu call) compiled for the
// host and checked against the CPU engine's independent implementations
// (src/engine/quant_blocks.hpp, kernels.cpp). Runs on every machine, GPU or not.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/device_math.hpp"
#include "cuda/engine_ops.hpp"
#include "memory/engine_memory.hpp"
#include "engine/kernels.hpp"
#include "engine/quant_blocks.hpp"
#include "tests/test_engine_helpers.hpp"

using namespace nunchaku;
namespace blocks = nunchaku::engine::blocks;
using cuda::WType;

namespace {

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// A finite half with a small magnitude (block scales), as raw bits.
uint16_t small_half(std::mt19937& rng) {
  std::uniform_int_distribution<int> exp(5, 16), man(0, 1023), sign(0, 1);
  return uint16_t((sign(rng) << 15) | (exp(rng) << 10) | man(rng));
}

void put16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}

// A random block of `t` whose scale fields are finite halves.
std::vector<uint8_t> random_block(WType t, std::mt19937& rng) {
  std::vector<uint8_t> b(size_t(cuda::block_bytes(t)));
  for (auto& x : b) x = uint8_t(rng());
  switch (t) {
    case WType::Q8_0: case WType::Q4_0: case WType::Q5_0: put16(b.data(), small_half(rng)); break;
    case WType::Q4_1: case WType::Q5_1: case WType::Q4_K: case WType::Q5_K:
      put16(b.data(), small_half(rng));
      put16(b.data() + 2, small_half(rng));
      break;
    case WType::Q6_K: put16(b.data() + 208, small_half(rng)); break;
    default: break;
  }
  return b;
}

struct QuantCase {
  WType w;
  DType d;
};
const QuantCase kQuant[] = {{WType::Q8_0, DType::Q8_0}, {WType::Q4_0, DType::Q4_0}, {WType::Q4_1, DType::Q4_1},
                            {WType::Q5_0, DType::Q5_0}, {WType::Q5_1, DType::Q5_1}, {WType::Q4_K, DType::Q4_K},
                            {WType::Q5_K, DType::Q5_K}, {WType::Q6_K, DType::Q6_K}};

}  // namespace

TEST_CASE("cuda twin: half and bf16 decoding equal the CPU engine's on every bit pattern", "[cuda][twin]") {
  int bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float want_h = blocks::half_to_float(uint16_t(h)), got_h = cuda::half_bits_to_float(uint16_t(h));
    const float want_b = blocks::bf16_to_float(uint16_t(h)), got_b = cuda::bf16_bits_to_float(uint16_t(h));
    bad += float_bits(want_h) != float_bits(got_h);
    bad += float_bits(want_b) != float_bits(got_b);
  }
  CHECK(bad == 0);
  CHECK(cuda::half_bits_to_float(0x3C00) == 1.0f);       // hand value: 1.0
  CHECK(cuda::half_bits_to_float(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(cuda::bf16_bits_to_float(0xC040) == -3.0f);
}

TEST_CASE("cuda twin: per-element dequantization equals the CPU engine's blocks, every type", "[cuda][twin]") {
  std::mt19937 rng(7);
  for (const QuantCase& c : kQuant) {
    INFO("type " << dtype_name(c.d));
    const int be = cuda::block_elems(c.w);
    CHECK(be == int(dtype_info(c.d).block_elems));
    CHECK(cuda::block_bytes(c.w) == int(dtype_info(c.d).block_bytes));
    int mismatches = 0;
    for (int trial = 0; trial < 200; ++trial) {
      // Two blocks in a row, so dequant_at's block stepping is exercised too.
      std::vector<uint8_t> row = random_block(c.w, rng), second = random_block(c.w, rng);
      row.insert(row.end(), second.begin(), second.end());
      std::vector<float> want(size_t(2 * be));
      blocks::dequant_blocks(blocks::quant_of(c.d), row.data(), 2, want.data());
      for (int i = 0; i < 2 * be; ++i) {
        const float got = cuda::dequant_at(row.data(), c.w, i);
        if (float_bits(got) != float_bits(want[size_t(i)])) {
          if (mismatches++ < 3) UNSCOPED_INFO("element " << i << ": device " << got << ", cpu " << want[size_t(i)]);
        }
      }
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("cuda twin: float rows, rmsnorm scale, silu and rotary helpers equal the CPU engine's", "[cuda][twin]") {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  // F32/F16/BF16 rows read element by element.
  std::vector<float> f(37);
  for (auto& v : f) v = nd(rng);
  std::vector<uint8_t> bytes(f.size() * 4);
  std::memcpy(bytes.data(), f.data(), bytes.size());
  for (size_t i = 0; i < f.size(); ++i) CHECK(cuda::dequant_at(bytes.data(), WType::F32, int64_t(i)) == f[i]);
  std::vector<uint8_t> halves = {0x00, 0x3C, 0x00, 0xC0, 0x00, 0x7C};  // 1, -2, +Inf
  CHECK(cuda::dequant_at(halves.data(), WType::F16, 1) == -2.0f);
  CHECK(std::isinf(cuda::dequant_at(halves.data(), WType::F16, 2)));

  // RMSNorm: the device computes the scale from a double sum of squares; the CPU kernel
  // is the reference for the whole normalisation.
  const int64_t n = 300;
  std::vector<float> x(n), w(n), want(n);
  for (auto& v : x) v = nd(rng);
  for (auto& v : w) v = nd(rng);
  engine::rmsnorm(x.data(), w.data(), 1e-5f, n, want.data());
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const float inv = cuda::rms_inv(ss, n, 1e-5f);
  for (int64_t i = 0; i < n; ++i) CHECK(w[size_t(i)] * (x[size_t(i)] * inv) == want[size_t(i)]);

  // SiLU-gate against the CPU kernel (both use expf: equal on the host).
  std::vector<float> g(64), u(64);
  for (auto& v : g) v = nd(rng);
  for (auto& v : u) v = nd(rng);
  std::vector<float> gc = g;
  engine::silu_mul(gc.data(), u.data(), 64);
  for (size_t i = 0; i < g.size(); ++i) CHECK(cuda::silu_times(g[i], u[i]) == gc[i]);

  // Rotary pairs: NeoX pairs i with i + hd/2, interleaved 2i with 2i+1; cos/sin by hand.
  int64_t a, b;
  cuda::rope_pair(true, 64, 5, a, b);
  CHECK((a == 5 && b == 37));
  cuda::rope_pair(false, 64, 5, a, b);
  CHECK((a == 10 && b == 11));
  float c, s;
  cuda::rope_cs(3, 0.5f, c, s);
  CHECK(c == float(std::cos(1.5)));
  CHECK(s == float(std::sin(1.5)));
}

TEST_CASE("cuda run state: engine_memory's CUDA terms against a hand count", "[cuda][twin]") {
  // hidden 4096, 32:8 heads of 128, ffn 14336, vocab 32000, 2 layers; batch 4, context 1024.
  ModelSpec spec = test::spec_with_dims({4096, 32, 8, 128, 14336, 32000, 2}, 4096);
  EngineConfig c{.max_batch = 4, .max_context = 1024};
  const EngineMemory cpu = engine_memory(spec, c);
  c.cuda = true;
  const EngineMemory gpu = engine_memory(spec, c);
  // Largest matrix as fp32 bounds the panel: max(vocab, ffn, q_dim, hidden) x max(hidden,
  // ffn, q_dim) x 4 = 32000 x 14336 x 4 > 64 MiB, so the panel is 64 MiB; + 32 MiB cuBLAS
  // workspace + 64 rotary frequencies x 4 B.
  CHECK(gpu.scratch == (64ull << 20) + (32ull << 20) + 64 * 4);
  // Logit rows (max_tokens = 256, logit_rows = 4): their indices on the device (4 x 8 B).
  CHECK(gpu.activations == cpu.activations + 4 * 8);
  CHECK(gpu.host_logits == 4ull * 32000 * 4);
  CHECK(gpu.kv_cache == cpu.kv_cache);
  CHECK(gpu.kv_cache == 2ull * 2 * 4 * 1024 * 1024 * 4);  // layers x (k,v) x slots x positions x kv_dim x 4 B
  CHECK(gpu.total() == gpu.activations + gpu.kv_cache + gpu.logits + gpu.scratch + gpu.host_logits);
  // A small model: the panel is the largest matrix, not 64 MiB.
  spec = test::spec_with_dims({64, 4, 4, 16, 128, 100, 2}, 4096);
  CHECK(engine_memory(spec, c).scratch == 128ull * 128 * 4 + (32ull << 20) + 8 * 4);
}

TEST_CASE("cuda build: cuBLAS (opened on first use, not linked) loads with every function the backend calls",
          "[cuda][twin]") {
  std::string why;
  if (!NUNCHAKU_HAVE_CUDA) {
    CHECK_FALSE(cuda::blas_available(&why));
    CHECK(why == "built without CUDA");
    return;
  }
  INFO(why);
  CHECK(cuda::blas_available(&why));
}
