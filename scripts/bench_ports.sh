#!/usr/bin/env bash
# The exact AVX2 decode kernels against their port bound (docs/engine.md, "Session 28"):
# scripts/bench_ports.cpp in AVX2 mode measures each kernel's inner-loop op mix with the
# dependencies cut (weights of one row per core cycle), then scripts/bench_kernels.cpp
# measures the kernel itself at batch 1 on an L2-resident matrix, one thread, in weights
# per core cycle (both count cycles with the same dependent add chain); each kernel figure
# is the best of --runs runs, the types alternating (this VM has two speed modes ~30%
# apart), and so is each bound (bench_ports avx2 bounds, once per round). Prints type,
# bound, kernel, kernel/bound, F16's bound mix run over real rows (the loads walking a
# 64x2048 matrix as the decode tile does, not one L1 line), F16's kernel against that mix
# (its best over the rounds), and the load average before and after.
#
#   scripts/bench_ports.sh [--build DIR] [--types "q4_k q6_k q4_1 q4_0 q5_0 q8_0 f16 bf16"]
#                          [--shape 64x2048] [--runs 6] [--table]
#
# --build (default build) must have been built with ./scripts/build.sh (its static
# libraries). --table also prints bench_ports' single-op rates and pair table. Run it on a
# quiet machine: the figures are bests, but a busy core still pulls them down.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build TYPES="q4_k q6_k q4_1 q4_0 q5_0 q8_0 f16 bf16" SHAPE=64x2048 RUNS=6 TABLE=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --types) TYPES=$2; shift 2 ;;
    --shape) SHAPE=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --table) TABLE=1; shift ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_ports.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
grep -qw avx2 /proc/cpuinfo || { echo "bench_ports.sh: this CPU has no AVX2; skipped"; exit 0; }
for lib in engine format core io; do
  [[ -f "$BUILD/libnunchaku_$lib.a" ]] || { echo "bench_ports.sh: $BUILD/libnunchaku_$lib.a missing (build it with ./scripts/build.sh)" >&2; exit 2; }
done
g++ -O2 scripts/bench_ports.cpp -o "$BUILD/bench_ports"
g++ -O2 -std=c++20 -I src -I . scripts/bench_kernels.cpp -o "$BUILD/bench_kernels" \
  -Wl,--start-group "$BUILD"/libnunchaku_{engine,format,core,io}.a -Wl,--end-group -lfmt -lspdlog -lpthread
ROWS=${SHAPE%x*} COLS=${SHAPE#*x}
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
[[ $TABLE == 1 ]] && "$BUILD/bench_ports" avx2
declare -A bound best
rows_best=0
for t in $TYPES; do best[$t]=0 bound[$t]=0; done
max() { awk -v a="$1" -v b="$2" 'BEGIN{print (a>b)?a:b}'; }
for ((i = 0; i < RUNS; i++)); do
  # The bounds are measured again every round, as the kernels are (this VM's speed modes
  # move a single bench_ports run by up to 30 %): both figures are bests over the rounds.
  PORTS=$("$BUILD/bench_ports" avx2 bounds)
  while read -r t v; do [[ -n "${bound[$t]+x}" ]] && bound[$t]=$(max "$v" "${bound[$t]}"); done \
    < <(echo "$PORTS" | sed -n '/^port bound/,/^TSC/p' | awk 'NF == 2 && $2 ~ /^[0-9.]+$/')
  F16ROWS=$(echo "$PORTS" | grep "^f16's mix" || true)
  v=$(echo "$F16ROWS" | sed -nE 's/.*: 64x2048 ([0-9.]+),.*/\1/p')
  [[ -n "$v" ]] && rows_best=$(max "$v" "$rows_best")
  for t in $TYPES; do
    v=$(NUNCHAKU_ISA=avx2 "$BUILD/bench_kernels" "$ROWS" "$COLS" 1 "$t" | sed -E 's/.*"macs_per_cycle":([0-9.]+).*/\1/')
    best[$t]=$(max "$v" "${best[$t]}")
  done
done
printf '%-6s %10s %10s %8s   (weights of one row per core cycle, batch 1, %s, avx2)\n' type bound kernel ratio "$SHAPE"
for t in $TYPES; do
  b=${bound[$t]}
  if [[ "$b" == 0 ]]; then
    printf '%-6s %10s %10.2f %8s\n' "$t" - "${best[$t]}" -
  else
    printf '%-6s %10.2f %10.2f %7.2fx\n' "$t" "$b" "${best[$t]}" "$(awk -v a="${best[$t]}" -v b="$b" 'BEGIN{print a/b}')"
  fi
done
echo "${F16ROWS:-} (the last round)"
# F16 reads 2 bytes per weight from L2 in 8 row streams: the bound's mix itself, run over the
# real rows, is slower than at one L1 line (docs/engine.md, sessions 29-30), so F16's kernel
# is also set against that mix's best.
if [[ -n "${best[f16]+x}" && "$rows_best" != 0 ]]; then
  printf 'f16 kernel against the mix over real rows (64x2048, best of the rounds %.2f): %.2fx\n' "$rows_best" \
    "$(awk -v a="${best[f16]}" -v b="$rows_best" 'BEGIN{print a/b}')"
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
