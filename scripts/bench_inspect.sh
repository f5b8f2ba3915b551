#!/usr/bin/env bash
# Times `nunchaku inspect --json` on a sparse 70B-scale sharded checkpoint
# (80 layers, 30 shards, ~138 GB apparent, ~1 MB on disk) against listing the
# same tensors and shapes with python safetensors (safe_open), and reports the
# page faults of our run (inspect must not fault in data pages).
# Then one file of 100,000 tensors (safetensors and GGUF) against the Python readers:
# indexing must stay linear in the tensor count.
#   ./scripts/bench_inspect.sh [RUNS]          (MANY_TENSORS=N changes the 100,000)
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

# Index cost linear in the tensor count: one file of 100,000 tensors (an MoE-scale header),
# safetensors and GGUF, each against its reference Python reader listing the same tensors.
N=${MANY_TENSORS:-100000}
python3 -c "import gguf" 2>/dev/null || pip install -q gguf
python3 - "$DIR" "$N" <<'PY'
import json, struct, sys
d, n = sys.argv[1], int(sys.argv[2])
h, off = {}, 0
for i in range(n):
    h[f"model.layers.{i // 1000}.mlp.experts.{i % 1000}.down_proj.weight"] = {
        "dtype": "F32", "shape": [1], "data_offsets": [off, off + 4]}
    off += 4
b = json.dumps(h).encode()
open(f"{d}/many.safetensors", "wb").write(struct.pack("<Q", len(b)) + b + b"\0" * off)
import gguf, numpy as np
w = gguf.GGUFWriter(f"{d}/many.gguf", "llama")
for i in range(n):
    w.add_tensor(f"blk.{i // 1000}.ffn_down.{i % 1000}.weight", np.zeros(8, dtype=np.float32))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PY
ls -l "$DIR/many.safetensors" "$DIR/many.gguf" | awk '{print $5, $9}'
python3 - build/nunchaku "$DIR" "$RUNS" <<'PY'
import subprocess, sys, time
binary, d, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
def best(cmd):
    t = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        t.append(time.perf_counter() - t0)
    return min(t)
st_ref = ("from safetensors import safe_open; import sys\n"
          "with safe_open(sys.argv[1], framework='numpy') as f: print(sum(1 for k in f.keys() if f.get_slice(k).get_shape()))")
gg_ref = "import gguf, sys; r = gguf.GGUFReader(sys.argv[1]); print(sum(1 for t in r.tensors if t.shape is not None))"
for name, path, ref in (("safetensors", f"{d}/many.safetensors", st_ref), ("gguf", f"{d}/many.gguf", gg_ref)):
    ours = best([binary, "inspect", "--json", path])
    base = best([sys.executable, "-c", ref, path])
    print(f"{name:12} 100k-tensor index: nunchaku {ours * 1e3:8.1f} ms, python reader {base * 1e3:8.1f} ms, "
          f"ratio {base / ours:.2f}x")
PY
