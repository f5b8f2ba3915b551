#!/usr/bin/env bash
# estimate --device cpu's measured decode speed (the speed probe: the engine's matmuls timed on
# synthetic weights of the model's types) beside the decode speed `nunchaku bench` measures on
# the same model, exact and with --fast-math; measured / predicted per case.
#
#   scripts/bench_speed_probe.sh [build/nunchaku]
#       SHAPES="smol135m llama1b qwen3moe1b"  TYPES="q4_k q4_0 q8_0 f16"  THREADS=2  REPS=3  N=64
#       DIR=/tmp/nunchaku-bench (the models, made once by scripts/make_bench_gguf.py; PYTHON,
#       PYTHONPATH as that script needs: numpy and gguf-py)
#
# The probe leaves out attention over the context, norms, the embedding lookup and sampling,
# so it is an upper bound: measured / predicted at or a little under 1 is right; a ratio above
# 1 means the probe is pessimistic. bench decodes N tokens from a one-token prompt, so the
# context stays short. Run on a quiet machine: both sides are timings.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-build/nunchaku}")
[[ -x "$BIN" ]] || { echo "no $BIN: build first (scripts/build.sh)" >&2; exit 2; }
SHAPES=${SHAPES:-"smol135m llama1b qwen3moe1b"}
TYPES=${TYPES:-"q4_k q4_0 q8_0 f16"}
THREADS=${THREADS:-2}
REPS=${REPS:-3}
N=${N:-64}
DIR=${DIR:-/tmp/nunchaku-bench}
PYTHON=${PYTHON:-python3}
mkdir -p "$DIR"
field() { "$PYTHON" -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }
echo "| model | type | mode | probe tok/s | bench tok/s | measured / probe |"
echo "|---|---|---|---:|---:|---:|"
for shape in $SHAPES; do
  for type in $TYPES; do
    model="$DIR/$shape-$type.gguf"
    [[ -f "$model" ]] || "$PYTHON" scripts/make_bench_gguf.py "$model" "$shape" "$type" >&2
    probe=$("$BIN" estimate "$model" --device cpu --threads "$THREADS" --context 256 --json)
    exact=$(field "round(d['cpu_decode_probe']['exact_tokens_per_s'], 2)" <<<"$probe")
    fast=$(field "round(d['cpu_decode_probe']['fast_math_tokens_per_s'], 2)" <<<"$probe")
    has_fast=$(field "d['cpu_decode_probe']['fast_math_path']" <<<"$probe")
    modes="exact"
    [[ "$has_fast" == "True" ]] && modes="exact fast"
    for mode in $modes; do
      flags=()
      [[ $mode == fast ]] && flags=(--fast-math)
      got=$("$BIN" bench "$model" -p 0 -n "$N" -r "$REPS" -t "$THREADS" "${flags[@]}" -o json 2>/dev/null |
            field "round(d['results'][0]['mean_tokens_per_s'], 2)")
      want=$exact
      [[ $mode == fast ]] && want=$fast
      ratio=$("$PYTHON" -c "print(f'{$got / $want:.2f}')")
      echo "| $shape | $type | $mode | $want | $got | $ratio |"
    done
  done
done
