#!/usr/bin/env bash
# Installs what is missing, builds, and runs nunchaku on the bundled tiny models
# (testdata/models/: a tiny random Llama written by transformers, as sharded
# safetensors and as GGUF).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh >/dev/null
N=./build/nunchaku
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
run() { say "$*"; "$@"; }

run $N --version
run $N inspect testdata/models/llama-sharded
run $N inspect testdata/models/llama-gguf/model.gguf --tensors --filter 'blk.0.*'
run $N inspect testdata/models/llama --verify
say "$N inspect testdata/models/llama --json | head -c 400"
$N inspect testdata/models/llama --json | head -c 400; echo " ..."
if $N --help | grep -q estimate; then
  run $N estimate testdata/models/llama --context 256 --batch 4 --vram 1G
fi
