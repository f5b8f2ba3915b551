#!/usr/bin/env bash
# Streamed offload against the disk it streams from. A >= 2 GB bf16 Llama-shaped model
# (scripts/make_stream_model.py, random weights) runs with --cpu-ram at half its size, the
# page cache dropped before each run where the machine allows (else the mmap side reads
# through a warm cache and says so). Side by side in one run:
#   stream = `run --offload stream` (bounded pool, O_DIRECT, read-ahead)
#   mmap   = `run --offload mmap`   (file mappings: today's behaviour before the seam)
# For each: decode tok/s (batch 1 and 4), the ratio to the disk bound
#   bound tok/s = O_DIRECT read GB/s of the same file (dd, two streams as our two readers)
#                 / weight bytes on disk per step
# (target >= 0.8 for stream), and peak RSS (/usr/bin/time) against the memory run predicts
# (kept weights + stream pool + run state; target within 5%).
#   ./scripts/bench_stream.sh [MODEL_DIR=/tmp/nunchaku-stream-model] [TOKENS=16] [NUNCHAKU=build/nunchaku]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp/nunchaku-stream-model}
TOKENS=${2:-16}
BIN=${3:-build/nunchaku}
CONTEXT=${CONTEXT:-48}  # prompts (~30 tokens) + TOKENS fill it: the KV cache, whose pages fill lazily, is then all touched
[[ -x "$BIN" ]] || ./scripts/build.sh >/dev/null
[[ -x /usr/bin/time ]] || { echo "bench_stream: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
if [[ ! -f "$DIR/model.safetensors" ]]; then
  python3 -c "import numpy" 2>/dev/null || pip install -q numpy
  python3 scripts/make_stream_model.py "$DIR"
fi
FILE="$DIR/model.safetensors"
SIZE=$(stat -c %s "$FILE")
BUDGET=$((SIZE / 2))

drop_cache() {
  sync
  if (echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; then echo dropped; else echo warm; fi
}

# O_DIRECT read speed of the file (bytes/s), best of 2: STREAMS sequential readers over
# consecutive parts (1 = plain dd; 2 = the stream's two reader threads).
disk_bps() {
  local streams=$1 best=0 t0 t1 bps part=$(((SIZE + 1) / 2))
  local chunks=$(((part + 8388607) / 8388608))
  for _ in 1 2; do
    drop_cache >/dev/null
    t0=$(date +%s.%N)
    if ((streams == 1)); then
      dd if="$FILE" of=/dev/null bs=8M iflag=direct status=none
    else
      dd if="$FILE" of=/dev/null bs=8M iflag=direct count="$chunks" status=none &
      dd if="$FILE" of=/dev/null bs=8M iflag=direct skip="$chunks" status=none
      wait
    fi
    t1=$(date +%s.%N)
    bps=$(python3 -c "print(int($SIZE / ($t1 - $t0)))")
    ((bps > best)) && best=$bps
  done
  echo "$best"
}

# run_case MODE BATCH -> "tok/s rss_bytes predicted_bytes disk_bytes cache"
run_case() {
  local mode=$1 batch=$2 cache out err
  cache=$(drop_cache)
  out=$(mktemp) err=$(mktemp)
  for ((i = 0; i < batch; i++)); do echo "Once upon a time there was a model number $i"; done |
    /usr/bin/time -f "maxrss_kb %M" "$BIN" run "$DIR" --cpu-ram "${BUDGET}B" --offload "$mode" --raw \
      --max-tokens "$TOKENS" --batch-size "$batch" --context "$CONTEXT" --threads 2 >"$out" 2>"$err"
  python3 - "$out" "$err" "$cache" <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
err = open(sys.argv[2]).read()
# decode tok/s of the batch: generated tokens after the first, over the longest decode time
dec = max(r["timings"]["decode_s"] for r in rows)
gen = sum(r["usage"]["completion_tokens"] - 1 for r in rows)
rss = int(re.search(r"maxrss_kb (\d+)", err).group(1)) * 1024
m = re.search(r"= \S+ \S+ \((\d+) B\); \S+ \S+ of weights on disk \((\d+) B\)", err)
print(gen / dec, rss, m.group(1), m.group(2), sys.argv[3])
PY
  rm -f "$out" "$err"
}

BPS1=$(disk_bps 1)
BPS=$(disk_bps 2)
echo "model: $FILE ($SIZE bytes), --cpu-ram $BUDGET, --context $CONTEXT, $TOKENS tokens, 2 threads"
echo "disk: O_DIRECT read, 8 MiB requests: $(python3 -c "print(f'{$BPS1/1e9:.2f}')") GB/s one stream (dd), $(python3 -c "print(f'{$BPS/1e9:.2f}')") GB/s two streams (the bound below)"
printf '%-7s %5s %9s %9s %7s %10s %10s %8s %6s\n' mode batch "tok/s" "bound" ratio "rss MB" "pred MB" "rss/pred" cache
for batch in 1 4; do
  for mode in stream mmap; do
    read -r tps rss pred disk cache < <(run_case "$mode" "$batch")
    python3 - "$mode" "$batch" "$tps" "$rss" "$pred" "$disk" "$BPS" "$cache" <<'PY'
import sys
mode, batch, tps, rss, pred, disk, bps, cache = sys.argv[1:]
tps, rss, pred, disk, bps = float(tps), int(rss), int(pred), int(disk), int(bps)
bound = bps / disk * int(batch)  # one crossing of the disk weights per step serves the whole batch
print(f"{mode:<7} {batch:>5} {tps:9.3f} {bound:9.3f} {tps / bound:7.2f} {rss / 1e6:10.1f} {pred / 1e6:10.1f} {rss / pred:8.3f} {cache:>6}")
PY
  done
done
