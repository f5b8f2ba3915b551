#!/usr/bin/env bash
# Installs what is missing, builds, and runs nunchaku on the bundled tiny models
# (testdata/models/: a tiny random Llama written by transformers, as sharded
# safetensors and as GGUF; testdata/run/: tiny models with trained tokenizers).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# Only the binary the demo runs (the test suite is scripts/test.sh), with the build's own progress.
echo "building build/nunchaku (a first build takes a few minutes; later ones are incremental)"
BUILD_TARGETS=nunchaku ./scripts/build.sh
N=./build/nunchaku
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
run() { say "$*"; "$@"; }

run $N --version
run $N inspect testdata/models/llama-sharded
run $N inspect testdata/models/llama-gguf/model.gguf --tensors --filter 'blk.0.*'
run $N inspect testdata/models/llama --verify
say "$N inspect testdata/models/llama --json   # first 400 bytes"
json=$($N inspect testdata/models/llama --json)   # not piped into head: with pipefail, SIGPIPE would fail the demo
printf '%s ...\n' "${json:0:400}"
run $N estimate testdata/models/llama --context 256 --batch 4 --vram 1G
run $N plan testdata/models/llama --vram 600M,600M --context 256
run $N plan testdata/models/llama --vram 600M --format accelerate
run $N plan testdata/models/llama --format json -o /tmp/nunchaku-demo-plan.json
run $N load testdata/models/llama --plan /tmp/nunchaku-demo-plan.json --verify
run $N run testdata/convert/gguf/llama-spm.gguf "Once upon a time" -n 16 --temp 0 --raw --format text
say "printf 'Once upon a time\\n{\"id\": \"q1\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\\n' | $N run testdata/run/qwen2-bpe --max-tokens 8"
printf 'Once upon a time\n{"id": "q1", "messages": [{"role": "user", "content": "hi"}]}\n' | $N run testdata/run/qwen2-bpe --max-tokens 8
