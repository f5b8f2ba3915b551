// Vector-op throughput on this core, alone and in pairs: which ops share execution pipes
// (docs/engine.md, "Session 16"). Each measured loop is 16 independent 256-bit ops (or 8+8
// of two kinds) on registers; cycles come from a chain of dependent integer adds (1 cycle
// each), so results are ops per core cycle whatever the TSC rate. Needs AVX-512 (VL).
//   g++ -O2 -mavx512f -mavx512vl -mavx512bw -mfma scripts/bench_ports.cpp -o /tmp/bench_ports
//   /tmp/bench_ports            # the single-op rates, then a table of pairs
#include <x86intrin.h>

#include <cstdio>

namespace {
constexpr long kIter = 4000000;

#define FMA(i) "vfmadd231ps %%ymm20, %%ymm21, %%ymm" #i "\n"
#define PERM(i) "vpermps %%ymm20, %%ymm21, %%ymm" #i "\n"
#define SRL(i) "vpsrld $4, %%ymm21, %%ymm" #i "\n"
#define ZX(i) "vpmovzxbd %%xmm21, %%ymm" #i "\n"
#define AND(i) "vpandd %%ymm20, %%ymm21, %%ymm" #i "\n"
#define ADD(i) "vaddps %%ymm20, %%ymm21, %%ymm" #i "\n"
#define CVT(i) "vcvtdq2ps %%ymm21, %%ymm" #i "\n"
#define SHUFB(i) "vpshufb %%ymm20, %%ymm21, %%ymm" #i "\n"
#define MIX(a, b) a(0) b(1) a(2) b(3) a(4) b(5) a(6) b(7) a(8) b(9) a(10) b(11) a(12) b(13) a(14) b(15)
#define KINDS(X) X(FMA) X(PERM) X(SRL) X(ZX) X(AND) X(ADD) X(CVT) X(SHUFB)

double tsc_per_cycle() {
  const unsigned long t0 = __rdtsc();
  long v = 0;
  for (long n = 0; n < kIter; ++n)
    asm volatile(".rept 100\n add $1, %0\n .endr" : "+r"(v));  // 100 dependent adds
  return double(__rdtsc() - t0) / (100.0 * kIter);
}

template <class F>
double ops_per_cycle(F body, double tpc) {
  const unsigned long t0 = __rdtsc();
  for (long n = 0; n < kIter; ++n) body();
  return 16.0 * kIter / (double(__rdtsc() - t0) / tpc);
}
}  // namespace

int main() {
  if (!__builtin_cpu_supports("avx512vl")) {
    std::puts("bench_ports: this CPU has no AVX-512 VL; skipped");
    return 0;
  }
  asm volatile("vxorps %%xmm20, %%xmm20, %%xmm20\n vxorps %%xmm21, %%xmm21, %%xmm21" ::: "memory");
  const double tpc = tsc_per_cycle();
  std::printf("TSC ticks per core cycle: %.3f\nalone (256-bit ops per cycle):", tpc);
#define ALONE(a) std::printf(" %s %.2f", #a, ops_per_cycle([] { asm volatile(MIX(a, a) ::: "memory"); }, tpc));
  KINDS(ALONE)
  std::printf("\npairs (8 + 8 ops; per cycle):\n%6s", "");
#define HEAD(a) std::printf(" %6s", #a);
  KINDS(HEAD)
#define PAIR(a, b) std::printf(" %6.2f", ops_per_cycle([] { asm volatile(MIX(a, b) ::: "memory"); }, tpc));
#define WITH_EACH(a) \
  PAIR(a, FMA) PAIR(a, PERM) PAIR(a, SRL) PAIR(a, ZX) PAIR(a, AND) PAIR(a, ADD) PAIR(a, CVT) PAIR(a, SHUFB)
#define ROW(a)              \
  std::printf("\n%6s", #a); \
  WITH_EACH(a)
  KINDS(ROW)
  std::printf("\n");
}
