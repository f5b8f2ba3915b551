#!/usr/bin/env bash
# Encode/decode throughput of nunchaku's tokenizer vs HF `tokenizers` (Python, Rust core)
# on the same text and the same tokenizer.json, single-threaded, best of 3.
#   scripts/bench_tokenizer.sh [BUILD_DIR] [PYTHON]
# Uses the fixture tokenizers in testdata/tokenizers (small vocabularies: this measures
# the pipeline and merge loop, not vocabulary size) and a ~2 MB generated text.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
PY=${2:-python3}
TEXT=$(mktemp /tmp/nunchaku-bench-XXXXXX.txt)
trap 'rm -f "$TEXT"' EXIT
"$PY" - "$TEXT" <<'PY'
import random, sys
rng = random.Random(7)
words = ("the of and to in is was for on that with as by at from large models run small GPUs tokenizer "
         "merges bytes pairs don't it's we've 12345 2024 3.14 café naïve Ελληνικά русский 我想 工作 🦙 🚀").split()
lines = []
while sum(len(l) for l in lines) < 2_000_000:
    lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(5, 25))))
open(sys.argv[1], "w").write("\n".join(lines))
PY
for name in gpt2-bpe llama3-bpe qwen2-bpe llama2-spm; do  # qwen2-bpe: NFC normalizer
  dir=testdata/tokenizers/$name
  ours=$(NUNCHAKU_BENCH_TOKENIZER=$dir NUNCHAKU_BENCH_TEXT=$TEXT "$BUILD/nunchaku_tests" "[.tokenizer_bench]" | grep '^nunchaku')
  theirs=$(TOKENIZERS_PARALLELISM=false "$PY" - "$dir/tokenizer.json" "$TEXT" <<'PY'
import sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
text = open(sys.argv[2]).read()
enc = dec = 1e30
for _ in range(3):
    t0 = time.perf_counter(); ids = tok.encode(text, add_special_tokens=False).ids
    t1 = time.perf_counter(); tok.decode(ids, skip_special_tokens=False)
    t2 = time.perf_counter(); enc = min(enc, t1 - t0); dec = min(dec, t2 - t1)
print(f"tokenizers encode_s={enc:.6f} decode_s={dec:.6f} tokens={len(ids)}")
PY
)
  echo "$name: $ours"
  echo "$name: $theirs"
  "$PY" -c "
import re,sys
o=dict(re.findall(r'(\w+)=([\d.]+)', sys.argv[1])); t=dict(re.findall(r'(\w+)=([\d.]+)', sys.argv[2]))
print(f'$name: encode speed ratio nunchaku/tokenizers = {float(t[\"encode_s\"])/float(o[\"encode_s\"]):.2f}x, '
      f'decode {float(t[\"decode_s\"])/float(o[\"decode_s\"]):.2f}x, same token count: {o[\"tokens\"]==t[\"tokens\"]}')
" "$ours" "$theirs"
done
