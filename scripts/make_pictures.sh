#!/usr/bin/env bash
# The README's pictures (docs/pictures/*.svg), from committed fixtures:
#   estimate-llama3-8b.svg  estimate --runtime all of Llama-3-8B at 8k context against 24G
#   plan-llama3-8b.svg      plan of the same model on one 12G GPU and the CPU
#   run-trace.svg           nunchaku trace of run --trace on testdata/run/llama-spm
# Llama-3-8B is the header-only fixture testdata/arch/llama3-8b (config.json + tensors.json,
# from transformers' meta model): its safetensors header is written into a sparse file
# (16 GB apparent, a few KB on disk), the way tests/arch_fixture.cpp does. Then every
# picture is rendered and checked in headless chromium (scripts/render_svgs.sh).
#
#   scripts/make_pictures.sh            (needs build/nunchaku and python3)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/nunchaku}
OUTDIR=docs/pictures
mkdir -p "$OUTDIR"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
model="$tmp/llama3-8b"
mkdir -p "$model"

python3 - testdata/arch/llama3-8b "$model" <<'PY'
import json, os, struct, sys
src, dst = sys.argv[1], sys.argv[2]
size = {"F32": 4, "I32": 4, "F16": 2, "BF16": 2}
with open(os.path.join(src, "config.json")) as f:
    cfg = json.load(f)
with open(os.path.join(dst, "config.json"), "w") as f:
    json.dump(cfg, f, indent=1)
with open(os.path.join(src, "tensors.json")) as f:
    tensors = json.load(f)
hdr, off = {}, 0
for name, dtype, shape in tensors:
    n = size.get(dtype, 1)
    for d in shape:
        n *= d
    hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
    off += n
body = json.dumps(hdr).encode()
body += b" " * (-len(body) % 8)
path = os.path.join(dst, "model.safetensors")
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(body)) + body)
os.truncate(path, 8 + len(body) + off)
PY

"$BIN" estimate "$model" --context 8192 --runtime all --vram 24G --threads 1 --svg "$OUTDIR/estimate-llama3-8b.svg" >/dev/null
"$BIN" plan "$model" --context 8192 --vram 12G --cpu-ram 16G --threads 1 --svg "$OUTDIR/plan-llama3-8b.svg" >/dev/null
printf 'Once upon a time\nThe cat\n' |
  "$BIN" run testdata/run/llama-spm --raw --max-tokens 32 -q --trace "$tmp/run.json" >/dev/null
"$BIN" trace "$tmp/run.json" --svg "$OUTDIR/run-trace.svg"
scripts/render_svgs.sh "$OUTDIR"/*.svg
