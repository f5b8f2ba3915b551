#!/usr/bin/env bash
# The expert kernels (matmul_expert_rows: MXFP4 and input-major stacks) before and after their
# SIMD versions, paired in one run.
#
#   scripts/bench_experts.sh [--build DIR] [--rounds N] [--threads N] [--batches "1 8 64"]
#                            [--model-batches "1"] [--no-model] [--no-llama-cpp]
#
# 1. Kernels (scripts/bench_experts.cpp, compiled against DIR's libraries): one expert matrix
#    of gpt-oss-20b's and Llama 4 Scout's shapes, one thread, the scalar kernels and the
#    active ISA's taking turns in one process, weights from DRAM (copies past the last-level
#    cache); ms per call (best of --rounds x 2 each), weight GB/s, speedup = scalar / SIMD.
# 2. Whole model (unless --no-model): a gpt-oss-shaped GGUF with ggml MXFP4 experts
#    (scripts/make_bench_gguf.py gptoss2b, ~2 GB in $BENCH_DIR), prompt (16 tokens) and
#    decode (32 steps) tok/s at --model-batches with --threads (2) threads ([.engine-bench]
#    test case): nunchaku, nunchaku with NUNCHAKU_EXPERT_KERNELS=scalar (the kernels before),
#    and llama.cpp (llama-cpp-python, scripts/bench_llamacpp.py), taking turns --rounds
#    times; each ratio is the median over the rounds of that round's own pair.
# Timings need a quiet machine: the load average is printed before and after.
# Env: BENCH_DIR (default /tmp/nunchaku-bench), PYTHON (numpy + gguf; default
# /work/venv-torch/bin/python with llama.cpp's gguf-py), LLAMA_PYTHON (one with llama_cpp;
# default $PYTHON).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build ROUNDS=3 THREADS=2 BATCHES="1 8 64" MODEL_BATCHES="1" MODEL=1 LLAMA=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --batches) BATCHES=$2; shift 2 ;;
    --model-batches) MODEL_BATCHES=$2; shift 2 ;;
    --no-model) MODEL=0; shift ;;
    --no-llama-cpp) LLAMA=0; shift ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_experts.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-/work/venv-torch/bin/python}
LPY=${LLAMA_PYTHON:-$PY}
GGUF_PY=/work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py
"$PY" -c "import gguf" 2>/dev/null || export PYTHONPATH="$GGUF_PY${PYTHONPATH:+:$PYTHONPATH}"
DIR=${BENCH_DIR:-/tmp/nunchaku-bench}
mkdir -p "$DIR/gguf"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

for lib in engine format core io; do
  [[ -f "$BUILD/libnunchaku_$lib.a" ]] || { echo "bench_experts.sh: $BUILD/libnunchaku_$lib.a missing (build it with ./scripts/build.sh)" >&2; exit 2; }
done
g++ -O2 -std=c++20 -I src -I . scripts/bench_experts.cpp -o "$BUILD/bench_experts" \
  -Wl,--start-group "$BUILD"/libnunchaku_{engine,format,core,io}.a -Wl,--end-group -lfmt -lspdlog -lpthread

# kind outputs inputs: gpt-oss-20b's gate_up as HF stores it (MXFP4 split, or bf16 input-major
# after dequantization), its down; the GGUF's gate (or up) alone; Llama 4 Scout's gate_up.
CASES=("mxfp4 5760 2880" "mxfp4 2880 2880" "mxfp4-ggml 2880 2880" "bf16-im 5760 2880" "bf16-im 16384 5120")
KOUT="$DIR/experts-kernels.jsonl"
: > "$KOUT"
for c in "${CASES[@]}"; do
  read -r kind rows cols <<< "$c"
  for b in $BATCHES; do
    # Over 2G multiply-adds a call the scalar side alone takes minutes: left out.
    (( rows * cols * b <= 2000000000 )) || { echo "skipped: $kind ${rows}x$cols batch $b (over 2G multiply-adds a call)" >&2; continue; }
    "$BUILD/bench_experts" "$kind" "$rows" "$cols" "$b" "$ROUNDS" >> "$KOUT"
  done
