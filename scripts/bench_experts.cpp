// The expert kernels' microbenchmark (scripts/bench_experts.sh builds it against one build's
// libraries): matmul_expert_rows over one expert matrix of the given kind and shape, one
// thread, the scalar kernels and the active ISA's taking turns in the same process (so a
// busy moment hits both alike). Each timed call reads the next of enough copies of the
// matrix to exceed the last-level cache, so weights come from DRAM as in a decode step.
// Prints one JSON line: the best time per call of each and their ratio. The matrix is read in
// the row ranges the CPU backend's tasks take.
//   bench_experts KIND OUTPUTS INPUTS BATCH [ROUNDS]
// KIND: mxfp4 (HF's split blocks and scales), mxfp4-ggml (GGUF's blocks), bf16-im, f16-im,
// f32-im (input-major, as transformers saves gpt-oss's and Llama 4's expert stacks).
// Not a test: timings are for comparing kernels on the same machine.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/kernels.hpp"
#include "engine/kernels_experts_impl.hpp"

using namespace nunchaku;
using namespace nunchaku::engine;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  if (argc < 5 || argc > 6) {
    std::fprintf(stderr, "usage: bench_experts KIND OUTPUTS INPUTS BATCH [ROUNDS]\n");
    return 2;
  }
  const std::string kind = argv[1];
  const int64_t R = std::atoll(argv[2]), C = std::atoll(argv[3]), B = std::atoll(argv[4]);
  const int rounds = argc > 5 ? std::atoi(argv[5]) : 5;
  const bool mx = kind == "mxfp4" || kind == "mxfp4-ggml", ggml = kind == "mxfp4-ggml";
  const DType dt = mx ? DType::MXFP4 : kind == "bf16-im" ? DType::BF16 : kind == "f16-im" ? DType::F16 : DType::F32;
  if ((!mx && kind != "bf16-im" && kind != "f16-im" && kind != "f32-im") || R <= 0 || C <= 0 || B <= 0 || rounds <= 0 ||
      (mx && C % 32 != 0)) {
    std::fprintf(stderr, "bench_experts: bad arguments\n");
    return 2;
  }
  // Storage of one matrix: MXFP4 rows of C/32 blocks (16 code bytes + a scale apart, or 17
  // bytes); input-major C rows (inputs) of R values.
  const size_t elem = dt == DType::F32 ? 4 : 2;
  const size_t row_bytes = mx ? size_t(C / 32) * (ggml ? 17 : 16) : size_t(R) * elem;
  const size_t data_bytes = row_bytes * size_t(mx ? R : C), scale_bytes = mx && !ggml ? size_t(R * C / 32) : 0;
  const size_t copies = 1 + (size_t(64) << 20) / (data_bytes + scale_bytes);  // > 64 MiB in all
  std::mt19937 rng(1);
  std::vector<uint8_t> store((data_bytes + scale_bytes) * copies);
  for (size_t i = 0; i < store.size(); ++i) store[i] = uint8_t(rng());
  std::vector<WeightMatrix> ws;
  for (size_t k = 0; k < copies; ++k) {
    uint8_t* base = store.data() + k * (data_bytes + scale_bytes);
    if (mx) {  // scales near 1 (2^-4 .. 2^3): every value finite
      uint8_t* sc = ggml ? nullptr : base + data_bytes;
      for (int64_t r = 0; r < R; ++r)
        for (int64_t b = 0; b < C / 32; ++b) (ggml ? base[size_t(r) * row_bytes + size_t(b) * 17] : sc[r * (C / 32) + b]) = uint8_t(123 + rng() % 8);
      WeightMatrix w{base, dt, R, C, row_bytes, "w"};
      w.scales = sc;
      ws.push_back(w);
    } else {  // finite values near 1
      for (size_t i = 0; i < data_bytes; i += elem) {
        if (dt == DType::F32) {
          const float f = float(rng() % 2000) * 1e-3f - 1.0f;
          std::memcpy(base + i, &f, 4);
        } else {
          const uint16_t h = uint16_t((dt == DType::F16 ? 0x3800 : 0x3f00) | (rng() & 0x7f));
          std::memcpy(base + i, &h, 2);
        }
      }
      WeightMatrix w{base, dt, R, C, row_bytes, "w"};
      w.input_major = true;
      ws.push_back(w);
    }
  }
  std::vector<float> x(size_t(B * C)), y(size_t(B * R));
  for (float& v : x) v = float(rng() % 2000) * 1e-3f - 1.0f;
  // Row ranges as CpuBackend::run_raw hands them to its threads: 256 rows a task for decode
  // and small batches, 64 from kMatmulGemmBatch activation rows on.
  const int64_t task_rows = B >= kMatmulGemmBatch ? 64 : 256;
  const auto call = [&](const WeightMatrix& w) {
    for (int64_t r = 0; r < R; r += task_rows) matmul_expert_rows(w, x.data(), C, B, y.data(), R, r, r + task_rows < R ? r + task_rows : R);
  };
  const Isa simd = active_isa();
  double best[2] = {1e300, 1e300};  // scalar, simd: seconds per call
  size_t next = 0;
  std::vector<float> y_scalar;
  for (int round = 0; round < rounds; ++round)
    for (int side = 0; side < 2; ++side) {
      set_isa(side == 0 ? Isa::Scalar : simd);
      for (int rep = 0; rep < 2; ++rep) {
        const WeightMatrix& w = ws[next++ % ws.size()];
        const auto t0 = Clock::now();
        call(w);
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        if (s < best[side]) best[side] = s;
      }
    }
  // The two must agree to the bit on one matrix (kernels_experts_impl.hpp): a guard against
  // timing a kernel that computes something else.
  set_isa(Isa::Scalar);
  call(ws[0]);
  y_scalar = y;
  set_isa(simd);
  call(ws[0]);
  const bool same = std::memcmp(y.data(), y_scalar.data(), y.size() * 4) == 0;
  const double bytes = double(data_bytes + scale_bytes);
  std::printf("{\"kind\":\"%s\",\"outputs\":%lld,\"inputs\":%lld,\"batch\":%lld,\"isa\":\"%s\",\"scalar_ms\":%.3f,"
              "\"simd_ms\":%.3f,\"speedup\":%.2f,\"scalar_gb_s\":%.2f,\"simd_gb_s\":%.2f,\"same_bits\":%s}\n",
              kind.c_str(), (long long)R, (long long)C, (long long)B, std::string(isa_name(expert_kernels_isa())).c_str(),
              best[0] * 1e3, best[1] * 1e3, best[0] / best[1], bytes / best[0] / 1e9, bytes / best[1] / 1e9,
              same ? "true" : "false");
  return same ? 0 : 1;
}
