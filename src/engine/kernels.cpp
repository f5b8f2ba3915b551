#include "engine/kernels.hpp"

#include <cmath>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"
#include "core/log.hpp"
#include "cuda/device_math.hpp"
#include "engine/kernels_fast_bf16.hpp"
#include "engine/kernels_impl.hpp"
#include "engine/kernels_q8.hpp"
#include "engine/quant_blocks.hpp"
#include "io/convert.hpp"

namespace nunchaku::engine {

PrefetchPlan g_prefetch_16bit, g_prefetch_wide, g_prefetch_narrow, g_prefetch_fast;  // set once below (initial_prefetch)

using blocks::Quant;

namespace {

using blocks::quant_of;

// ---- scalar implementations ---------------------------------------------------
template <class Load>
void matmul_plain(const uint8_t* base, size_t row_bytes, int64_t cols, Load load, const float* x, int64_t ldx,
                  int64_t B, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = base + size_t(r) * row_bytes;
    for (int64_t b = 0; b < B; ++b) {
      const float* xb = x + b * ldx;
      float acc = 0;
      for (int64_t i = 0; i < cols; ++i) acc += load(row, i) * xb[i];
      y[b * ldy + r] = acc;
    }
  }
}

float scalar_dot_f32(const float* a, const float* b, int64_t n) {
  float acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

void scalar_matmul_rows(const WeightMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy,
                        int64_t r0, int64_t r1) {
  switch (w.dtype) {
    case DType::F32:
      return matmul_plain(w.data, w.row_bytes, w.cols, [](const uint8_t* r, int64_t i) {
        float v; std::memcpy(&v, r + 4 * i, 4); return v; }, x, ldx, B, y, ldy, r0, r1);
    case DType::BF16:
      return matmul_plain(w.data, w.row_bytes, w.cols, [](const uint8_t* r, int64_t i) {
        return blocks::bf16_to_float(blocks::load_u16(r + 2 * i)); }, x, ldx, B, y, ldy, r0, r1);
    case DType::F16:
      return matmul_plain(w.data, w.row_bytes, w.cols, [](const uint8_t* r, int64_t i) {
        return blocks::half_to_float(blocks::load_u16(r + 2 * i)); }, x, ldx, B, y, ldy, r0, r1);
    default: break;
  }
  // Quantized: dequantize a chunk of blocks into a stack buffer, use it for every batch row.
  Quant q = quant_of(w.dtype);
  const auto& info = dtype_info(w.dtype);
  const int64_t be = info.block_elems, bb = info.block_bytes;
  constexpr int64_t kChunk = 1024;  // elements; a multiple of 32 and 256
  float buf[kChunk];
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w.data + size_t(r) * w.row_bytes;
    for (int64_t b = 0; b < B; ++b) y[b * ldy + r] = 0;
    for (int64_t c = 0; c < w.cols; c += kChunk) {
      int64_t n = std::min(kChunk, w.cols - c);
      blocks::dequant_blocks(q, row + (c / be) * bb, n / be, buf);
      for (int64_t b = 0; b < B; ++b) y[b * ldy + r] += scalar_dot_f32(buf, x + b * ldx + c, n);
    }
  }
}

void scalar_attn_scores(const float* q, const void* rows, bool half, int64_t stride, int64_t n, int64_t d, float scale,
                        float* out) {
  for (int64_t p = 0; p < n; ++p) {
    float acc = 0;
    if (half) {
      const uint16_t* r = static_cast<const uint16_t*>(rows) + p * stride;
      for (int64_t i = 0; i < d; ++i) acc += q[i] * blocks::half_to_float(r[i]);
    } else {
      const float* r = static_cast<const float*>(rows) + p * stride;
      for (int64_t i = 0; i < d; ++i) acc += q[i] * r[i];
    }
    out[p] = scale * acc;
  }
}
void scalar_attn_mix(const float* w, const void* rows, bool half, int64_t stride, int64_t n, int64_t d, float* out) {
  for (int64_t i = 0; i < d; ++i) out[i] = 0;
  for (int64_t p = 0; p < n; ++p) {
    if (half) {
      const uint16_t* r = static_cast<const uint16_t*>(rows) + p * stride;
      for (int64_t i = 0; i < d; ++i) out[i] += w[p] * blocks::half_to_float(r[i]);
    } else {
      const float* r = static_cast<const float*>(rows) + p * stride;
      for (int64_t i = 0; i < d; ++i) out[i] += w[p] * r[i];
    }
  }
}
void scalar_store_f16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], 4);
    y[i] = f32_to_f16(bits);
  }
}

bool cpu_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // F16C from CPUID leaf 1 (ECX bit 29): clang before 15 rejects "f16c" in __builtin_cpu_supports.
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
  return false;
#endif
}

bool cpu_has_avx512_vnni() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;  // CPUID leaf 7 ECX bit 11
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (c & (1u << 11));
#else
  return false;
#endif
}

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;  // CPUID leaf 7 sub-leaf 1 EAX bit 5
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

