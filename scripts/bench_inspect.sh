#!/usr/bin/env bash
# Times `nunchaku inspect --json` on a sparse 70B-scale sharded checkpoint
# (80 layers, 30 shards, ~138 GB apparent, ~1 MB on disk) against listing the
# same tensors and shapes with python safetensors (safe_open), and reports the
# page faults of our run (inspect must not fault in data pages).
#   ./scripts/bench_inspect.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-10}
[[ -x build/nunchaku ]] || ./scripts/build.sh >/dev/null
python3 -c "import safetensors" 2>/dev/null || pip install -q safetensors numpy
DIR=$(mktemp -d /tmp/nunchaku-bench-XXXX)
trap 'rm -rf "$DIR"' EXIT
python3 scripts/make_sparse_checkpoint.py "$DIR/llama2-70b" --preset llama2-70b --shards 30
du -sh --apparent-size "$DIR/llama2-70b" | sed 's/^/apparent size: /'
du -sh "$DIR/llama2-70b" | sed 's/^/on disk:       /'
python3 scripts/bench_inspect.py build/nunchaku "$DIR/llama2-70b" "$RUNS"
