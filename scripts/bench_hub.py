#!/usr/bin/env python3
"""Requests and bytes a model's size costs before any download: `nunchaku estimate ORG/NAME`
(`inspect` for the GGUF)
(first call, and again from its header cache) against hf-mem's request pattern, both
counted by the server (tests/hub/hub_server.hpp standing in for the Hub: every redirect
hop is a request, bytes are bodies and headers sent). Counts, not wall time.

hf-mem's pattern, as its source (alvarobartt/hf-mem: run.py, safetensors/fetch.py,
gguf/fetch.py) issues it: GET /api/models/{id}/tree/{rev}?recursive=true, the safetensors
index, each shard's bytes=0-100000 (and bytes=8-{n+7} when the header is longer), each GGUF
bytes=0-1000000 re-fetched from byte 0 with the size doubled until it parses; redirects
followed; no cache between runs. config.json only with --experimental (left out here).

    /work/venv/bin/python scripts/bench_hub.py      # prints the markdown table for docs/hub.md
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx2

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"


def server_stats(endpoint, reset=False):
    return httpx2.get(f"{endpoint}/{'_reset' if reset else '_stats'}").json()


def hf_mem_pattern(endpoint, repo, gguf_file=None):
    with httpx2.Client(follow_redirects=True) as c:
        files = [f["path"] for f in c.get(f"{endpoint}/api/models/{repo}/tree/main?recursive=true").json() if f["type"] == "file"]
        url = lambda p: f"{endpoint}/{repo}/resolve/main/{p}"
        if gguf_file:
            size = 1_000_000
            while True:
                body = c.get(url(gguf_file), headers={"Range": f"bytes=0-{size}"}).content
                if gguf_header_end(body) is not None:
                    return
                size *= 2
        shards = ["model.safetensors"] if "model.safetensors" in files else sorted(
            set(c.get(url("model.safetensors.index.json")).json()["weight_map"].values()))
        for s in shards:
            body = c.get(url(s), headers={"Range": "bytes=0-100000"}).content
            n = struct.unpack("<Q", body[:8])[0]
            if n > len(body) - 8:
                c.get(url(s), headers={"Range": f"bytes=8-{n + 7}"})


def gguf_header_end(b):
    """Where a GGUF's tensor infos end, or None when `b` stops before that."""
    try:
        pos = 4 + 4
        n_tensors, n_kv = struct.unpack_from("<QQ", b, pos)
        pos += 16
        def string(p):
            (n,) = struct.unpack_from("<Q", b, p)
            if p + 8 + n > len(b):
                raise struct.error
            return p + 8 + n
        sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
        def value(t, p):
            if t == 8:
                return string(p)
            if t == 9:
                et, n = struct.unpack_from("<IQ", b, p)
                p += 12
                for _ in range(n):
                    p = value(et, p)
                return p
            return p + sizes[t]
        for _ in range(n_kv):
            pos = string(pos)
            (t,) = struct.unpack_from("<I", b, pos)
            pos = value(t, pos + 4)
        for _ in range(n_tensors):
            pos = string(pos)
            (nd,) = struct.unpack_from("<I", b, pos)
            pos += 4 + 8 * nd + 4 + 8
        return pos if pos <= len(b) else None
    except struct.error:
        return None


def big_gguf(path, tokens=200_000):
    def s(x):
        x = x.encode()
        return struct.pack("<Q", len(x)) + x
    out = b"GGUF" + struct.pack("<IQQ", 3, 1, 2)
    out += s("general.architecture") + struct.pack("<I", 8) + s("llama")
    out += s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, tokens) + b"".join(s(f"token{i}") for i in range(tokens))
    out += s("blk.0.attn_norm.weight") + struct.pack("<IQIQ", 1, 4, 0, 0)
    out += b"\0" * (-len(out) % 32) + b"\0" * 16
    Path(path).write_bytes(out)


def main():
    work = Path(tempfile.mkdtemp(prefix="nunchaku-benchhub-"))
    models = []
    for preset, shards in [("llama3-8b", 4), ("llama2-70b", 29)]:
        d = work / preset
        subprocess.run([sys.executable, str(ROOT / "scripts/make_sparse_checkpoint.py"), str(d), "--preset", preset,
                        "--shards", str(shards)], check=True, capture_output=True)
        models.append((f"bench/{preset}", d, None))
    g = work / "gguf"
    g.mkdir()
    big_gguf(g / "big-Q8_0.gguf")
    models.append(("bench/gguf-3.6MB-header", g, "big-Q8_0.gguf"))
    args = [str(BUILD / "nunchaku_hub_server")] + [f"{rid}={d}" for rid, d, _ in models]
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    endpoint = proc.stdout.readline().strip()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_") and "proxy" not in k.lower()}
    env.update({"HF_ENDPOINT": endpoint, "HF_HOME": str(work / "hf"), "XDG_CACHE_HOME": str(work / "xdg")})
    rows = []
    try:
        for rid, d, gguf_file in models:
            weights = sum(p.stat().st_size for p in d.iterdir())
            # The GGUF has a tokenizer's worth of metadata but no model dimensions: inspect it.
            cmd = [str(BUILD / "nunchaku"), "inspect" if gguf_file else "estimate", rid + (":Q8_0" if gguf_file else ""), "--json"]
            counts = []
            for _ in range(2):
                server_stats(endpoint, reset=True)
                r = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if r.returncode != 0:
                    sys.exit(f"bench_hub: {' '.join(cmd)}: {r.stderr}")
                counts.append(server_stats(endpoint))
            server_stats(endpoint, reset=True)
            hf_mem_pattern(endpoint, rid, gguf_file)
            counts.append(server_stats(endpoint))
            rows.append((rid, weights, counts))
    finally:
        proc.stdin.close()
        proc.wait()
    print("| model (sparse, served locally) | weights | nunchaku first call | nunchaku again (header cache) | hf-mem's pattern (every call) |")
    print("|---|---|---|---|---|")
    for rid, weights, (first, again, hfm) in rows:
        cell = lambda c: f"{c['requests']} requests, {c['bytes_sent'] / 1024:.0f} KiB"
        print(f"| {rid} | {weights / 1e9:.1f} GB | {cell(first)} | {cell(again)} | {cell(hfm)} |")


if __name__ == "__main__":
    main()
