#!/usr/bin/env python3
"""Side-by-side timing for bench_inspect.sh: best-of-N wall time of
`nunchaku inspect --json` vs python safetensors safe_open listing the same
names and shapes, both as fresh processes; prints the ratio and our page faults."""
import json, os, subprocess, sys, time

BASELINE = r"""
import json, sys, os
from safetensors import safe_open
d = sys.argv[1]
idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
out = {}
for shard in sorted(set(idx["weight_map"].values())):
    with safe_open(os.path.join(d, shard), framework="numpy") as f:
        for k in f.keys():
            out[k] = f.get_slice(k).get_shape()
print(len(out))
"""


def run(cmd):
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate()
    status = p.returncode
    dt = time.perf_counter() - t0
    if status != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{err.decode()}")
    return dt, out


def faults(cmd):
    pid = os.fork()
    if pid == 0:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        os.execv(cmd[0], cmd)
    _, status, ru = os.wait4(pid, 0)
    return ru.ru_minflt, ru.ru_majflt, ru.ru_maxrss


def main():
    binary, ckpt, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ours_cmd = [binary, "inspect", "--json", ckpt]
    base_cmd = [sys.executable, "-c", BASELINE, ckpt]
    ours = min(run(ours_cmd)[0] for _ in range(runs))
    base = min(run(base_cmd)[0] for _ in range(runs))
    doc = json.loads(run(ours_cmd)[1])
    n_base = int(run(base_cmd)[1])
    assert doc["num_tensors"] == n_base, (doc["num_tensors"], n_base)
    minflt, majflt, rss = faults(ours_cmd)
    print(f"{'':34} {'best of ' + str(runs):>12}")
    print(f"{'nunchaku inspect --json':34} {ours * 1e3:10.1f} ms")
    print(f"{'python safetensors safe_open':34} {base * 1e3:10.1f} ms")
    print(f"tensors: {doc['num_tensors']}, parameters: {doc['num_parameters']}, bytes: {doc['weight_bytes']}")
    print(f"our page faults: {minflt} minor, {majflt} major, max RSS {rss / 1024:.1f} MiB "
          f"(data would be {doc['weight_bytes'] / 4096:.0f} pages)")
    print(f"ratio (safe_open time / nunchaku time): {base / ours:.2f}x")


if __name__ == "__main__":
    main()