const KernelSet* kernels_of(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return &kAvx512Kernels;
    case Isa::Avx2: return &kAvx2Kernels;
    default: return &kScalarKernels;
  }
}

// The best available ISA at or below `want`.
Isa best_at_or_below(Isa want) {
  for (int i = int(want); i > 0; --i)
    if (isa_available(Isa(i))) return Isa(i);
  return Isa::Scalar;
}

Isa initial_isa() {
  Isa want = Isa::Avx512;
  if (const char* env = std::getenv("NUNCHAKU_ISA"); env && *env) {
    const std::string_view e(env);
    if (e == "scalar") want = Isa::Scalar;
    else if (e == "avx2") want = Isa::Avx2;
    else if (e != "avx512")
      log::warn("NUNCHAKU_ISA={} is not one of scalar, avx2, avx512; ignored", env);
  }
  return best_at_or_below(want);
}

bool cpu_is_amd() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
  return b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163;  // "Auth" "enti" "cAMD"
#else
  return false;
#endif
}

// Measured with scripts/bench_run.sh (decode tok/s, 2 threads) and scripts/bench_kernels.sh
// on matrices larger than the L3. Intel Ice Lake server (session 9): into L1, 2 tiles on,
// for every type (+12% single-thread bf16 against none). AMD Zen 4 (session 10): for
// 16-bit and Q8_0 weights into L2, 4 tiles on (into L1 was no faster than no prefetch at
// all; llama1b decode Q8_0 12.5 -> 17.9 tok/s, bf16 10.3 -> 11.4); the 4-bit types keep L1,
// 2 tiles on (into L2 they lost 0-9%). Fast math's K-quant kernels (kernels_q8_simd.hpp)
// read their weights ~2.5x faster than the exact 4-bit ones: on Zen 4 (session 13, llama1b
// Q4_K decode) 2 tiles on into L1 gave 25 tok/s and 4 or 8 into L2 41; elsewhere they keep
// the 4-bit plan (not measured). AMD Zen 3 (session 29, an EPYC without AVX-512; on one
// thread, bench_kernels batch 1 on matrices of 64-110 MiB, best of 3 alternating runs, in
// weights per core cycle): 16-bit weights with no prefetch at all F16 3.50 and BF16 3.09
// against 2.09-2.16 and 2.04-2.13 for into L1 2 on, into L2 4 on (the prefetches' own
// instructions also cost 35% where the matrix is in L2), and llama1b F16 decode (one
// thread, 2 rounds of bench -n 16 -r 3) 4.60 / 5.28 -> 5.32 / 6.19 tok/s; Q8_0 the same
// every way in bench_kernels but llama1b Q8_0 decode 7.05 / 6.56 with L2 4 on against
// 5.11 / 5.84 with none, so Q8_0 keeps it; fast math's Q4_K / Q6_K gain from L2 4 on as
// on Zen 4 (6.71 / 4.25 against 5.62 / 2.97 with none); the 4-6-bit exact blocks gain
// nothing from it and keep L1 2 on. So AMD CPUs with AVX-512 (Zen 4 on) keep the Zen 4
// plan for 16-bit weights, the ones without (Zen 3 and before) prefetch none.
// NUNCHAKU_PREFETCH=l1:N, l2:N or off sets every plan (benchmarks).
void initial_prefetch() {
  if (cpu_is_amd()) {
    g_prefetch_16bit = cpu_has_avx512() ? PrefetchPlan{4, true} : PrefetchPlan{0, false};
    g_prefetch_wide = g_prefetch_fast = {4, true};
  }
  const char* env = std::getenv("NUNCHAKU_PREFETCH");
  if (!env || !*env) return;
  const std::string_view e(env);
  int n = 0;
  if (e == "off") {
    g_prefetch_16bit = g_prefetch_wide = g_prefetch_narrow = g_prefetch_fast = {0, false};
  } else if ((e.starts_with("l1:") || e.starts_with("l2:")) && e.size() > 3 && e.size() < 6 &&
             std::sscanf(env + 3, "%d", &n) == 1 && n >= 1 && n <= 64) {
    g_prefetch_16bit = g_prefetch_wide = g_prefetch_narrow = g_prefetch_fast = {n, e[1] == '2'};
  } else {
    log::warn("NUNCHAKU_PREFETCH={} is not off, l1:N or l2:N (N = 1..64); ignored", env);
  }
}
const bool g_prefetch_chosen = (initial_prefetch(), true);

Isa g_isa = initial_isa();
const KernelSet* g_kernels = kernels_of(g_isa);
// Fast math on AVX-512 takes the VNNI build of its kernels where the CPU has VNNI, unless
// NUNCHAKU_VNNI=0 (benchmarks).
bool g_q8_vnni = [] {
  const char* e = std::getenv("NUNCHAKU_VNNI");
  return !(e && std::string_view(e) == "0");
}();

}  // namespace

const KernelSet kScalarKernels = {scalar_matmul_rows, scalar_attn_scores, scalar_attn_mix, scalar_store_f16,
                                  scalar_matmul_rows_q8k};

