// Vector-op throughput on this core, alone and in pairs: which ops share execution pipes
// (docs/engine.md, "Session 16" for AVX-512, "Session 28" for AVX2). Each measured loop is
// independent 256-bit ops (or two kinds alternating) on registers; cycles come from a
// chain of dependent integer adds (1 cycle each), so results are ops per core cycle
// whatever the TSC rate.
//   g++ -O2 scripts/bench_ports.cpp -o /tmp/bench_ports   (the ops are inline asm: no -m flags)
//   /tmp/bench_ports            # AVX-512 mode where the CPU has AVX-512 VL, else AVX2 mode
//   /tmp/bench_ports avx2       # AVX2 mode (ymm0-15, VEX encodings) on any AVX2 CPU
//   /tmp/bench_ports avx2 bounds  # AVX2 mode, the per-type bounds only (no op tables)
// Each mode prints the single-op rates, then a table of pairs. AVX-512 mode: 16 ops per
// loop (8 + 8), sources ymm20/ymm21. AVX2 mode: 14 ops per loop (7 + 7), sources
// ymm14/ymm15, destinations ymm0-13, and the ops the AVX2 exact kernels use, including
// their memory forms (loads from a 64-byte buffer in L1); each figure is the best of 15 short runs.
// In a pair the two kinds alternate and share destinations (op a of pair k writes what op
// b reads or overwrites), so an FMA (which reads its destination) carries no chain from
// one loop to the next unless both kinds are FMAs (alone: 14 separate chains).
#include <x86intrin.h>

#include <chrono>
#include <cstdio>
#include <cstring>

