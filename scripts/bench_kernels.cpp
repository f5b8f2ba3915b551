// The kernel microbenchmark scripts/bench_kernels.sh builds against one build's libraries:
// the best of the timed calls (rdtsc) of matmul_rows on one random matrix of the given
// type, small enough to stay in L2, one thread: 50 calls and at least 20 ms of them (on an
// L2-resident 64x2048 matrix a call is 5-15 us: 50 calls, 0.3-0.8 ms, read F16 at 5.1
// weights per cycle where 500 read 8.3, session 30; the port bounds are bests over 6 ms
// of runs). Prints one JSON line.
//   bench_kernels ROWS COLS BATCH TYPE     (NUNCHAKU_ISA picks the kernels, as in run)
// TYPE q4_k-fast, q5_k-fast, q6_k-fast: matmul_rows_q8k (run --fast-math) over activation
// rows quantized beforehand (the quantization, once per input for all its matmuls, is not
// timed); bf16-fast: matmul_rows_bf16x over rows rounded to bf16 (AVX512_BF16 CPUs, with
// NUNCHAKU_ISA=avx512).
// macs_per_cycle: the same per core cycle (tsc_per_cycle from a dependent add chain, as
// scripts/bench_ports.cpp; at batch 1, weights per cycle, to set against its port bounds).
// Not a test: timings are for comparing two builds side by side on the same machine.
#include <x86intrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/kernels.hpp"
#include "engine/kernels_fast_bf16.hpp"
#include "engine/kernels_q8.hpp"
#include "memory/cpu_kernel_buffers.hpp"
#include "format/dtype.hpp"

using namespace nunchaku;
using namespace nunchaku::engine;