done
python3 - "$KOUT" <<'PY'
import json, sys
print("| kind | outputs x inputs | batch | isa | scalar ms | SIMD ms | speedup | scalar GB/s | SIMD GB/s |")
print("|---|---|---|---|---|---|---|---|---|")
for line in open(sys.argv[1]):
    r = json.loads(line)
    assert r["same_bits"], r
    print(f"| {r['kind']} | {r['outputs']}x{r['inputs']} | {r['batch']} | {r['isa']} | {r['scalar_ms']:.2f} | "
          f"{r['simd_ms']:.2f} | {r['speedup']:.2f}x | {r['scalar_gb_s']:.2f} | {r['simd_gb_s']:.2f} |")
PY

if [[ $MODEL == 1 ]]; then
  M="$DIR/gguf/gptoss2b-mxfp4.gguf"
  [[ -f "$M" ]] || { echo "== writing $M" >&2; "$PY" scripts/make_bench_gguf.py "$M.tmp" gptoss2b mxfp4 && mv "$M.tmp" "$M"; }
  [[ -x "$BUILD/nunchaku_tests" ]] || { echo "bench_experts.sh: $BUILD/nunchaku_tests missing" >&2; exit 2; }
  if [[ $LLAMA == 1 ]] && ! "$LPY" -c "import llama_cpp" 2>/dev/null; then
    echo "llama_cpp is not importable by $LPY: llama.cpp rows skipped (set LLAMA_PYTHON)" >&2
    LLAMA=0
  fi
  OUT="$DIR/experts.jsonl"
  : > "$OUT"
  ours() {  # ours ENGINE-NAME ROUND [ENV...]
    local name=$1 r=$2
    shift 2
    env "$@" NUNCHAKU_BENCH_MODEL="$M" NUNCHAKU_BENCH_THREADS=$THREADS NUNCHAKU_BENCH_PROMPT=16 NUNCHAKU_BENCH_DECODE=32 \
      NUNCHAKU_BENCH_BATCHES="$MODEL_BATCHES" "$BUILD/nunchaku_tests" "[.engine-bench]" |
      sed -n "s/^BENCH /{\"engine\":\"$name\",\"round\":$r,\"r\":/p" | sed 's/$/}/' >> "$OUT"
  }
  for r in $(seq "$ROUNDS"); do
    echo "== round $r" >&2
    ours simd "$r"
    ours scalar "$r" NUNCHAKU_EXPERT_KERNELS=scalar
    if [[ $LLAMA == 1 ]]; then
      "$LPY" scripts/bench_llamacpp.py "$M" "$THREADS" 16 32 "$MODEL_BATCHES" 2> "$DIR/llamacpp-experts.log" |
        sed "s/^/{\"engine\":\"llama.cpp\",\"round\":$r,\"r\":/; s/$/}/" >> "$OUT"
    fi
  done
  python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = lambda e: {r["round"]: r["r"] for r in rows if r["engine"] == e}
simd, scalar, llama = by("simd"), by("scalar"), by("llama.cpp")
print(f"\nmodel: {next(iter(simd.values()))['describe']}; best of {len(simd)} rounds")
print("| batch | metric | nunchaku SIMD | nunchaku scalar experts | SIMD / scalar | llama.cpp | SIMD / llama.cpp |")
print("|---|---|---|---|---|---|---|")
for b in sorted({k for r in simd.values() for k in r if k.startswith("b")}, key=lambda k: int(k[1:])):
    for m in ("prompt_tok_s", "decode_tok_s"):
        best = lambda d: max(r[b][m] for r in d.values()) if d else float("nan")
        med = lambda d: statistics.median(simd[k][b][m] / d[k][b][m] for k in simd if k in d) if d else float("nan")
        lc = f"{best(llama):.2f} | {med(llama):.2f}x" if llama else "- | -"
        print(f"| {b[1:]} | {m[:-6]} | {best(simd):.2f} | {best(scalar):.2f} | {med(scalar):.2f}x | {lc} |")
PY
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
