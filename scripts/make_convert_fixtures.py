#!/usr/bin/env python3
"""Fixtures and goldens for `nunchaku convert` (testdata/convert/), written by torch,
python safetensors and gguf-py; the tests compare nunchaku's output with them.

  values.safetensors         F64/F32/F16/BF16 vectors with the values rounding gets wrong:
                             ties, subnormals, overflow to Inf, NaN, -0, random normals
  values_{bf16,f16,f32}.safetensors   the same tensors after torch's Tensor.to(dtype)
  q8_input.safetensors       one F32 [4, 64] matrix (zero block, near-half steps, random)
  q8_expected.safetensors    gguf.quants.quantize(w, Q8_0) bytes as a U8 tensor "w"
  dequant.gguf               gguf-py GGUFWriter: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (gguf.quants),
                             Q4_K, Q5_K, Q6_K (random blocks with finite scales), F16, BF16
  dequant_f32.safetensors    gguf.quants.dequantize of each tensor (float32)
  dequant_bf16.safetensors   those float32 values through torch .to(torch.bfloat16)

With --check BUILD/nunchaku it also converts testdata models with that binary and loads
the results with python safetensors and transformers (tensors equal to the input's).

Run with: /work/venv-convert/bin/python scripts/make_convert_fixtures.py
(torch 2.15, safetensors 0.8, gguf 0.19, numpy; transformers 5.24 only for --check)
"""
import os
import subprocess
import sys
import tempfile

import gguf
import numpy as np
import torch
from safetensors.numpy import save_file as save_np
from safetensors.torch import load_file, save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "testdata", "convert")


def bits_f32(u):
    return np.array(u, dtype=np.uint32).view(np.float32)


def values():
    rng = np.random.default_rng(16)
    special = bits_f32([
        0x3F808000, 0x3F818000, 0x3F808001, 0x3F817FFF,  # bf16 ties (to even) and near-ties
        0x3F801000, 0x3F803000,                          # f16 ties
        0x33000000, 0x33000001, 0x33800000, 0x387FC000,  # f16 subnormal edge, 2^-24, largest subnormal
        0x477FEFFF, 0x477FF000, 0x7F7FFFFF,              # f16 max edge, overflow, f32 max (bf16 Inf)
        0x7F800000, 0xFF800000, 0x7FC00000, 0x80000000, 0x00000001,
    ])
    f32 = np.concatenate([special, rng.standard_normal(46).astype(np.float32) * 100]).astype(np.float32)
    t = {
        "v.f32": torch.from_numpy(f32),
        "v.f64": torch.from_numpy(rng.standard_normal(64) * 1e3),
        "v.f16": torch.from_numpy(rng.standard_normal(64).astype(np.float16) * 10),
        "v.bf16": torch.from_numpy(f32[::-1].copy()).to(torch.bfloat16),
        "v.matrix": torch.from_numpy(rng.standard_normal((8, 16)).astype(np.float32)),
        "v.i64": torch.arange(-5, 5, dtype=torch.int64),
    }
    save_file(t, os.path.join(OUT, "values.safetensors"), metadata={"format": "pt"})
    for name, dt in (("bf16", torch.bfloat16), ("f16", torch.float16), ("f32", torch.float32)):
        conv = {k: (v.to(dt) if v.is_floating_point() else v) for k, v in t.items()}
        save_file(conv, os.path.join(OUT, f"values_{name}.safetensors"), metadata={"format": "pt"})


def q8():
    rng = np.random.default_rng(8)
    w = rng.standard_normal((4, 64)).astype(np.float32)
    w[0, :32] = 0                                      # a zero block (d = 0)
    w[1, :32] = (np.arange(32) - 16).astype(np.float32) * 0.5 + 0.25  # values landing on .5 steps
    save_np({"w": w}, os.path.join(OUT, "q8_input.safetensors"))
    q = gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q8_0)
    save_np({"w": q.reshape(-1).astype(np.uint8)}, os.path.join(OUT, "q8_expected.safetensors"))


def k_blocks(rng, qtype, n_blocks):
    """Random K-quant blocks whose f16 scales are finite and small."""
    size = gguf.GGML_QUANT_SIZES[qtype][1]
    b = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    d = (rng.random((n_blocks, 2)) * 0.01).astype(np.float16).view(np.uint8)
    if qtype == gguf.GGMLQuantizationType.Q6_K:
        b[:, size - 2:] = d[:, :2]                     # d is the last field
    else:
        b[:, :4] = d.reshape(n_blocks, 4)              # d, dmin first
    return b


def dequant():
    rng = np.random.default_rng(4)
    T = gguf.GGMLQuantizationType
    w = gguf.GGUFWriter(os.path.join(OUT, "dequant.gguf"), "llama")
    expect = {}
    for qt in (T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.BF16):
        x = rng.standard_normal((2, 64)).astype(np.float32)
        q = gguf.quants.quantize(x, qt)
        name = f"t.{qt.name.lower()}"
        w.add_tensor(name, q, raw_dtype=qt)
        expect[name] = gguf.quants.dequantize(q, qt).reshape(2, 64)
    for qt in (T.Q4_K, T.Q5_K, T.Q6_K):
        q = k_blocks(rng, qt, 2)
        name = f"t.{qt.name.lower()}"
        w.add_tensor(name, q, raw_dtype=qt)  # one block per row: shape (2, 256)
        expect[name] = gguf.quants.dequantize(q, qt).reshape(2, 256)
    x16 = rng.standard_normal((3, 32)).astype(np.float16)
    w.add_tensor("t.f16", x16)
    expect["t.f16"] = x16.astype(np.float32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    save_np({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in expect.items()},
            os.path.join(OUT, "dequant_f32.safetensors"))
    save_file({k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)).to(torch.bfloat16)
               for k, v in expect.items()}, os.path.join(OUT, "dequant_bf16.safetensors"))


def check(binary):
    """Our outputs load in python safetensors and transformers with the input's values."""
    import transformers
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(ROOT, "testdata", "run", "llama-spm")
        for args in ([], ["--shard-size", "100KB"], ["--shard-by", "layer"], ["--dtype", "bf16"]):
            out = os.path.join(tmp, "o" + "".join(a.strip("-") for a in args))
            subprocess.run([binary, "convert", src, out, "-q"] + args, check=True)
            m = transformers.AutoModelForCausalLM.from_pretrained(out)
            ref = transformers.AutoModelForCausalLM.from_pretrained(src)
            dt = torch.bfloat16 if "bf16" in args else torch.float32
            for (k, a), (k2, b) in zip(m.state_dict().items(), ref.state_dict().items()):
                assert k == k2 and torch.equal(a, b.to(dt)), k
            print("transformers loads", out, "with equal tensors")
        pt = os.path.join(ROOT, "testdata", "models", "llama-pt", "model_zip.pt")
        out = os.path.join(tmp, "pt")
        subprocess.run([binary, "convert", pt, out, "-q"], check=True)
        got = load_file(os.path.join(out, "model.safetensors"))
        sd = torch.load(pt, weights_only=True)
        for k, v in got.items():
            assert torch.equal(v, sd[k]), k
        print("python safetensors reads", out, f"({len(got)} tensors equal torch.load's)")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        check(sys.argv[2])
        return
    os.makedirs(OUT, exist_ok=True)
    values()
    q8()
    dequant()


if __name__ == "__main__":
    main()
