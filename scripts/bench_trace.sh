#!/usr/bin/env bash
# What `run --trace` costs: decode tok/s of the same run with and without --trace (the
# sampler thread every 2 ms, a span per forward pass and per read), interleaved, best of
# REPS each (the best run is the one least disturbed by other work on the machine), and the
# process's CPU time (user + sys, least of REPS: the sampler's own work included).
#
#   scripts/bench_trace.sh [MODEL] [REPS] [PROMPTS] [TOKENS]
#     MODEL    default ../shared/testfiles/gguf/stories260K.gguf, else testdata/run/llama-spm
#     REPS 7, PROMPTS 32 (batch 8), TOKENS 256; --threads 1 (one core: the sampler competes)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/nunchaku}
MODEL=${1:-../shared/testfiles/gguf/stories260K.gguf}
[ -e "$MODEL" ] || MODEL=testdata/run/llama-spm
REPS=${2:-7}; PROMPTS=${3:-32}; TOKENS=${4:-256}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for i in $(seq "$PROMPTS"); do printf '{"prompt": "Once upon a time %d"}\n' "$i"; done > "$tmp/prompts.jsonl"
best_off=0; best_on=0; cpu_off=1e9; cpu_on=1e9
tokps() { sed -n 's/.*"completion_tokens_per_s": *\([0-9.]*\).*/\1/p' "$1"; }
for r in $(seq "$REPS"); do
  for mode in off on; do
    extra=(); [ "$mode" = on ] && extra=(--trace "$tmp/trace.json")
    /usr/bin/time -f "%U %S" -o "$tmp/time" "$BIN" run "$MODEL" --raw --max-tokens "$TOKENS" --threads 1 -q \
      -i "$tmp/prompts.jsonl" --stats "$tmp/stats.json" "${extra[@]}" >/dev/null 2>&1
    v=$(tokps "$tmp/stats.json"); c=$(awk '{print $1 + $2}' "$tmp/time")
    if [ "$mode" = on ]; then
      best_on=$(echo "$v $best_on" | awk '{print ($1>$2)?$1:$2}'); cpu_on=$(echo "$c $cpu_on" | awk '{print ($1<$2)?$1:$2}')
    else
      best_off=$(echo "$v $best_off" | awk '{print ($1>$2)?$1:$2}'); cpu_off=$(echo "$c $cpu_off" | awk '{print ($1<$2)?$1:$2}')
    fi
    echo "rep $r $mode: $v tok/s, $c s CPU"
  done
done
samples=$(sed -n 's/.*"num_samples": *\([0-9]*\).*/\1/p' "$tmp/trace.json")
events=$(grep -o '"ph":"[XC]"' "$tmp/trace.json" | wc -l)
echo "$MODEL: best of $REPS, $PROMPTS prompts x $TOKENS tokens, 1 thread"
echo "without --trace $best_off tok/s, with --trace $best_on tok/s" \
  "($(echo "$best_off $best_on" | awk '{printf "%+.2f", ($2/$1-1)*100}') %); CPU $cpu_off s vs $cpu_on s" \
  "($(echo "$cpu_off $cpu_on" | awk '{printf "%+.2f", ($2/$1-1)*100}') %); last trace: $samples samples, $events events"
