#!/usr/bin/env bash
# The cost of describing a checkpoint (issue 34's target: it grows with the tensor count, not
# the weight bytes): inspect / estimate / plan --json on sparse sharded checkpoints written
# from testdata/arch/<case> (the published config.json, tensors as transformers 5 names them,
# data regions as file holes), best of RUNS, against a plain Python loop that reads the same
# shard headers with json.loads (the floor any reader pays).
#   scripts/bench_arch_cost.sh [RUNS] [path/to/nunchaku]
#   CASES="deepseek-v3-bf16:314 llama2-70b:30" overrides the case:shards list; KEEP=DIR keeps
#   the checkpoints in DIR (and reuses them), e.g. to diff --json output between two builds.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-10}
BIN=${2:-build/nunchaku}
[[ -x "$BIN" ]] || BUILD_TARGETS=nunchaku ./scripts/build.sh >/dev/null
CASES=${CASES:-"deepseek-v3-bf16:314 deepseek-v3-fp8:163 deepseek-v3-fp8:314 qwen3-30b-a3b:16 llama2-70b:30"}
if [[ -n "${KEEP:-}" ]]; then  # KEEP=DIR: write (or reuse) the checkpoints there and leave them
  DIR=$KEEP; mkdir -p "$DIR"
else
  DIR=$(mktemp -d /tmp/nunchaku-arch-cost.XXXXXX); trap 'rm -rf "$DIR"' EXIT
fi
python3 - "$BIN" "$DIR" "$RUNS" $CASES <<'PY'
import json, os, resource, struct, subprocess, sys, time
binary, root, runs, cases = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1, "I32": 4, "F64": 8, "I64": 8}

# Cases made from another fixture: DeepSeek-V3 in bf16 with one tensor per expert (issue 34's
# "314 shards / 45k tensors"): the FP8 fixture without its weight_scale_inv tensors, FP8 -> BF16,
# and no quantization_config.
DERIVED = {"deepseek-v3-bf16": "deepseek-v3-fp8"}

def expand(case):
    src = os.path.join("testdata", "arch", DERIVED.get(case, case))
    cfg = json.load(open(os.path.join(src, "config.json")))
    experts = next((cfg[k] for k in ("n_routed_experts", "num_local_experts", "num_experts") if k in cfg), 0)
    out = []
    for name, dtype, shape in json.load(open(os.path.join(src, "tensors.json"))):
        if case in DERIVED:
            if name.endswith("_scale_inv"): continue
            dtype = "BF16" if dtype == "F8_E4M3" else dtype
        if "#" in name:
            out += [(name.replace("#", str(e)), dtype, shape) for e in range(experts)]
        else:
            out.append((name, dtype, shape))
    if case in DERIVED: cfg.pop("quantization_config", None)
    return cfg, out

def existing(d):
    index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    return d, len(index["weight_map"]), index["metadata"]["total_size"]

def write(case, shards):
    if os.path.isdir(os.path.join(root, f"{case}-{shards}")): return existing(os.path.join(root, f"{case}-{shards}"))
    if case not in DERIVED and not os.path.isdir(os.path.join("testdata", "arch", case)):  # a make_sparse_checkpoint.py preset
        d = os.path.join(root, f"{case}-{shards}")
        subprocess.run([sys.executable, "scripts/make_sparse_checkpoint.py", d, "--preset", case, "--shards", str(shards)],
                       check=True, stdout=subprocess.DEVNULL)
        return existing(d)
    cfg, tensors = expand(case)
    d = os.path.join(root, f"{case}-{shards}")
    os.makedirs(d)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=1)
    per, weight_map, total = -(-len(tensors) // shards), {}, 0
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        header, off = {}, 0
        for t, dtype, shape in tensors[s * per:(s + 1) * per]:
            n = BYTES[dtype]
            for x in shape: n *= x
            header[t] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
            weight_map[t] = name
            off += n
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        with open(os.path.join(d, name), "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text)
            f.truncate(8 + len(text) + off)
        total += off
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(d, "model.safetensors.index.json"), "w"))
    return d, len(tensors), total

def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime

def best(fn, cpu=None):
    """Best wall time of RUNS calls in ms; `cpu` gets the best child CPU time (user + sys),
    which a busy machine inflates far less than the wall time."""
    t, c = [], []
    for _ in range(runs):
        c0, t0 = children_cpu(), time.perf_counter(); fn(); t.append(time.perf_counter() - t0); c.append(children_cpu() - c0)
    if cpu is not None: cpu.append(min(c) * 1e3)
    return min(t) * 1e3

def python_headers(d):
    n = 0
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            with open(os.path.join(d, f), "rb") as fh:
                size = struct.unpack("<Q", fh.read(8))[0]
                n += len(json.loads(fh.read(size)))
    json.load(open(os.path.join(d, "model.safetensors.index.json")))
    return n

print(f"ms, best of {runs}: wall (CPU time, user + sys)")
print(f"{'case':>16} {'shards':>6} {'tensors':>7} {'apparent':>9} | {'inspect':>12} {'estimate':>12} {'plan':>12} | {'py json':>12}")
for c in cases:
    case, shards = c.split(":")
    d, n, total = write(case, int(shards))
    run = lambda *a: (lambda: subprocess.run([binary, *a, d, "--json"], check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    cpu = []
    ms = [best(run("inspect"), cpu), best(run("estimate"), cpu), best(run("plan", "--vram", "24G", "--cpu-ram", "64G"), cpu)]
    t0 = time.process_time()
    py = best(lambda: python_headers(d))
    py_cpu = (time.process_time() - t0) / runs * 1e3
    cells = [f"{w:6.1f} ({c:4.0f})" for w, c in zip(ms, cpu)] + [f"{py:6.1f} ({py_cpu:4.0f})"]
    print(f"{case:>16} {shards:>6} {n:>7} {total / 2**30:>7.1f}Gi | " + " ".join(f"{x:>12}" for x in cells[:3]) + f" | {cells[3]:>12}")
PY
