#!/usr/bin/env bash
# nunchaku convert vs cp and vs transformers, side by side, on a >= 2 GB checkpoint with a
# warm page cache. Prints GB/s (input bytes / wall time) and peak RSS for:
#   cp -r                                  the same bytes copied (the I/O bound)
#   nunchaku convert --shard-size 1GB      same-dtype reshard (target >= 0.8x cp)
#   nunchaku convert --dtype bf16          fp32 -> bf16
#   transformers from_pretrained + save_pretrained(max_shard_size="1GB")
# Usage: scripts/bench_convert.sh [BUILD_DIR]   (PYTHON=... a python with torch + transformers;
# the model is made once under $BENCH_DIR, default /tmp/nunchaku-bench-convert)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
BIN=$BUILD/nunchaku
PY=${PYTHON:-python3}
DIR=${BENCH_DIR:-/tmp/nunchaku-bench-convert}
MODEL=$DIR/model
mkdir -p "$DIR"
[[ -x $BIN ]] || { echo "no $BIN: build first" >&2; exit 2; }

if [[ ! -f $MODEL/config.json ]]; then
  echo "making a 2.2 GB fp32 llama (hidden 2048, 8 layers, vocab 32000) in $MODEL ..."
  "$PY" - "$MODEL" <<'PY'
import sys, torch, transformers
torch.manual_seed(0)
cfg = transformers.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=8,
                               num_attention_heads=16, num_key_value_heads=16, vocab_size=32000)
with torch.no_grad():
    m = transformers.LlamaForCausalLM(cfg).to(torch.float32)
m.save_pretrained(sys.argv[1], max_shard_size="50GB")
PY
fi
BYTES=$(du -cb "$MODEL"/*.safetensors | tail -1 | cut -f1)
cat "$MODEL"/* > /dev/null   # warm cache

# runs "$@", prints "<seconds> <peak RSS KiB>"
measure() {
  local t0 t1 rss
  t0=$(date +%s.%N)
  rss=$(/usr/bin/time -f "%M" "$@" 2>&1 >/dev/null | tail -1)
  t1=$(date +%s.%N)
  echo "$(echo "$t1 - $t0" | bc -l) $rss"
}
row() {  # name seconds rss
  printf "%-48s %8.2f s %8.2f GB/s %9.1f MiB\n" "$1" "$2" "$(echo "$BYTES / $2 / 1000000000" | bc -l)" "$(echo "$3 / 1024" | bc -l)"
}

rm -rf "$DIR"/cp "$DIR"/nk-same "$DIR"/nk-bf16 "$DIR"/hf
# cp and the same-dtype convert alternate ROUNDS times (best of each kept), each after a
# sync, so neither pays for the other's dirty pages being written back.
ROUNDS=${ROUNDS:-3}
cp_s=999999 same_s=999999 cp_rss=0 same_rss=0
for _ in $(seq "$ROUNDS"); do
  rm -rf "$DIR"/cp "$DIR"/nk-same; sync
  read -r s r < <(measure cp -r "$MODEL" "$DIR/cp")
  if (( $(echo "$s < $cp_s" | bc -l) )); then cp_s=$s cp_rss=$r; fi
  rm -rf "$DIR"/cp; sync
  read -r s r < <(measure "$BIN" convert "$MODEL" "$DIR/nk-same" --shard-size 1GB -q)
  if (( $(echo "$s < $same_s" | bc -l) )); then same_s=$s same_rss=$r; fi
done
sync
read -r bf_s bf_rss < <(measure "$BIN" convert "$MODEL" "$DIR/nk-bf16" --dtype bf16 -q)
sync
read -r hf_s hf_rss < <(measure "$PY" -c "
import sys, transformers
m = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1])
m.save_pretrained(sys.argv[2], max_shard_size='1GB')" "$MODEL" "$DIR/hf")

echo "input: $MODEL ($(echo "$BYTES / 1000000000" | bc -l | cut -c1-5) GB fp32 safetensors), warm cache, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "cp and same-dtype convert: best of $ROUNDS alternating runs, each after a sync"
printf "%-48s %10s %13s %13s\n" "" "time" "rate" "peak RSS"
row "cp -r" "$cp_s" "$cp_rss"
row "nunchaku convert --shard-size 1GB (same dtype)" "$same_s" "$same_rss"
row "nunchaku convert --dtype bf16" "$bf_s" "$bf_rss"
row "transformers from_pretrained+save_pretrained" "$hf_s" "$hf_rss"
echo "same-dtype reshard vs cp: $(echo "$cp_s / $same_s" | bc -l | cut -c1-4)x (target >= 0.8x)"
echo "nunchaku vs transformers (same dtype): $(echo "$hf_s / $same_s" | bc -l | cut -c1-5)x faster"
cmp <(cd "$DIR/nk-same" && cat model.safetensors.index.json | "$PY" -c "import json,sys; print(sorted(json.load(sys.stdin)['weight_map'].items()))") \
    <(cd "$DIR/hf" && cat model.safetensors.index.json | "$PY" -c "import json,sys; print(sorted(json.load(sys.stdin)['weight_map'].items()))") \
  2>/dev/null && echo "shard assignment: identical to transformers'" \
  || echo "shard assignment: differs from this transformers' (--shard-order model is 4.x's; 5.x's is --shard-order name)"
rm -rf "$DIR"/cp "$DIR"/nk-same "$DIR"/nk-bf16 "$DIR"/hf
