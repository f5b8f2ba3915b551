#!/usr/bin/env bash
# What run --fast-math costs in accuracy (tests/test_fast_math_accuracy.cpp, hidden case
# "[.fast-math-accuracy]"): exact and fast math over the same weights, per logits row
# KL(exact || fast), relative RMS error and top-token agreement, on
#   * a trained model: stories260K (../shared/testfiles) zero-padded to hidden 256 and
#     quantized to Q4_K_M and to BF16 by llama.cpp (scripts/make_padded_stories.py; the BF16
#     file takes the bf16 path only on a CPU with AVX512_BF16; its prompt is BOS and
#     the exact engine's own greedy story), with the unquantized padded F32 model as the
#     baseline both engines are also compared with;
#   * random-weight Q4_K models in the shapes of scripts/bench_run.sh (--shapes), which
#     bench_run.sh writes (their logits are near-uniform: a check of the plumbing, not of
#     accuracy).
# Speed: scripts/bench_run.sh --fast-math.
#
#   scripts/bench_fast_math.sh [--threads N] [--build DIR] [--shapes "llama1b"]
#
# Needs $BENCH_DIR/venv (default /tmp/nunchaku-bench/venv: llama-cpp-python, as
# bench_run.sh --llama-cpp builds it; this script adds gguf-py to it).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=$(nproc)
BUILD=build
SHAPES="llama1b"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) THREADS=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --shapes) SHAPES=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
DIR=${BENCH_DIR:-/tmp/nunchaku-bench}
VENV="$DIR/venv"
if [[ ! -f ../shared/testfiles/gguf/stories260K.gguf ]]; then
  echo "../shared/testfiles/gguf/stories260K.gguf is absent: the trained model cannot be made" >&2
  exit 2
fi
if ! "$VENV/bin/python" -c "import llama_cpp" 2>/dev/null; then
  echo "$VENV has no llama-cpp-python: run scripts/bench_run.sh --llama-cpp once (it builds it)" >&2
  exit 2
fi
"$VENV/bin/python" -c "import gguf" 2>/dev/null || "$VENV/bin/pip" install -q gguf >&2
if [[ ! -x "$BUILD/nunchaku_tests" ]]; then
  cmake -S . -B "$BUILD" -G Ninja -DNUNCHAKU_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$BUILD" --target nunchaku_tests -j2 >/dev/null
mkdir -p "$DIR/gguf"
STORIES="$DIR/gguf/stories260K-pad256-q4_k_m.gguf" STORIES_BF16="$DIR/gguf/stories260K-pad256-bf16.gguf"
[[ -f "$STORIES" && -f "$STORIES_BF16" ]] ||
  "$VENV/bin/python" scripts/make_padded_stories.py "$DIR/gguf" > "$DIR/padded_stories.log" 2>&1

OUT="$DIR/fast_math_accuracy.jsonl"
: > "$OUT"
acc() {  # acc MODEL [ENV...]
  local m=$1
  shift
  echo "== accuracy $m" >&2
  env "$@" NUNCHAKU_BENCH_MODEL="$m" NUNCHAKU_BENCH_THREADS="$THREADS" "$BUILD/nunchaku_tests" "[.fast-math-accuracy]" |
    sed -n 's/^ACCURACY //p' >> "$OUT"
}
for m in "$STORIES" "$STORIES_BF16"; do
  acc "$m" NUNCHAKU_ACC_FIRST=1 NUNCHAKU_BENCH_PROMPT=200 NUNCHAKU_BENCH_DECODE=64 \
    NUNCHAKU_ACC_BASELINE="$DIR/gguf/stories260K-pad256-f32.gguf"
done
for shape in $SHAPES; do
  f="$DIR/gguf/$shape-q4_k.gguf"
  [[ -f "$f" ]] || { echo "$f is absent: scripts/bench_run.sh --shapes $shape --types q4_k writes it" >&2; exit 2; }
  acc "$f"
done
python3 - "$OUT" <<'PY'
import json, os, sys
print("| model | rows | KL(exact\u2016fast) mean / max, nats | rel. RMS mean / max | top-1 agree | greedy prefix agree |")
print("|---|---|---|---|---|---|")
for l in open(sys.argv[1]):
    d = json.loads(l)
    name = os.path.basename(d["model"])
    for part in ("prefill", "decode"):
        s = d[part]
        print(f"| {name} {part} | {s['rows']} | {s['kl_mean']:.2e} / {s['kl_max']:.2e} | {s['rel_rms_mean']:.2e} / "
              f"{s['rel_rms_max']:.2e} | {s['top1_agree']:.1%} | {d['greedy_agree_prefix']}/{d['greedy_tokens']} |")
    b = d.get("baseline") or {}
    for k in ("exact_vs_baseline", "fast_vs_baseline"):
        if k in b:
            s = b[k]
            print(f"| {name} prompt, {k.replace('_', ' ')} ({os.path.basename(b['model'])}) | {s['rows']} | "
                  f"{s['kl_mean']:.2e} / {s['kl_max']:.2e} | {s['rel_rms_mean']:.2e} / {s['rel_rms_max']:.2e} | "
                  f"{s['top1_agree']:.1%} | |")
PY
