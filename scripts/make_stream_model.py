#!/usr/bin/env python3
"""Writes a random-weight Llama-shaped model (bf16 safetensors, ~2.3 GB by default) with the
tokenizer of testdata/run/llama-spm, for scripts/bench_stream.sh. Tensors are written one at
a time, so memory stays small whatever the size.

usage: make_stream_model.py OUT_DIR [--layers N] [--hidden H] [--intermediate I] [--heads N]
                            [--kv-heads N] [--max-pos N] [--fast | --sparse]
--fast tiles one 16M-value random pool over every matrix (each tensor from another offset),
so an 8 GB model is written at disk speed (for GPU benchmarks, where values do not matter).
--sparse leaves the data a file hole (zeros, no disk): for what reads only the header and
shapes (plans, sizes), e.g. gpu-check.sh's rehearsal of its real-size budgets.
"""
import argparse
import json
import os
import shutil
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TOK_DIR = os.path.join(HERE, "..", "testdata", "run", "llama-spm")


def bf16_bytes(a):
    """float32 array -> bf16 bytes, round to nearest even (as torch does)."""
    u = a.astype(np.float32).view(np.uint32)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16).tobytes()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=22)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=5632)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=0, help="default: --heads")
    ap.add_argument("--max-pos", type=int, default=2048)
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--sparse", action="store_true")
    a = ap.parse_args()
    kvh = a.kv_heads or a.heads
    KV = a.hidden // a.heads * kvh
    with open(os.path.join(TOK_DIR, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    H, I, L = a.hidden, a.intermediate, a.layers
    shapes = [("model.embed_tokens.weight", (vocab, H))]
    for l in range(L):
        p = f"model.layers.{l}."
        shapes += [(p + "input_layernorm.weight", (H,)), (p + "self_attn.q_proj.weight", (H, H)),
                   (p + "self_attn.k_proj.weight", (KV, H)), (p + "self_attn.v_proj.weight", (KV, H)),
                   (p + "self_attn.o_proj.weight", (H, H)), (p + "post_attention_layernorm.weight", (H,)),
                   (p + "mlp.gate_proj.weight", (I, H)), (p + "mlp.up_proj.weight", (I, H)),
                   (p + "mlp.down_proj.weight", (H, I))]
    shapes += [("model.norm.weight", (H,)), ("lm_head.weight", (vocab, H))]
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in shapes:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(0)
    pool = np.frombuffer(bf16_bytes(rng.standard_normal(1 << 24, np.float32) * 0.02), np.uint16) if a.fast else None
    tmp = os.path.join(a.out, "model.safetensors.tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj)
        for name, shape in shapes if not a.sparse else []:
            if len(shape) == 1:
                f.write(bf16_bytes(np.ones(shape, np.float32)))
            elif pool is not None:
                n, at = int(np.prod(shape)), int(rng.integers(0, len(pool)))
                while n > 0:
                    k = min(n, len(pool) - at)
                    f.write(pool[at:at + k].tobytes())
                    n, at = n - k, 0
            else:
                f.write(bf16_bytes(rng.standard_normal(shape, np.float32) * 0.02))
        f.truncate(8 + len(hj) + off)
    os.replace(tmp, os.path.join(a.out, "model.safetensors"))
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
           "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": a.heads,
           "num_key_value_heads": kvh, "vocab_size": vocab, "max_position_embeddings": a.max_pos,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
           "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        src = os.path.join(TOK_DIR, name)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(a.out, name))
    print(f"{a.out}: {off / 1e9:.2f} GB of weights, {L} layers")


if __name__ == "__main__":
    main()
