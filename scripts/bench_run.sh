#!/usr/bin/env bash
# Engine throughput on the shapes of small real models: prompt and decode tok/s at batch 1
# and 8, against llama.cpp on the same GGUF in the same run, and decode as a fraction of
# the DRAM bound (tok/s x bytes of weights per step / read bandwidth measured in the same
# run; batch 8 reads the weights once per step for 8 tokens).
#
#   scripts/bench_run.sh [--threads N] [--llama-cpp] [--build DIR] [--rounds N]
#                        [--shapes "smol135m llama1b"] [--types "q4_1 q4_k q8_0 f16 bf16"]
#                        [--isa "avx2 avx512"] [--batches "1 8"] [--fast-math]
#
# Models: scripts/make_bench_gguf.py writes random-weight llama GGUFs (shapes: smol135m =
# hidden 576, 30 layers, 9:3 heads, vocab 49152; smol360m = 960, 32 layers, 15:5;
# llama1b = 2048, 16 layers, 32:8, vocab 128256; all tied), every matrix of one type, to
# $BENCH_DIR (default /tmp/nunchaku-bench); one file serves both engines.
# --isa: NUNCHAKU_ISA values nunchaku is run with (default: avx2, and avx512 when the CPU
# has it). --rounds N (default 3): engines and ISAs take turns N times and each figure is
# the best of its N (a shared 2-core VM moves single runs by 20%). Within a round each of
# our rows runs just before the llama.cpp build it is compared with, and every "vs
# llama.cpp" ratio is the median over the rounds of that round's own pair (ours / theirs,
# seconds apart): the VM's DRAM bandwidth drifts by 1.5x over minutes, which moves the
# best-of figures of two engines measured at different moments apart, and a pair measured
# together much less. --fast-math adds a row
# "ISA-fast" per ISA: nunchaku with run --fast-math (8-bit activations for Q4_K weights;
# other types are unchanged), against the same llama.cpp build.
# --llama-cpp also runs llama.cpp (llama-cpp-python, built from source by pip; each build
# takes >10 min on 2 cores) through scripts/bench_llamacpp.py (its C API: 8 sequences in
# one context for batch 8), with the same prompts, thread count and measurement, once per
# instruction set so that each of our ISAs is compared with llama.cpp on the same one:
# $BENCH_DIR/venv is built with GGML_NATIVE (what the CPU has: our avx512 rows, or every
# row on a CPU without AVX-512), $BENCH_DIR/venv-avx2 with AVX2/FMA/F16C and no AVX-512
# (our avx2 rows, where the CPU has AVX-512). The JSON rows keep llama.cpp's own
# system_info line, which names the instructions it was built with.
# Env: BENCH_PROMPT (prompt tokens per sequence, 128), BENCH_DECODE (decode steps, 32),
# PYTHON (one with numpy and gguf-py; default /work/venv-convert/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=$(nproc)
LLAMA_CPP=0
FAST=0
BUILD=build
ROUNDS=3
SHAPES="smol135m llama1b"
TYPES="q4_1 q4_k q8_0 f16 bf16"
BATCHES="1 8"
ISAS="avx2"
grep -q avx512f /proc/cpuinfo 2>/dev/null && grep -q avx512bw /proc/cpuinfo && ISAS="avx2 avx512"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) THREADS=$2; shift 2 ;;
    --llama-cpp) LLAMA_CPP=1; shift ;;
    --fast-math) FAST=1; shift ;;
    --build) BUILD=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --shapes) SHAPES=$2; shift 2 ;;
    --types) TYPES=$2; shift 2 ;;
    --isa) ISAS=$2; shift 2 ;;
    --batches) BATCHES=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-/work/venv-convert/bin/python}
DIR=${BENCH_DIR:-/tmp/nunchaku-bench}
PROMPT=${BENCH_PROMPT:-128}
DECODE=${BENCH_DECODE:-32}
mkdir -p "$DIR/gguf"

for shape in $SHAPES; do
  for ty in $TYPES; do
    f="$DIR/gguf/$shape-$ty.gguf"
    if [[ ! -f "$f" ]]; then
      echo "== writing $f" >&2
      "$PY" scripts/make_bench_gguf.py "$f.tmp" "$shape" "$ty" && mv "$f.tmp" "$f"
    fi
  done
done

if [[ ! -x "$BUILD/nunchaku_tests" ]]; then
  cmake -S . -B "$BUILD" -G Ninja -DNUNCHAKU_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$BUILD" --target nunchaku_tests -j2 >/dev/null

