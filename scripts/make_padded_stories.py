#!/usr/bin/env python3
"""A trained model that K-quants can hold: stories260K.gguf (llama2.c, hidden 64, ffn 172)
zero-padded to hidden 256 and ffn 256, then quantized by llama.cpp to Q4_K_M and BF16. For measuring
what `run --fast-math` costs on trained weights (scripts/bench_fast_math.sh); the output is
a derivative of ../shared/testfiles, so it goes to /tmp, never into the repo.

    /tmp/nunchaku-bench/venv/bin/python scripts/make_padded_stories.py [OUT_DIR]

(the venv of scripts/bench_run.sh: llama-cpp-python 0.3.36, plus `pip install gguf`).

The padding keeps the function: the new input columns and output rows are zero, so the
residual stream's new dimensions stay zero; RMSNorm over 256 dimensions then divides by
half the old RMS, which norm weights of half the old value and an epsilon of a quarter
undo. Attention (8 heads of 8, now stated by attention.key_length) is unchanged. Writes OUT_DIR/stories260K-pad256-f32.gguf,
OUT_DIR/stories260K-pad256-q4_k_m.gguf and OUT_DIR/stories260K-pad256-bf16.gguf.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import gguf
import llama_cpp

SRC = Path(__file__).resolve().parent.parent.parent / "shared" / "testfiles" / "gguf" / "stories260K.gguf"
H, F = 256, 256


def pad(a: np.ndarray, rows: int, cols: int) -> np.ndarray:
    out = np.zeros((rows, cols), dtype=np.float32)
    out[: a.shape[0], : a.shape[1]] = a
    return out


def main() -> None:
    out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/tmp/nunchaku-bench/gguf")
    out_dir.mkdir(parents=True, exist_ok=True)
    f32, q4 = out_dir / "stories260K-pad256-f32.gguf", out_dir / "stories260K-pad256-q4_k_m.gguf"
    r = gguf.GGUFReader(str(SRC))
    w = gguf.GGUFWriter(str(f32), "llama")
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value = field.contents()
        if name == "llama.embedding_length":
            value = H
        elif name == "llama.feed_forward_length":
            value = F
        elif name == "llama.attention.layer_norm_rms_epsilon":
            value = float(value) / 4
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, value, vtype, sub_type=sub)
    head_dim = r.fields["llama.embedding_length"].contents() // r.fields["llama.attention.head_count"].contents()
    w.add_key_length(head_dim)  # no longer hidden / heads
    w.add_value_length(head_dim)
    for t in r.tensors:
        a = np.asarray(t.data, dtype=np.float32)  # rows = outputs (GGUF ne reversed)
        n = t.name
        if n.endswith("_norm.weight"):
            v = np.zeros(H, dtype=np.float32)
            v[: a.shape[0]] = a * 0.5
            a = v
        elif n in ("token_embd.weight", "output.weight") or n.endswith(("attn_q.weight", "attn_k.weight", "attn_v.weight")):
            a = pad(a, a.shape[0], H)  # inputs: hidden
        elif n.endswith("attn_output.weight"):
            a = pad(a, H, a.shape[1])  # outputs: hidden
        elif n.endswith(("ffn_gate.weight", "ffn_up.weight")):
            a = pad(a, F, H)
        elif n.endswith("ffn_down.weight"):
            a = pad(a, H, F)
        else:
            raise SystemExit(f"unexpected tensor {n}")
        w.add_tensor(n, np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    bf16 = out_dir / "stories260K-pad256-bf16.gguf"
    for dst, ftype in ((q4, llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M), (bf16, llama_cpp.LLAMA_FTYPE_MOSTLY_BF16)):
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = ftype
        rc = llama_cpp.llama_model_quantize(str(f32).encode(), str(dst).encode(), params)
        if rc != 0:
            raise SystemExit(f"llama_model_quantize failed for {dst}: {rc}")
        for t in gguf.GGUFReader(str(dst)).tensors:
            print(dst.name, t.name, t.tensor_type.name, list(t.shape))
    print("wrote", f32, q4, bf16)


if __name__ == "__main__":
    main()