bool matmul_supports(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16 || quant_of(t) != Quant::None;
}

Isa active_isa() { return g_isa; }
std::string_view isa_name(Isa isa) {
  return isa == Isa::Avx512 ? "avx512" : isa == Isa::Avx2 ? "avx2" : "scalar";
}
bool isa_available(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return avx512_compiled() && cpu_has_avx512();
    case Isa::Avx2: return avx2_compiled() && cpu_has_avx2();
    default: return true;
  }
}
Isa set_isa(Isa isa) {
  g_isa = best_at_or_below(isa);
  g_kernels = kernels_of(g_isa);
  return g_isa;
}

void matmul_rows(const WeightMatrix& w, const float* x, int64_t ldx, int64_t B, float* y, int64_t ldy, int64_t r0,
                 int64_t r1) {
  g_kernels->matmul_rows(w, x, ldx, B, y, ldy, r0, r1);
}

bool fast_math_vnni_available() { return avx512vnni_compiled() && isa_available(Isa::Avx512) && cpu_has_avx512_vnni(); }
bool set_fast_math_vnni(bool on) {
  const bool was = g_q8_vnni;
  g_q8_vnni = on;
  return was;
}

void matmul_rows_q8k(const WeightMatrix& w, const uint8_t* xq, size_t ldxq, int64_t B, float* y, int64_t ldy,
                     int64_t r0, int64_t r1) {
  static const bool vnni = fast_math_vnni_available();
  if (g_isa == Isa::Avx512 && vnni && g_q8_vnni) return avx512vnni_matmul_rows_q8k(w, xq, ldxq, B, y, ldy, r0, r1);
  g_kernels->matmul_rows_q8k(w, xq, ldxq, B, y, ldy, r0, r1);
}

bool fast_bf16_available() {
  static const bool cpu = avx512bf16_compiled() && cpu_has_avx512_bf16();
  return cpu && g_isa == Isa::Avx512;
}

void matmul_rows_bf16x(const WeightMatrix& w, const uint16_t* x, int64_t ldx, int64_t B, float* y, int64_t ldy,
                       int64_t r0, int64_t r1) {
  if (fast_bf16_available()) return avx512bf16_matmul_rows_bf16x(w, x, ldx, B, y, ldy, r0, r1);
  scalar_matmul_rows_bf16x(w, x, ldx, B, y, ldy, r0, r1);
}

void dequant_row(const WeightMatrix& w, int64_t r, float* out) {
  const uint8_t* row = w.data + size_t(r) * w.row_bytes;
  switch (w.dtype) {
    case DType::F32: std::memcpy(out, row, size_t(w.cols) * 4); return;
    case DType::BF16:
      for (int64_t i = 0; i < w.cols; ++i) out[i] = blocks::bf16_to_float(blocks::load_u16(row + 2 * i));
      return;
    case DType::F16:
      for (int64_t i = 0; i < w.cols; ++i) out[i] = blocks::half_to_float(blocks::load_u16(row + 2 * i));
      return;
    default: break;
  }
  Quant q = quant_of(w.dtype);
  if (q == Quant::None)
    throw Error("engine.unsupported_dtype", "tensor dtype " + std::string(dtype_name(w.dtype)) + " is not supported by the engine",
                {.tensor = w.name});
  blocks::dequant_blocks(q, row, w.cols / dtype_info(w.dtype).block_elems, out);
}

void attn_scores(const float* q, const void* rows, bool half, int64_t stride, int64_t n, int64_t d, float scale,
                 float* out) {
  g_kernels->attn_scores(q, rows, half, stride, n, d, scale, out);
}
void attn_mix(const float* w, const void* rows, bool half, int64_t stride, int64_t n, int64_t d, float* out) {
  g_kernels->attn_mix(w, rows, half, stride, n, d, out);
}
void store_f16(const float* x, uint16_t* y, int64_t n) { g_kernels->store_f16(x, y, n); }

void prefetch_l2(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(c + o, 0, 2);  // 2: T1, into L2
}

void rmsnorm(const float* x, const float* weight, float eps, int64_t n, float* out) {
  // Sum in double: n is up to ~16K and the result feeds every later layer.
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  float inv = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
  if (!weight) {  // unit weights (Llama 4's q/k norms)
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv;
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * (x[i] * inv);
}

void layernorm(const float* x, const float* weight, const float* bias, float eps, int64_t n, float* out) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / double(n);
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += (double(x[i]) - mean) * (double(x[i]) - mean);
  const float inv = float(1.0 / std::sqrt(ss / double(n) + double(eps))), m = float(mean);
  for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * ((x[i] - m) * inv) + (bias ? bias[i] : 0.0f);
}

void softmax_with_sink(float* x, int64_t n, float sink) {
  float mx = sink;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = std::exp(double(sink - mx));
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  float inv = float(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void gelu_tanh_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = cuda::gelu_tanh_times(gate[i], up[i]);
}

void softcap_inplace(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = cuda::softcap_of(x[i], cap);
}

void softmax_inplace(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  float inv = float(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void silu_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace nunchaku::engine
