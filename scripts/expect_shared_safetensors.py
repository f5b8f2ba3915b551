#!/usr/bin/env python3
"""Expected index of every file under ../shared/testfiles/safetensors, as the
reference `safetensors` library reports it, for tests/test_safetensors.cpp.

Names, dtypes, shapes and metadata come from safetensors.safe_open. Offsets are
the absolute file offsets (8 + header_len + data_offsets[0]); they are not part
of safe_open's API, so this script checks each one by comparing the file bytes
at that offset with the tensor bytes safe_open returns, and records an FNV-1a
64-bit hash of them so the C++ test can check the same bytes without Python.

Usage: python3 scripts/expect_shared_safetensors.py [SHARED_TESTFILES_DIR]
Writes testdata/expected/shared_safetensors.json.
"""
import json
import os
import struct
import sys

from safetensors import safe_open

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(REPO), "shared", "testfiles")
OUT = os.path.join(REPO, "testdata", "expected", "shared_safetensors.json")


def fnv1a64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def describe(path: str) -> dict:
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])  # only for data_offsets (not exposed by safe_open)
    data_start = 8 + n
    tensors = []
    with safe_open(path, framework="numpy") as f:
        metadata = f.metadata() or {}
        for name in f.keys():
            sl = f.get_slice(name)
            begin, end = header[name]["data_offsets"]
            got = f.get_tensor(name)
            stored = raw[data_start + begin : data_start + end]
            assert got.tobytes() == stored, f"{path}: {name}: bytes at the offset differ from safe_open's"
            tensors.append({
                "name": name,
                "dtype": sl.get_dtype(),
                "shape": list(sl.get_shape()),
                "offset": data_start + begin,
                "nbytes": end - begin,
                "fnv1a64": fnv1a64(stored),
            })
    tensors.sort(key=lambda t: (t["offset"], t["nbytes"], t["name"]))
    return {"bytes": len(raw), "header_len": n, "metadata": metadata, "tensors": tensors}


def main() -> None:
    base = os.path.join(ROOT, "safetensors")
    files = {}
    for dirpath, _, names in os.walk(base):
        for name in names:
            if name.endswith(".safetensors"):
                full = os.path.join(dirpath, name)
                files[os.path.relpath(full, ROOT)] = describe(full)
    files = dict(sorted(files.items()))
    import safetensors
    doc = {"generator": "scripts/expect_shared_safetensors.py",
           "safetensors_version": safetensors.__version__, "files": files}
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: {len(files)} files, {sum(len(v['tensors']) for v in files.values())} tensors")


if __name__ == "__main__":
    main()
