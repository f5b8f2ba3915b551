#!/usr/bin/env python3
"""Writes testdata/engine/fast_math_kquants.json: llama.cpp's own 8-bit-activation
arithmetic for Q4_K, Q5_K and Q6_K weights, the reference of `run --fast-math`.

    /tmp/nunchaku-bench/venv/bin/python scripts/make_fast_math_fixture.py

The venv is scripts/bench_run.sh's llama.cpp one (llama-cpp-python 0.3.36, numpy): this
script calls ggml's portable C reference functions in the libraries it ships, through
ctypes, never nunchaku:
  * quantize_row_q8_K_ref (libggml-base): each activation row as Q8_K blocks (per 256
    values: f32 scale d, 256 int8 codes, 16 int16 sums of 16 codes);
  * ggml_vec_dot_q{4,5,6}_K_q8_K_generic (libggml-cpu): the dot product of a weight row
    with those blocks, llama.cpp's decode arithmetic for these types.
The weight rows are random bytes with random f16 scales (as make_engine_goldens.py builds
them; gguf-py cannot quantize to K types). Activations are normal with a few outliers (as
real hidden states have), plus a row of zeros and a row with one nonzero value.
Seeded: a rerun writes the same file for the same library versions.
"""
from __future__ import annotations

import ctypes
import glob
import json
import os
from pathlib import Path

import numpy as np
import llama_cpp

SEED = 20261202
OUT = Path(__file__).resolve().parent.parent / "testdata" / "engine" / "fast_math_kquants.json"
Q8K_BYTES = 4 + 256 + 2 * 16
BLOCK_BYTES = {"Q4_K": 144, "Q5_K": 176, "Q6_K": 210}


def libs():
    d = Path(llama_cpp.__file__).parent / "lib"
    base = ctypes.CDLL(str(d / "libggml-base.so"), mode=os.RTLD_GLOBAL)
    cpu = ctypes.CDLL(str(d / "libggml-cpu.so"), mode=os.RTLD_GLOBAL)
    cpu.ggml_cpu_init()  # fills the f16 -> f32 table the reference code reads (else every d is 0)
    base.quantize_row_q8_K_ref.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    base.quantize_row_q8_K_ref.restype = None
    dots = {}
    for t in BLOCK_BYTES:
        dot = getattr(cpu, f"ggml_vec_dot_{t.lower().replace('_k', '_K')}_q8_K_generic")
        dot.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                        ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        dot.restype = None
        dots[t] = dot
    return base.quantize_row_q8_K_ref, dots


def k_rows(rng, qtype, rows, cols):
    nb, nbytes = cols // 256, BLOCK_BYTES[qtype]
    raw = rng.integers(0, 256, (rows, nb, nbytes), dtype=np.uint8)
    d = rng.uniform(0.001, 0.05, (rows, nb)).astype(np.float16)
    if qtype == "Q6_K":  # ql[128], qh[64], scales[16] (int8), d (f16)
        raw[:, :, 208:210] = d.view(np.uint8).reshape(rows, nb, 2)
    else:  # d (f16), dmin (f16), scales[12], [qh[32]], qs[128]
        dmin = rng.uniform(0.001, 0.05, (rows, nb)).astype(np.float16)
        raw[:, :, 0:2] = d.view(np.uint8).reshape(rows, nb, 2)
        raw[:, :, 2:4] = dmin.view(np.uint8).reshape(rows, nb, 2)
    return np.ascontiguousarray(raw.reshape(rows, nb * nbytes))


def activations(rng, n, cols):
    x = rng.standard_normal((n, cols)).astype(np.float32)
    for r in range(n):  # a few outliers per row, as hidden states have
        idx = rng.integers(0, cols, 3)
        x[r, idx] *= 40.0
    x[n - 2, :] = 0.0  # a block of zeros quantizes to d = 0
    x[n - 1, :] = 0.0
    x[n - 1, 300] = -2.5  # one nonzero value: the only code at +-127
    return np.ascontiguousarray(x)


def main():
    quantize, dots = libs()
    rng = np.random.default_rng(SEED)
    rows, cols, n = 11, 1024, 5
    x = activations(rng, n, cols)
    nb = cols // 256
    q8 = np.zeros((n, nb * Q8K_BYTES), dtype=np.uint8)
    for t in range(n):
        quantize(x[t].ctypes.data, q8[t].ctypes.data, cols)
    weights = {}
    s = ctypes.c_float()
    for qtype, dot in dots.items():
        w = k_rows(rng, qtype, rows, cols)
        y = np.zeros((n, rows), dtype=np.float32)
        for t in range(n):
            for r in range(rows):
                dot(cols, ctypes.byref(s), 0, w[r].ctypes.data, 0, q8[t].ctypes.data, 0, 1)
                y[t, r] = s.value
        weights[qtype] = {"hex": w.tobytes().hex(), "dot": [[float(v) for v in r] for r in y]}  # dot: [token][row]
    OUT.write_text(json.dumps({
        "about": "scripts/make_fast_math_fixture.py: ggml quantize_row_q8_K_ref and "
                 "ggml_vec_dot_q{4,5,6}_K_q8_K_generic (llama-cpp-python %s)" % llama_cpp.__version__,
        "rows": rows, "cols": cols, "tokens": n,
        "x": [[float(v) for v in r] for r in x],
        "q8k_hex": [q8[t].tobytes().hex() for t in range(n)],  # ggml block_q8_K: d, qs[256], bsums[16]
        "weights": weights,
    }, separators=(",", ":")))
    print("wrote", OUT)


if __name__ == "__main__":
    main()
