#!/usr/bin/env python3
"""Writes a sparse, 70B-scale sharded safetensors checkpoint: real headers,
data regions left as file holes (ftruncate), so ~138 GB apparent takes ~1 MB on
disk. Used by the benchmarks (inspect/estimate/plan read headers only).

    make_sparse_checkpoint.py OUT_DIR [--preset llama2-70b|llama2-7b|llama3-8b] [--shards N]
"""
import argparse, json, os, struct

PRESETS = {
    # name: (hidden, layers, heads, kv_heads, intermediate, vocab, max_pos, rope_theta)
    "llama2-70b": (8192, 80, 64, 8, 28672, 32000, 4096, 10000.0),
    "llama2-7b": (4096, 32, 32, 32, 11008, 32000, 4096, 10000.0),
    "llama3-8b": (4096, 32, 32, 8, 14336, 128256, 8192, 500000.0),
}


def tensors(h, L, nh, nkv, inter, vocab):
    hd = h // nh
    out = [("model.embed_tokens.weight", [vocab, h])]
    for i in range(L):
        p = f"model.layers.{i}."
        out += [
            (p + "self_attn.q_proj.weight", [nh * hd, h]),
            (p + "self_attn.k_proj.weight", [nkv * hd, h]),
            (p + "self_attn.v_proj.weight", [nkv * hd, h]),
            (p + "self_attn.o_proj.weight", [h, nh * hd]),
            (p + "mlp.gate_proj.weight", [inter, h]),
            (p + "mlp.up_proj.weight", [inter, h]),
            (p + "mlp.down_proj.weight", [h, inter]),
            (p + "input_layernorm.weight", [h]),
            (p + "post_attention_layernorm.weight", [h]),
        ]
    out += [("model.norm.weight", [h]), ("lm_head.weight", [vocab, h])]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--preset", default="llama2-70b", choices=PRESETS)
    ap.add_argument("--shards", type=int, default=30)
    a = ap.parse_args()
    h, L, nh, nkv, inter, vocab, maxpos, theta = PRESETS[a.preset]
    ts = tensors(h, L, nh, nkv, inter, vocab)
    os.makedirs(a.out, exist_ok=True)
    total = sum(2 * (s[0] * (s[1] if len(s) > 1 else 1)) for _, s in ts)
    per_shard = total / a.shards
    shards, cur, cur_bytes = [], [], 0
    for name, shape in ts:
        nb = 2
        for d in shape:
            nb *= d
        if cur and cur_bytes + nb > per_shard and len(shards) < a.shards - 1:
            shards.append(cur)
            cur, cur_bytes = [], 0
        cur.append((name, shape, nb))
        cur_bytes += nb
    shards.append(cur)
    weight_map = {}
    n = len(shards)
    for i, sh in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        header, off = {"__metadata__": {"format": "pt"}}, 0
        for name, shape, nb in sh:
            header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + nb]}
            off += nb
            weight_map[name] = fname
        hb = json.dumps(header, separators=(",", ":")).encode()
        hb += b" " * ((8 - len(hb) % 8) % 8)
        path = os.path.join(a.out, fname)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(hb)))
            f.write(hb)
            f.truncate(8 + len(hb) + off)
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
        "num_hidden_layers": L, "num_attention_heads": nh, "num_key_value_heads": nkv,
        "intermediate_size": inter, "vocab_size": vocab, "max_position_embeddings": maxpos,
        "rms_norm_eps": 1e-5, "rope_theta": theta, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "hidden_act": "silu",
    }
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    print(f"{a.out}: {n} shards, {len(ts)} tensors, {total} bytes apparent")


if __name__ == "__main__":
    main()
