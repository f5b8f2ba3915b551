#!/usr/bin/env bash
# Kernel microbenchmark, two builds side by side: tsc cycles per weight byte of one
# matmul_rows call (best of 50 calls and 20 ms, scripts/bench_kernels.cpp) on an L2-resident matrix, one
# thread, per type x ISA x batch; each figure is the minimum over --runs alternating runs
# of the base and the new build, so a loaded machine (other processes stealing the core)
# moves it little. Prints base, new and new/base (below 1 = faster). For whole-model
# tok/s against llama.cpp use scripts/bench_run.sh.
#
#   scripts/bench_kernels.sh [--base DIR] [--build DIR] [--types "q4_k q4_1 ..."]
#                            [--isa "avx2 avx512"] [--batches "1 8 128"] [--shape 256x2048]
#                            [--runs 6]
#
# --build (default build) and --base (optional: a build of the commit to compare with,
# e.g. a worktree of main) must have been built with ./scripts/build.sh; the benchmark is
# compiled against each one's static libraries into DIR/bench_kernels. Without --base
# only the build's own figures are printed. --isa defaults to avx2, plus avx512 where the
# CPU has it. Types: q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k f16 bf16 f32, and q4_k-fast
# q5_k-fast q6_k-fast, bf16-fast (run --fast-math's kernels; bf16-fast on AVX512_BF16 CPUs, avx512 only).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build BASE="" TYPES="q4_1 q4_k q5_0 q8_0 q6_k f16 bf16" BATCHES="1 8 128" SHAPE=256x2048 RUNS=6 ISAS=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --base) BASE=$2; shift 2 ;;
    --types) TYPES=$2; shift 2 ;;
    --batches) BATCHES=$2; shift 2 ;;
    --shape) SHAPE=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --isa) ISAS=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_kernels.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n "$ISAS" ]] || { ISAS=avx2; grep -qw avx512bw /proc/cpuinfo && ISAS="avx2 avx512"; }
ROWS=${SHAPE%x*} COLS=${SHAPE#*x}

compile() {  # compile DIR: DIR/bench_kernels against DIR's libraries
  local d=$1
  for lib in engine format core io; do
    [[ -f "$d/libnunchaku_$lib.a" ]] || { echo "bench_kernels.sh: $d/libnunchaku_$lib.a missing (build it with ./scripts/build.sh)" >&2; exit 2; }
  done
  g++ -O2 -std=c++20 -I src -I . scripts/bench_kernels.cpp -o "$d/bench_kernels" \
    -Wl,--start-group "$d"/libnunchaku_{engine,format,core,io}.a -Wl,--end-group -lfmt -lspdlog -lpthread
}
compile "$BUILD"
[[ -z "$BASE" ]] || compile "$BASE"

one() {  # one BIN ISA B TYPE -> tsc per weight byte
  NUNCHAKU_ISA=$2 "$1/bench_kernels" "$ROWS" "$COLS" "$3" "$4" | sed -E 's/.*"tsc_per_weight_byte":([0-9.]+).*/\1/'
}
printf '%-10s %-7s %5s  %10s %10s %9s\n' type isa batch base new new/base
for t in $TYPES; do
  for isa in $ISAS; do
    for b in $BATCHES; do
      best_new=1e300 best_base=1e300
      for ((i = 0; i < RUNS; i++)); do
        v=$(one "$BUILD" "$isa" "$b" "$t"); best_new=$(awk -v a="$v" -v b="$best_new" 'BEGIN{print (a<b)?a:b}')
        if [[ -n "$BASE" ]]; then
          v=$(one "$BASE" "$isa" "$b" "$t"); best_base=$(awk -v a="$v" -v b="$best_base" 'BEGIN{print (a<b)?a:b}')
        fi
      done
      if [[ -n "$BASE" ]]; then
        printf '%-10s %-7s %5s  %10.4f %10.4f %8.2fx\n' "$t" "$isa" "$b" "$best_base" "$best_new" "$(awk -v a="$best_new" -v b="$best_base" 'BEGIN{print a/b}')"
      else
        printf '%-10s %-7s %5s  %10s %10.4f %9s\n' "$t" "$isa" "$b" - "$best_new" -
      fi
    done
  done
done
