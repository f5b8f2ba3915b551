#!/usr/bin/env bash
# Mixture-of-experts throughput on the CPU: a random Qwen3-MoE-shaped Q4_K_M GGUF (~1 GB:
# hidden 1024, 16 layers, 64 experts of 512, top 8; scripts/make_bench_gguf.py qwen3moe1b),
# nunchaku against llama.cpp (llama-cpp-python, scripts/bench_llamacpp.py) in the same run,
# then nunchaku streaming the model with --cpu-ram below its size.
#
#   scripts/bench_moe.sh [--threads N] [--rounds N] [--build DIR] [--no-llama-cpp] [--fast-math]
#
# 1. Resident: prompt and decode tok/s at batch 1 and 8 ([.engine-bench] test case, the
#    prompts bench_llamacpp.py uses), engines taking turns --rounds times (default 3); each
#    "vs llama.cpp" is the median over the rounds of that round's own pair. Decode is also
#    given as a fraction of the DRAM bound: weight bytes one decode token reads (estimate's
#    weight_bytes_per_token: attention, router and head, plus top-k of the experts) over the
#    read bandwidth the test case measures. --fast-math adds rows "nunchaku --fast-math"
#    (run --fast-math: 8-bit activations for the K-quant matrices, routed experts included),
#    each run just before the round's llama.cpp run, as the exact rows are.
# 2. Streamed: `nunchaku run --cpu-ram` at half the model's size (or the smallest budget run
#    accepts, if more), one request of 16 tokens: max RSS against the plan's host prediction,
#    bytes read per forward pass (routed experts only), tok/s against those bytes at the
#    disk's O_DIRECT read rate (dd, 8 MiB requests).
# Env: BENCH_DIR (default /tmp/nunchaku-bench), PYTHON (numpy + gguf; default
# /work/venv/bin/python), LLAMA_PYTHON (one with llama_cpp; default $PYTHON).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=2
ROUNDS=3
BUILD=build
LLAMA=1
FAST=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) THREADS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --no-llama-cpp) LLAMA=0; shift ;;
    --fast-math) FAST=1; shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-/work/venv/bin/python}
LPY=${LLAMA_PYTHON:-$PY}
DIR=${BENCH_DIR:-/tmp/nunchaku-bench}
M="$DIR/gguf/qwen3moe1b-q4_k_m.gguf"
mkdir -p "$DIR/gguf"
[[ -f "$M" ]] || { echo "== writing $M" >&2; "$PY" scripts/make_bench_gguf.py "$M.tmp" qwen3moe1b q4_k_m && mv "$M.tmp" "$M"; }
if [[ ! -x "$BUILD/nunchaku_tests" ]]; then
  cmake -S . -B "$BUILD" -G Ninja -DNUNCHAKU_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$BUILD" --target nunchaku_tests nunchaku -j2 >/dev/null
if [[ $LLAMA == 1 ]] && ! "$LPY" -c "import llama_cpp" 2>/dev/null; then
  echo "llama_cpp is not importable by $LPY: llama.cpp rows skipped (set LLAMA_PYTHON)" >&2
  LLAMA=0
fi

OUT="$DIR/moe.jsonl"
: > "$OUT"
ours() {  # ours ROUND FAST: one [.engine-bench] run, tagged "nunchaku" or "nunchaku --fast-math"
  local name=nunchaku
  [[ $2 == 1 ]] && name="nunchaku --fast-math"
  echo "== round $1: $name" >&2
  NUNCHAKU_BENCH_MODEL="$M" NUNCHAKU_BENCH_THREADS=$THREADS NUNCHAKU_BENCH_PROMPT=64 NUNCHAKU_BENCH_DECODE=32 \
    NUNCHAKU_BENCH_FAST_MATH=$2 NUNCHAKU_BENCH_BATCHES="1 8" "$BUILD/nunchaku_tests" "[.engine-bench]" |
    sed -n "s/^BENCH /{\"engine\":\"$name\",\"round\":$1,\"r\":/p" | sed 's/$/}/' >> "$OUT"
}
for r in $(seq "$ROUNDS"); do
  ours "$r" 0
  [[ $FAST == 1 ]] && ours "$r" 1
  if [[ $LLAMA == 1 ]]; then
    echo "== round $r: llama.cpp" >&2
    "$LPY" scripts/bench_llamacpp.py "$M" "$THREADS" 64 32 "1 8" 2> "$DIR/llamacpp.log" |
      sed "s/^/{\"engine\":\"llama.cpp\",\"round\":$r,\"r\":/; s/$/}/" >> "$OUT"
  fi