namespace {
struct TypeInfo {
  const char* name;
  DType dtype;
  int block_values, block_bytes;
  std::vector<int> f16_offsets;  // the block's f16 scales: kept finite and small
};
const TypeInfo kTypes[] = {
    {"q8_0", DType::Q8_0, 32, 34, {0}},       {"q4_0", DType::Q4_0, 32, 18, {0}},
    {"q4_1", DType::Q4_1, 32, 20, {0, 2}},    {"q5_0", DType::Q5_0, 32, 22, {0}},
    {"q5_1", DType::Q5_1, 32, 24, {0, 2}},    {"q4_k", DType::Q4_K, 256, 144, {0, 2}},
    {"q5_k", DType::Q5_K, 256, 176, {0, 2}},  {"q6_k", DType::Q6_K, 256, 210, {208}},
    {"f16", DType::F16, 1, 2, {}},            {"bf16", DType::BF16, 1, 2, {}},
    {"f32", DType::F32, 1, 4, {}}};
// TSC ticks per core cycle: the fewest over 31 short chains of 100000 dependent adds (one
// cycle each; a run that shared the core does not count), as scripts/bench_ports.cpp does.
double tsc_per_cycle() {
  double best = 1e300;
  for (int i = 0; i < 31; ++i) {
    const auto t0 = __rdtsc();
    long v = 0;
    for (int n = 0; n < 1000; ++n) asm volatile(".rept 100\n add $1, %0\n .endr" : "+r"(v));
    const double c = double(__rdtsc() - t0) / 100000.0;
    if (c < best) best = c;
  }
  return best;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: bench_kernels ROWS COLS BATCH TYPE\n");
    return 2;
  }
  const int64_t R = std::atoll(argv[1]), C = std::atoll(argv[2]), B = std::atoll(argv[3]);
  const TypeInfo* t = nullptr;
  std::string tname = argv[4];
  const bool fast = tname.size() > 5 && tname.ends_with("-fast");
  if (fast) tname.resize(tname.size() - 5);
  for (const auto& x : kTypes)
    if (tname == x.name) t = &x;
  const FastPath path = t && fast ? fast_math_path(t->dtype, C) : FastPath::None;
  if (fast && path == FastPath::None) t = nullptr;
  if (!t || R <= 0 || C <= 0 || B <= 0 || C % t->block_values != 0) {
    std::fprintf(stderr, "bench_kernels: bad arguments\n");
    return 2;
  }
  const size_t row_bytes = size_t(C / t->block_values) * size_t(t->block_bytes);
  std::vector<uint8_t> w(size_t(R) * row_bytes);
  std::mt19937 rng(1);
  for (auto& b : w) b = uint8_t(rng());
  const auto put_u16 = [&](size_t at, uint16_t v) { std::memcpy(&w[at], &v, 2); };
  if (t->dtype == DType::F16 || t->dtype == DType::BF16) {  // finite values near 1
    for (size_t i = 0; i < w.size(); i += 2) put_u16(i, uint16_t(t->dtype == DType::F16 ? 0x3800 | (rng() & 0x3ff) : 0x3f00 | (rng() & 0x7f)));
  } else if (t->dtype == DType::F32) {
    for (size_t i = 0; i < w.size(); i += 4) {
      const float f = float(rng() % 1000) * 1e-3f;
      std::memcpy(&w[i], &f, 4);
    }
  } else {
    for (int64_t r = 0; r < R; ++r)
      for (int64_t k = 0; k < C / t->block_values; ++k)
        for (int off : t->f16_offsets) put_u16(size_t(r) * row_bytes + size_t(k) * t->block_bytes + off, uint16_t(0x2000 | (rng() & 0x3ff)));
  }
  float* x = static_cast<float*>(std::aligned_alloc(64, size_t(B * C) * 4 + 64));
  for (int64_t i = 0; i < B * C; ++i) x[i] = float(rng() % 1000) * 1e-3f;
  std::vector<float> y(size_t(B * R));
  const WeightMatrix m{w.data(), t->dtype, R, C, row_bytes, "w"};
  const size_t ldq = path == FastPath::Q8K ? cpu_q8k_row_bytes(C) : path == FastPath::BF16 ? cpu_bf16x_row_bytes(C) : 0;
  uint8_t* xq = fast ? static_cast<uint8_t*>(std::aligned_alloc(64, size_t(B) * ldq)) : nullptr;
  for (int64_t b = 0; fast && b < B; ++b) {
    if (path == FastPath::Q8K) quantize_q8k(x + b * C, C, xq + size_t(b) * ldq);
    else round_bf16_row(x + b * C, C, reinterpret_cast<uint16_t*>(xq + size_t(b) * ldq));
  }
  double best = 1e300;
  const auto start = std::chrono::steady_clock::now();
  for (int it = 0; it < 50 || std::chrono::steady_clock::now() - start < std::chrono::milliseconds(20); ++it) {
    const auto t0 = __rdtsc();
    if (path == FastPath::Q8K) matmul_rows_q8k(m, xq, ldq, B, y.data(), R, 0, R);
    else if (path == FastPath::BF16)
      matmul_rows_bf16x(m, reinterpret_cast<const uint16_t*>(xq), int64_t(ldq / 2), B, y.data(), R, 0, R);
    else matmul_rows(m, x, C, B, y.data(), R, 0, R);
    const double c = double(__rdtsc() - t0);
    if (c < best) best = c;
  }
  const double tpc = tsc_per_cycle();
  std::printf("{\"isa\":\"%s\",\"type\":\"%s\",\"rows\":%lld,\"cols\":%lld,\"batch\":%lld,\"tsc_per_weight_byte\":%.4f,\"macs_per_tsc\":%.3f,"
              "\"tsc_per_cycle\":%.4f,\"macs_per_cycle\":%.3f}\n",
              std::string(isa_name(active_isa())).c_str(), argv[4], (long long)R, (long long)C, (long long)B,
              best / double(w.size()), double(R) * double(C) * double(B) / best, tpc,
              double(R) * double(C) * double(B) / best * tpc);
  std::free(x);
  std::free(xq);
  return 0;
}