# llama.cpp builds: "native" (GGML_NATIVE) serves our avx512 rows, and every row where the
# CPU has no AVX-512; "avx2" (AVX2, FMA, F16C, no AVX-512 or VNNI) our avx2 rows otherwise.
LLAMA_AVX2_ARGS="-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
LLAMA_AVX2_ARGS+=" -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF"
llama_build_of() {  # llama_build_of ISA: which llama.cpp build our rows of ISA are compared with
  if [[ $1 == avx2 ]] && grep -qw avx512f /proc/cpuinfo; then echo avx2; else echo native; fi
}
llama_venv() { [[ $1 == native ]] && echo "$DIR/venv" || echo "$DIR/venv-$1"; }
LLAMA_BUILDS=""
if [[ $LLAMA_CPP == 1 ]]; then
  for isa in $ISAS; do
    b=$(llama_build_of "$isa")
    [[ " $LLAMA_BUILDS " == *" $b "* ]] || LLAMA_BUILDS+=" $b"
  done
  for b in $LLAMA_BUILDS; do
    v=$(llama_venv "$b")
    [[ -x "$v/bin/python" ]] || python3 -m venv --system-site-packages "$v"
    if ! "$v/bin/python" -c "import llama_cpp" 2>/dev/null; then
      echo "== pip install llama-cpp-python into $v (builds llama.cpp from source, $b; slow)" >&2
      args="-DGGML_NATIVE=ON"
      [[ $b == avx2 ]] && args=$LLAMA_AVX2_ARGS
      CMAKE_ARGS="$args" "$v/bin/pip" install --no-cache-dir llama-cpp-python >&2
    fi
  done
fi

RESULTS="$DIR/results.jsonl"
: > "$RESULTS"
ROUND=0
tag() {  # tag SHAPE TYPE ENGINE ISA: adds the row's keys (and the round) to the JSON on stdin
  python3 -c "import json,sys; d=json.loads(sys.stdin.read()); d.update(shape='$1', type='$2', engine='$3', isa='$4', round=$ROUND); print(json.dumps(d))"
}
run_ours() {  # run_ours SHAPE TYPE ISA (ISA-fast: with --fast-math)
  echo "== nunchaku $1 $2 $3, $THREADS threads" >&2
  local fast=0
  [[ $3 == *-fast ]] && fast=1
  NUNCHAKU_ISA=${3%-fast} NUNCHAKU_BENCH_FAST_MATH=$fast NUNCHAKU_BENCH_MODEL="$DIR/gguf/$1-$2.gguf" NUNCHAKU_BENCH_THREADS=$THREADS \
    NUNCHAKU_BENCH_PROMPT=$PROMPT NUNCHAKU_BENCH_DECODE=$DECODE NUNCHAKU_BENCH_BATCHES="$BATCHES" \
    "$BUILD/nunchaku_tests" "[.engine-bench]" | sed -n 's/^BENCH //p' | tag "$1" "$2" nunchaku "$3" >> "$RESULTS"
}
run_llama() {  # run_llama SHAPE TYPE BUILD
  echo "== llama.cpp ($3) $1 $2, $THREADS threads" >&2
  "$(llama_venv "$3")/bin/python" scripts/bench_llamacpp.py "$DIR/gguf/$1-$2.gguf" "$THREADS" "$PROMPT" "$DECODE" \
    "$BATCHES" 2> "$DIR/llamacpp.log" | tag "$1" "$2" llama.cpp "$3" >> "$RESULTS" ||
    { echo "llama.cpp failed: see $DIR/llamacpp.log" >&2; exit 1; }
}

# Our ISAs grouped by the llama.cpp build they are compared with, each group's runs (ISA,
# ISA-fast) just before that build's (the pairing of the ratios).
ISA_GROUPS=""  # (not GROUPS: bash reserves that name)
for isa in $ISAS; do
  g=$(llama_build_of "$isa")
  [[ " $ISA_GROUPS " == *" $g "* ]] || ISA_GROUPS+=" $g"
done
for ROUND in $(seq "$ROUNDS"); do
  for shape in $SHAPES; do
    for ty in $TYPES; do
      for g in $ISA_GROUPS; do
        for isa in $ISAS; do
          [[ $(llama_build_of "$isa") == "$g" ]] || continue
          run_ours "$shape" "$ty" "$isa"
          if [[ $FAST == 1 ]]; then run_ours "$shape" "$ty" "$isa-fast"; fi
        done
        if [[ $LLAMA_CPP == 1 ]]; then run_llama "$shape" "$ty" "$g"; fi
      done
    done
  done