done
"$BUILD/nunchaku" estimate "$M" --device cpu --json > "$DIR/moe-estimate.json"

# Streamed: --cpu-ram at half the model's size, or the smallest budget run accepts when that
# is more (its refusal, exit 3, names what the CPU needs).
need=$(echo '{"prompt":"x"}' | "$BUILD/nunchaku" run "$M" --cpu-ram 1M --batch-size 1 --threads "$THREADS" 2>&1 >/dev/null |
  sed -n 's/.*cpu needs \([0-9.]*\) MiB.*/\1/p' | head -1 || true)
half=$(( $(stat -c %s "$M") / 2 / 1048576 ))
budget=$(python3 -c "import math; print(max($half, math.ceil(${need:-700} * 1.01 + 1)))")M
echo "== streamed: --cpu-ram $budget (half the model: ${half}M; smallest accepted: ${need:-?} MiB)" >&2
# The disk-read bound: O_DIRECT reads of the model file in 8 MiB requests, as the stream reads.
disk=$(dd if="$M" of=/dev/null bs=8M count=96 iflag=direct 2>&1 | sed -n 's/.* bytes.* copied, \([0-9.]*\) s.*/\1/p')
disk_bps=$(python3 -c "print(96 * 8 * 2**20 / ${disk:-1})")
echo '{"prompt":"Once upon a time"}' | /usr/bin/time -v "$BUILD/nunchaku" run "$M" --cpu-ram "$budget" --batch-size 1 --threads "$THREADS" \
  --max-tokens 16 --stats "$DIR/moe-stream.json" > /dev/null 2> "$DIR/moe-stream.log"

python3 - "$OUT" "$DIR/moe-estimate.json" "$DIR/moe-stream.json" "$budget" "$disk_bps" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
est = json.load(open(sys.argv[2]))
per_token = est["weight_bytes_per_token"]
engines = [e for e in ("nunchaku", "nunchaku --fast-math") if any(r["engine"] == e for r in rows)]
theirs = {r["round"]: r for r in rows if r["engine"] == "llama.cpp"}
mine = [r for r in rows if r["engine"] in engines]
dram = max(r["r"]["dram_read_bytes_s"] for r in mine)
print(f"model: {mine[0]['r']['describe']}")
print(f"active parameters {est['num_active_parameters'] / 1e6:.1f} M, weight bytes per decoded token {per_token / 2**20:.1f} MiB, "
      f"read bandwidth {dram / 1e9:.1f} GB/s")
print("| engine | batch | prompt tok/s | vs llama.cpp | decode tok/s | vs llama.cpp | of DRAM bound |")
print("|---|---|---|---|---|---|---|")
for e in engines:
    ours = [r for r in rows if r["engine"] == e]
    for b in ("b1", "b8"):
        best = lambda m: max(r["r"][b][m] for r in ours)
        def ratio(m):
            q = [r["r"][b][m] / theirs[r["round"]]["r"][b][m] for r in ours if r["round"] in theirs]
            return f"{statistics.median(q):.2f}x" if q else "-"
        dec = best("decode_tok_s")
        bound = dram / per_token  # batch 1; a batch reads the union of its tokens' experts (at most all)
        frac = f"{dec / bound:.0%}" if b == "b1" else "-"
        print(f"| {e} | {b[1:]} | {best('prompt_tok_s'):.1f} | {ratio('prompt_tok_s')} | {dec:.1f} | {ratio('decode_tok_s')} | {frac} |")
s = json.load(open(sys.argv[3]))
w = s["weights"]
disk_bps = float(sys.argv[5])
steps = max(1, s["num_forward_calls"])
read_step = w["bytes_read"] / steps  # measured: the slots of the streamed layers and the routed experts' pieces
tok_s = s["completion_tokens_per_s"]
print(f"\nstreamed (--cpu-ram {sys.argv[4]}): max RSS {s['max_rss_bytes'] / 2**20:.1f} MiB, plan's host prediction "
      f"{s['host_predicted_bytes'] / 2**20:.1f} MiB ({w['provider']}); read {read_step / 2**20:.1f} MiB per forward pass "
      f"({w['pieces_read']} expert pieces read, {w['piece_hits']} found in the pool; whole layers would be "
      f"{w['streamed_bytes_per_step'] / 2**20:.1f} MiB); {tok_s:.2f} tok/s, against "
      f"{disk_bps / read_step:.1f} tok/s at the disk's O_DIRECT read rate ({disk_bps / 1e9:.2f} GB/s)")
PY