namespace {
constexpr long kIter = 4000000;

double tsc_per_cycle(long iter = kIter) {
  const unsigned long t0 = __rdtsc();
  long v = 0;
  for (long n = 0; n < iter; ++n)
    asm volatile(".rept 100\n add $1, %0\n .endr" : "+r"(v));  // 100 dependent adds
  return double(__rdtsc() - t0) / (100.0 * iter);
}

template <class F>
double ops_per_cycle(F body, double tpc, int ops = 16, long iter = kIter) {
  const unsigned long t0 = __rdtsc();
  for (long n = 0; n < iter; ++n) body();
  return double(ops) * iter / (double(__rdtsc() - t0) / tpc);
}

// ---- AVX-512 mode (session 16; unchanged) ----
#define FMA(i) "vfmadd231ps %%ymm20, %%ymm21, %%ymm" #i "\n"
#define PERM(i) "vpermps %%ymm20, %%ymm21, %%ymm" #i "\n"
#define SRL(i) "vpsrld $4, %%ymm21, %%ymm" #i "\n"
#define ZX(i) "vpmovzxbd %%xmm21, %%ymm" #i "\n"
#define AND(i) "vpandd %%ymm20, %%ymm21, %%ymm" #i "\n"
#define ADD(i) "vaddps %%ymm20, %%ymm21, %%ymm" #i "\n"
#define CVT(i) "vcvtdq2ps %%ymm21, %%ymm" #i "\n"
#define SHUFB(i) "vpshufb %%ymm20, %%ymm21, %%ymm" #i "\n"
#define MIX(a, b) a(0) b(1) a(2) b(3) a(4) b(5) a(6) b(7) a(8) b(9) a(10) b(11) a(12) b(13) a(14) b(15)
// The ops write ymm0-15: the compiler must not keep values there across them.
#define CLOBBERS "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", \
                 "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15"
#define KINDS(X) X(FMA) X(PERM) X(SRL) X(ZX) X(AND) X(ADD) X(CVT) X(SHUFB)

void avx512_mode() {
  asm volatile("vxorps %%xmm20, %%xmm20, %%xmm20\n vxorps %%xmm21, %%xmm21, %%xmm21" ::: "memory");
  const double tpc = tsc_per_cycle();
  std::printf("TSC ticks per core cycle: %.3f\nalone (256-bit ops per cycle):", tpc);
#define ALONE(a) std::printf(" %s %.2f", #a, ops_per_cycle([] { asm volatile(MIX(a, a) ::: CLOBBERS); }, tpc));
  KINDS(ALONE)
  std::printf("\npairs (8 + 8 ops; per cycle):\n%6s", "");
#define HEAD(a) std::printf(" %6s", #a);
  KINDS(HEAD)
#define PAIR(a, b) std::printf(" %6.2f", ops_per_cycle([] { asm volatile(MIX(a, b) ::: CLOBBERS); }, tpc));
#define WITH_EACH(a) \
  PAIR(a, FMA) PAIR(a, PERM) PAIR(a, SRL) PAIR(a, ZX) PAIR(a, AND) PAIR(a, ADD) PAIR(a, CVT) PAIR(a, SHUFB)
#define ROW(a)              \
  std::printf("\n%6s", #a); \
  WITH_EACH(a)
  KINDS(ROW)
  std::printf("\n");
}

// ---- AVX2 mode: VEX encodings, ymm0-15 only ----
// Sources ymm14 (all zero: a valid vpermps/vpshufb index) and ymm15; %0 = a buffer in L1.
#define A_FMA(i) "vfmadd231ps %%ymm14, %%ymm15, %%ymm" #i "\n"
#define A_MUL(i) "vmulps %%ymm14, %%ymm15, %%ymm" #i "\n"
#define A_ADD(i) "vaddps %%ymm14, %%ymm15, %%ymm" #i "\n"
#define A_PERM(i) "vpermps %%ymm15, %%ymm14, %%ymm" #i "\n"
#define A_PERMD(i) "vpermd %%ymm15, %%ymm14, %%ymm" #i "\n"
#define A_SHUFB(i) "vpshufb %%ymm14, %%ymm15, %%ymm" #i "\n"
#define A_ZX(i) "vpmovzxbd %%xmm15, %%ymm" #i "\n"
#define A_SX(i) "vpmovsxbd %%xmm15, %%ymm" #i "\n"
#define A_SRL(i) "vpsrld $4, %%ymm15, %%ymm" #i "\n"
#define A_SRLV(i) "vpsrlvd %%ymm14, %%ymm15, %%ymm" #i "\n"
#define A_AND(i) "vpand %%ymm14, %%ymm15, %%ymm" #i "\n"
#define A_CVT(i) "vcvtdq2ps %%ymm15, %%ymm" #i "\n"
#define A_PH(i) "vcvtph2ps %%xmm15, %%ymm" #i "\n"
#define A_BLEND(i) "vblendps $0x55, %%ymm14, %%ymm15, %%ymm" #i "\n"
#define A_BCST(i) "vbroadcastss %%xmm15, %%ymm" #i "\n"
#define A_LD(i) "vmovups (%0), %%ymm" #i "\n"
#define A_ZXM(i) "vpmovzxbd 8(%0), %%ymm" #i "\n"
#define A_BCM(i) "vbroadcastss 4(%0), %%ymm" #i "\n"
#define A_FMAM(i) "vfmadd231ps 32(%0), %%ymm15, %%ymm" #i "\n"
#define A_PHM(i) "vcvtph2ps 16(%0), %%ymm" #i "\n"
#define A_ZXWM(i) "vpmovzxwd 16(%0), %%ymm" #i "\n"
#define A_SXM(i) "vpmovsxbd 8(%0), %%ymm" #i "\n"
#define A_BC128M(i) "vbroadcasti128 16(%0), %%ymm" #i "\n"
#define A_SLL(i) "vpslld $16, %%ymm15, %%ymm" #i "\n"
#define A_EXT(i) "vextracti128 $1, %%ymm15, %%xmm" #i "\n"
#define A_SRLVM(i) "vpsrlvd 32(%0), %%ymm15, %%ymm" #i "\n"
// alone: 14 destinations; pair: a and b alternate, pair k on register k.
#define A_ALONE14(a) a(0) a(1) a(2) a(3) a(4) a(5) a(6) a(7) a(8) a(9) a(10) a(11) a(12) a(13)
#define A_MIX(a, b) a(0) b(0) a(1) b(1) a(2) b(2) a(3) b(3) a(4) b(4) a(5) b(5) a(6) b(6)
#define A_KINDS(X)                                                                                            \
  X(A_FMA) X(A_MUL) X(A_ADD) X(A_PERM) X(A_PERMD) X(A_SHUFB) X(A_ZX) X(A_SX) X(A_SRL) X(A_SRLV) X(A_AND) \
      X(A_CVT) X(A_PH) X(A_BLEND) X(A_BCST) X(A_LD) X(A_ZXM) X(A_BCM) X(A_FMAM) X(A_PHM) X(A_ZXWM) X(A_SXM) \
          X(A_SLL) X(A_EXT) X(A_SRLVM)

// Port bound of each exact AVX2 decode kernel (batch 1): its inner loop's vector ops per
// unit of weights of one row, as counted in objdump -d of kernels_avx2.cpp.o (GCC 12, the
// decode loops of matmul_blockq / blockq_rows / tile<8, 1> / matmul_q6k; the shares of a
// multi-row loop divided by its rows; docs/engine.md, "Session 28"), with the register
// dependencies cut: every op reads ymm14/ymm15 (or L1), and an FMA reads the register the
// op just before it wrote (the decode's cvt -> fmsub -> dot FMA), never a loop-carried
// accumulator. So the figure is what the execution pipes and load ports allow, not the
// kernel's latency chains. Scalar and loop-control instructions are left out.
// Q4_K, 64 weights (one sub-block pair): 4 vpmovzxbd m64, 4 vbroadcastss m32 (d, m per
// sub-block), 8 x (vpand, vcvtdq2ps, vfmsub, vfmadd with x from memory).
#define G4(op, r) A_AND(r) A_CVT(r) A_FMA(r) op(r)
#define Q4K_64 A_ZXM(0) A_BCM(1) G4(A_FMAM, 2) G4(A_FMAM, 3) A_ZXM(4) A_BCM(5) G4(A_FMAM, 6) G4(A_FMAM, 7) \
  A_ZXM(8) A_BCM(9) G4(A_FMAM, 10) G4(A_FMAM, 11) A_ZXM(12) A_BCM(13) G4(A_FMAM, 0) G4(A_FMAM, 1)
// Q4_K's scales, once per 256 weights and row (k_scales: the 12 packed bytes to 8 (scale,
// min) products): 2 cvt, 5 logic, 4 mul, 2 vpmovzxbd, 2 shifts, 4 byte shuffles/shifts,
// 1 vcvtph2ps, 2 loads.
#define Q4K_SCALES A_CVT(0) A_CVT(1) A_AND(2) A_AND(3) A_AND(4) A_AND(5) A_AND(6) A_MUL(7) A_MUL(8) A_MUL(9) \
  A_MUL(10) A_ZX(11) A_ZX(12) A_SRL(13) A_SRL(0) A_SHUFB(1) A_SHUFB(2) A_SHUFB(3) A_SHUFB(4) A_PH(5) A_LD(6) A_LD(7)
#define Q4K_256 Q4K_64 Q4K_64 Q4K_64 Q4K_64 Q4K_SCALES
// Q4_1, 32 weights: 2 vpmovzxbd m64, scales (vmovq, vcvtph2ps, 2 vpermps), 2 x (vpand |
// vpsrld, vcvtdq2ps, fmadd, dot fmadd) x 2, 1 x load (the 4 x vectors serve 4 rows).
#define Q4_32(first, second) A_ZXM(0) A_ZXM(1) A_LD(2) A_PH(3) first second G4(A_FMA, 5) G4(A_FMA, 6) \
  A_SRL(7) A_CVT(7) A_FMA(7) A_FMA(7) A_SRL(8) A_CVT(8) A_FMA(8) A_FMA(8) A_LD(9)
#define Q4_1_64 Q4_32(A_PERM(4), A_PERM(10)) Q4_32(A_PERM(11), A_PERM(12))
// Q4_0, 32 weights: as Q4_1 with one vbroadcastss (d; register form, session 29) and one
// vmulps (-8d).
#define Q4_0_64 Q4_32(A_BCST(4), A_MUL(10)) Q4_32(A_BCST(11), A_MUL(12))
// Q5_0, 32 weights: 2 vpmovzxbd m64, 2 vpsrld, 1 vpslld, 4 vpsrlvd (qh; 3 from memory),
// 10 logic (and/or), 4 cvt, 4 fmsub, 4 dot FMAs (3 with x from memory), scales
// (vmovq, vcvtph2ps, vbroadcastss, vpbroadcastd m32, vmulps).
#define G5(op, r) A_SRLVM(r) A_AND(r) A_AND(r) A_CVT(r) A_FMA(r) op(r)
#define Q5_0_32 A_ZXM(0) A_ZXM(1) A_SRL(2) A_SRL(3) A_SLL(4) A_LD(5) A_PH(6) A_BCST(7) A_BCM(8) A_MUL(9) \
  A_AND(10) A_AND(11) G5(A_FMAM, 12) G5(A_FMAM, 13) G5(A_FMAM, 0) G5(A_FMA, 1)
// Q8_0, 32 weights: 4 x (vpmovsxbd m64, vcvtdq2ps, vmulps, dot fmadd), scales (vmovq,
// vcvtph2ps, vbroadcastss; before session 29 vpermps); one x load per 64 weights (8 rows
// share the 4 x vectors).
#define G8(r) A_SXM(r) A_CVT(r) A_MUL(r) A_FMA(r)
#define Q8_0_64 G8(0) G8(1) G8(2) G8(3) A_LD(4) A_PH(4) A_BCST(5) G8(6) G8(7) G8(8) G8(9) A_LD(10) A_PH(10) \
  A_BCST(11) A_LD(12)
// F16, 64 weights: 8 x (vcvtph2ps m128, fmadd); 1 x load (8 rows share x).
#define GH(r) A_PHM(r) A_FMA(r)
#define F16_64 GH(0) GH(1) GH(2) GH(3) GH(4) GH(5) GH(6) GH(7) A_LD(8)
// BF16, 64 weights: 8 x (vbroadcasti128 m128, vpshufb, fmadd); 1 x load (session 30; before,
// 8 x (vpmovzxwd m128, vpslld, fmadd)).
#define GB(r) A_BC128M(r) A_SHUFB(r) A_FMA(r)
#define BF16_64 GB(0) GB(1) GB(2) GB(3) GB(4) GB(5) GB(6) GB(7) A_LD(8)
// Q6_K, 128 weights (matmul_q6k, one row): the 6-bit codes from 3 loads by 16 logic ops
// and 9 shifts, stored (4 x 32 bytes) and widened by 16 vpmovsxbd m64 (session 28; before,
// 16 register-form vpmovsxbd after 4 vextracti128 + 8 vpsrldq), 16 cvt, 8 vbroadcastss
// m32 of the sub-block scales d*s (session 30; before, 8 x cvtsi2ss, vmulss and a register
// vbroadcastss), which the block makes as 2 x (vpmovsxbd m64, cvt, vmulps, store) per 256
// weights (q6_scale_products), 8 vmulps + 8 fmadd with x from memory, 8 fmadd of the
// scales into the sum.
#define A_ST(i) "vmovdqa %%ymm15, 64(%0)\n"
#define G6(r) A_SXM(r) A_CVT(r) A_LD(r) A_MUL(r) A_SXM(r) A_CVT(r) A_FMAM(r)
#define G6S(r) A_BCM(r) A_FMA(r)
#define Q6K_32(a, b, c, d) G6(a) G6(b) G6S(c) G6S(d) A_ST(a) A_AND(a) A_AND(b) A_AND(c) A_AND(d) A_SRL(a) A_SRL(b)
#define Q6K_128 Q6K_32(0, 1, 2, 3) Q6K_32(4, 5, 6, 7) Q6K_32(8, 9, 10, 11) Q6K_32(12, 13, 0, 1) A_SRL(2) A_LD(3) \
  A_LD(4) A_LD(5) A_SXM(6) A_CVT(6) A_MUL(6) A_ST(6)

alignas(64) float g_buf[32];
// AVX2 mode: short runs (well under a millisecond), the best of many, so a run that shared
// the core with another process (a busy 2-vCPU machine) does not count: the fewest TSC
// ticks per add of 31 calibrations, the most ops per cycle of 15 runs (41 for the
// per-type bounds).
constexpr long kShortIter = 100000;
double best_tsc_per_cycle() {
  double best = 1e300;
  for (int i = 0; i < 31; ++i) {
    const double v = tsc_per_cycle(kShortIter / 10);
    if (v < best) best = v;
  }
  return best;
}
template <class F>
double best_of_runs(F body, double tpc, int ops = 14, int runs = 15) {
  double best = 0;
  for (int i = 0; i < runs; ++i) {
    const double v = ops_per_cycle(body, tpc, ops, kShortIter);
    if (v > best) best = v;
  }
  return best;
}

// F16's bound mix (8 x vcvtph2ps m128 + fmadd, one x load per 64 weights, no chains) over
// a rows x cols matrix's own addresses, 8 rows at a time side by side as the decode tile
// tile<8, 1> reads them, rows `pad` bytes longer than their 2 * cols: the bound with the
// loads walking real rows, not one L1 line (session 29: 64 x 2048 read half the one-line
// figure). Weights per core cycle, the best of 41 passes over the matrix and at least 20 ms
// of them (as bench_kernels times the kernel).
double f16_rows_bound(long rows, long cols, long pad, double tpc) {
  const long stride = 2 * cols + pad;
  static unsigned char buf[64 * (2 * 2048 + 256) + 64];
  static float xs[2048];
  if (rows * stride > long(sizeof buf) || cols > 2048) return 0;
  std::memset(buf, 0x38, sizeof buf);  // f16 0x3838 = 0.527
  double best = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int run = 0; run < 41 || std::chrono::steady_clock::now() - start < std::chrono::milliseconds(20); ++run) {
    const unsigned long t0 = __rdtsc();
    for (long r = 0; r + 8 <= rows; r += 8) {
      const unsigned char* q = buf + r * stride;
      const float* x = xs;
      for (long i = 0; i < cols / 8; ++i, q += 16, x += 8)
        asm volatile(
            "vcvtph2ps (%0), %%ymm0\n vfmadd231ps %%ymm14, %%ymm15, %%ymm0\n"
            "vcvtph2ps (%0,%2,1), %%ymm1\n vfmadd231ps %%ymm14, %%ymm15, %%ymm1\n"
            "vcvtph2ps (%0,%2,2), %%ymm2\n vfmadd231ps %%ymm14, %%ymm15, %%ymm2\n"
            "vcvtph2ps (%0,%3,1), %%ymm3\n vfmadd231ps %%ymm14, %%ymm15, %%ymm3\n"
            "vcvtph2ps (%0,%2,4), %%ymm4\n vfmadd231ps %%ymm14, %%ymm15, %%ymm4\n"
            "vcvtph2ps (%0,%4,1), %%ymm5\n vfmadd231ps %%ymm14, %%ymm15, %%ymm5\n"
            "vcvtph2ps (%0,%3,2), %%ymm6\n vfmadd231ps %%ymm14, %%ymm15, %%ymm6\n"
            "vcvtph2ps (%0,%5,1), %%ymm7\n vfmadd231ps %%ymm14, %%ymm15, %%ymm7\n"
            "vmovups (%1), %%ymm8\n" ::"r"(q), "r"(x), "r"(stride), "r"(3 * stride), "r"(5 * stride),
            "r"(7 * stride)
            : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "memory");
    }
    const double v = double(rows / 8 * 8) * double(cols) / (double(__rdtsc() - t0) / tpc);
    if (v > best) best = v;
  }
  return best;
}

void avx2_tables(float* p, double tpc) {
  std::printf("alone (256-bit ops per cycle; LD = vmovups m256, ZXM = vpmovzxbd m64, BCM = vbroadcastss m32, "
              "FMAM = vfmadd231ps m256):\n");
#define A_NAME(a) (#a + 2)
#define A_ALONE(a) \
  std::printf(" %s %.2f", A_NAME(a), best_of_runs([p] { asm volatile(A_ALONE14(a) ::"r"(p) : CLOBBERS); }, tpc));
  A_KINDS(A_ALONE)
  std::printf("\npairs (7 + 7 ops; per cycle):\n%6s", "");
#define A_HEAD(a) std::printf(" %5s", A_NAME(a));
  A_KINDS(A_HEAD)
#define A_PAIR(a, b) std::printf(" %5.2f", best_of_runs([p] { asm volatile(A_MIX(a, b) ::"r"(p) : CLOBBERS); }, tpc));
#define A_WITH_EACH(a)                                                                                            \
  A_PAIR(a, A_FMA) A_PAIR(a, A_MUL) A_PAIR(a, A_ADD) A_PAIR(a, A_PERM) A_PAIR(a, A_PERMD) A_PAIR(a, A_SHUFB)     \
      A_PAIR(a, A_ZX) A_PAIR(a, A_SX) A_PAIR(a, A_SRL) A_PAIR(a, A_SRLV) A_PAIR(a, A_AND) A_PAIR(a, A_CVT)      \
          A_PAIR(a, A_PH) A_PAIR(a, A_BLEND) A_PAIR(a, A_BCST) A_PAIR(a, A_LD) A_PAIR(a, A_ZXM) A_PAIR(a, A_BCM) \
              A_PAIR(a, A_FMAM) A_PAIR(a, A_PHM) A_PAIR(a, A_ZXWM) A_PAIR(a, A_SXM) A_PAIR(a, A_SLL)       \
                  A_PAIR(a, A_EXT) A_PAIR(a, A_SRLVM)
#define A_ROW(a)                       \
  std::printf("\n%6s", A_NAME(a)); \
  std::fflush(stdout);                 \
  A_WITH_EACH(a)
  A_KINDS(A_ROW)
}

void avx2_bounds(float* p, double tpc) {
  std::printf("port bound of the exact AVX2 decode loops (weights of one row per core cycle; per-type mixes above):\n");
#define A_BOUND(name, weights, mix)                                                                             \
  std::printf("  %-5s %6.2f\n", name,                                                                         \
              best_of_runs([p] { asm volatile(mix ::"r"(p) : CLOBBERS); }, tpc, weights, 41)); \
  std::fflush(stdout);
  A_BOUND("q4_k", 256, Q4K_256)
  A_BOUND("q4_1", 64, Q4_1_64)
  A_BOUND("q4_0", 64, Q4_0_64)
  A_BOUND("q5_0", 32, Q5_0_32)
  A_BOUND("q8_0", 64, Q8_0_64)
  A_BOUND("f16", 64, F16_64)
  A_BOUND("bf16", 64, BF16_64)
  A_BOUND("q6_k", 128, Q6K_128)
  std::printf("f16's mix over real rows (8 at a time, as tile<8, 1>): 64x2048 %.2f, rows 128 bytes apart more %.2f, "
              "64x1024 %.2f\n",
              f16_rows_bound(64, 2048, 0, tpc), f16_rows_bound(64, 2048, 128, tpc), f16_rows_bound(64, 1024, 0, tpc));
  std::printf("TSC ticks per core cycle at the end: %.3f\n", best_tsc_per_cycle());
}

void avx2_mode(bool bounds_only) {
  asm volatile("vxorps %%xmm14, %%xmm14, %%xmm14\n vxorps %%xmm15, %%xmm15, %%xmm15" ::: "memory");
  const double tpc = best_tsc_per_cycle();
  std::printf("AVX2 mode (ymm0-15, VEX). TSC ticks per core cycle: %.3f\n", tpc);
  float* p = g_buf;
  if (!bounds_only) avx2_tables(p, tpc);
  avx2_bounds(p, tpc);
}
}  // namespace


int main(int argc, char** argv) {
  const bool force_avx2 = argc > 1 && std::strcmp(argv[1], "avx2") == 0;
  if (!force_avx2 && __builtin_cpu_supports("avx512vl")) {
    avx512_mode();
    return 0;
  }
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("f16c")) {
    std::puts("bench_ports: this CPU has neither AVX-512 VL nor AVX2+FMA+F16C; skipped");
    return 0;
  }
  avx2_mode(argc > 2 && std::strcmp(argv[2], "bounds") == 0);
  return 0;
}