done

NATIVE_AVX512=0
grep -qw avx512f /proc/cpuinfo && NATIVE_AVX512=1
python3 - "$RESULTS" "$NATIVE_AVX512" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
best = {}  # (shape, type, engine, isa) -> every figure the best over the rounds
for r in rows:
    k = (r["shape"], r["type"], r["engine"], r["isa"])
    o = best.setdefault(k, json.loads(json.dumps(r)))
    for key, v in r.items():
        if isinstance(v, dict):
            for m, x in v.items():
                o[key][m] = max(o[key][m], x)
        elif key == "dram_read_bytes_s":
            o[key] = max(o[key], v)
# The DRAM bound uses the highest read bandwidth measured for the shape in the whole run:
# one row's own measurement moves with the load at that moment (a low one would put a
# row above 100%).
dram = {}
for (shape, _, eng, _), r in best.items():
    if "dram_read_bytes_s" in r:
        dram[shape] = max(dram.get(shape, 0), r["dram_read_bytes_s"])
batches = sorted({int(k[1:]) for r in rows for k in r if k.startswith("b") and k[1:].isdigit()})
by_round = {(r["shape"], r["type"], r["engine"], r["isa"], r.get("round", 0)): r for r in rows}
def paired(shape, ty, isa, ref_isa, k, m):
    """Median over the rounds of ours / llama.cpp's in the same round (measured together)."""
    q = sorted(r[k][m] / t[k][m] for (sh, t_, e, i, rd), r in by_round.items()
               if (sh, t_, e, i) == (shape, ty, "nunchaku", isa)
               for t in [by_round.get((shape, ty, "llama.cpp", ref_isa, rd))] if t)
    if not q:
        return None
    return q[len(q) // 2] if len(q) % 2 else (q[len(q) // 2 - 1] + q[len(q) // 2]) / 2
hdr = "| shape | weights | isa |" + "".join(
    f" b{b} prompt | vs llama.cpp | b{b} decode | vs llama.cpp | of DRAM bound |" for b in batches)
print(hdr)
print("|" + "---|" * (hdr.count("|") - 1))
for (shape, ty, eng, isa), r in sorted(best.items()):
    if eng != "nunchaku":
        continue
    # llama.cpp on the same instructions: its AVX2 build for our avx2 rows where the CPU
    # has AVX-512 (its native build would use AVX-512 and VNNI there), else the native one.
    base = isa.removesuffix("-fast")
    ref = "avx2" if base == "avx2" and sys.argv[2] == "1" else "native"
    line = f"| {shape} | {ty} | {isa} |"
    for b in batches:
        k = f"b{b}"
        pre, dec = r[k]["prompt_tok_s"], r[k]["decode_tok_s"]
        frac = (dec / b) * r["weight_bytes"] / dram[shape]
        qp, qd = paired(shape, ty, isa, ref, k, "prompt_tok_s"), paired(shape, ty, isa, ref, k, "decode_tok_s")
        rp = f"{qp:.2f}x" if qp else "-"
        rd = f"{qd:.2f}x" if qd else "-"
        line += f" {pre:.0f} | {rp} | {dec:.1f} | {rd} | {frac:.0%} |"
    print(line)
for (shape, ty, eng, isa), r in sorted(best.items()):
    if eng == "llama.cpp":
        print(f"llama.cpp ({isa}) {shape} {ty}: " + ", ".join(
            f"b{b} prompt {r[f'b{b}']['prompt_tok_s']:.0f} decode {r[f'b{b}']['decode_tok_s']:.1f}" for b in batches))
nrounds = len({r.get("round", 0) for r in rows})
print(f"(tok/s: the best of {nrounds} round(s); vs llama.cpp: the median over the rounds of each round's "
      "own ratio, the two runs seconds apart)")
builds = {isa: r.get("system_info", "?") for (_, _, eng, isa), r in best.items() if eng == "llama.cpp"}
for isa, info in sorted(builds.items()):
    print(f"llama.cpp build {isa}: {info}")
seen = set()
for (shape, ty, eng, isa), r in sorted(best.items()):
    if eng == "nunchaku" and shape not in seen:
        seen.add(shape)
        print(f"{shape}: {r['describe']}; weights per step {r['weight_bytes']/1e6:.0f} MB (this type); "
              f"DRAM read {dram[shape]/1e9:.1f} GB/s with {r['threads']} threads (the run's highest)")
PY
