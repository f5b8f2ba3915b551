#!/usr/bin/env python3
"""Writes the engine's reference data under testdata/engine/ with transformers and gguf-py.

    /tmp/fxenv/bin/python scripts/make_engine_goldens.py     (transformers 4.57, torch 2.5, gguf-py)

Everything the engine tests compare against comes from here, never from nunchaku:
  * goldens.json: per model, the full logits of the prompt positions of one prompt
    (transformers forward, fp32) and greedy 16-token continuations (model.generate,
    do_sample=False) of a few prompts.
  * Small fp32 models written with save_pretrained (qwen3 fp32, llama with llama3
    rope_scaling, llama with tied embeddings, a small llama that is also written as GGUF,
    and bf16 / f16 copies of it). The committed fixtures testdata/models/{llama,qwen2,
    mistral} (fp32) are reused, not copied.
  * GGUF copies of the small llama, written the way llama.cpp's convert_hf_to_gguf writes
    them (llama.cpp tensor names, Q/K rows permuted for the interleaved rope llama.cpp uses
    for arch llama), in F32, Q8_0 and Q4_0 (gguf.quants). Their references are transformers
    runs of the same model with the weights replaced by gguf.quants.dequantize(...) of what
    was written.
  * quant_blocks.json: random rows of Q8_0/Q4_0/Q4_K/Q6_K blocks (Q4_K/Q6_K hand-built,
    gguf-py cannot quantize them) with gguf-py's dequantized values and dot products
    with a random vector computed in float64.
No network; seeded, so a rerun writes the same numbers for the same library versions.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import torch
import gguf
from gguf import GGMLQuantizationType as QT
from gguf import quants
from transformers import (GenerationConfig, LlamaConfig, LlamaForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM, AutoModelForCausalLM)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "engine"
MODELS = ROOT / "testdata" / "models"
SEED = 4321
NEW_TOKENS = 16


def small_cfg(**kw):
    base = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=8, vocab_size=128, max_position_embeddings=128,
                rms_norm_eps=1e-5, rope_theta=10000.0, initializer_range=0.15, bos_token_id=1,
                eos_token_id=2, tie_word_embeddings=False)
    base.update(kw)
    return base


def perturb_norms(model):
    # HF initialises norm weights to 1; random ones make a wrong norm visible.
    g = torch.Generator().manual_seed(SEED + 7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith(".bias"):
                p.copy_(p + 0.3 * torch.randn(p.shape, generator=g))


def prompts_for(vocab):
    rng = np.random.default_rng(SEED + vocab)
    return [[1] + rng.integers(3, vocab, 7).tolist(),
            [1] + rng.integers(3, vocab, 12).tolist(),
            [1, 5]]


def reference(model, vocab):
    """logits of prompt 0 (all positions) and greedy continuations of every prompt."""
    model.eval()
    # No EOS: every continuation runs its full 16 tokens (the engine test stops on none either).
    model.generation_config.eos_token_id = None
    model.generation_config.bos_token_id = None
    model.generation_config.pad_token_id = 0
    prompts = prompts_for(vocab)
    out = {"prompts": prompts, "continuations": []}
    gc = GenerationConfig(do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=0,
                          pad_token_id=0)
    min_margin = 1e9
    with torch.no_grad():
        logits = model(torch.tensor([prompts[0]])).logits[0].float()
        out["logits"] = [[float(v) for v in row] for row in logits.numpy().astype(np.float32)]
        for p in prompts:
            g = model.generate(torch.tensor([p]), generation_config=gc, output_scores=True,
                               return_dict_in_generate=True)
            seq = g.sequences[0, len(p):].tolist()
            assert len(seq) == NEW_TOKENS, seq
            for s in g.scores:
                top = torch.topk(s[0].float(), 2).values
                min_margin = min(min_margin, float(top[0] - top[1]) / max(1e-9, float(top[0].abs())))
            out["continuations"].append(seq)
    out["min_greedy_margin"] = min_margin  # relative gap top1-top2 along the greedy paths
    return out


def save_new(name, model):
    d = OUT / name
    if d.exists():
        shutil.rmtree(d)
    model.save_pretrained(d, safe_serialization=True)
    return d


# ---------------------------------------------------------------- GGUF (convert_hf_to_gguf style)
def permute_qk(w, n_head):
    # HF stores q/k rows in "rotate half" order; convert_hf_to_gguf reorders them so that
    # llama.cpp's adjacent-pair rope (LLAMA_ROPE_TYPE_NORM, used for arch llama) is equivalent.
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_qk(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
LAYER_NAMES = {
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight", "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
}


def gguf_name(hf):
    if hf in GGUF_NAMES:
        return GGUF_NAMES[hf]
    parts = hf.split(".")
    return f"blk.{parts[2]}." + LAYER_NAMES[".".join(parts[3:])]


def write_gguf(model, cfg, path, qtype, arch="llama", dummy_vocab=False):
    """Returns the state dict (HF names, fp32) of what a reader dequantizes back.
    Q/K rows are permuted for arch llama only (convert_hf_to_gguf's LlamaModel); qwen2
    keeps HF order (llama.cpp uses NeoX rope for it). Tied models get no output.weight.
    dummy_vocab: add a placeholder SentencePiece vocabulary (<unk> <s> </s>, 256 byte
    tokens, then "▁t<i>") so llama.cpp loads the file (the bench needs that)."""
    w = gguf.GGUFWriter(str(path), arch)
    permute = arch == "llama"
    w.add_name("engine-test")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_vocab_size(cfg.vocab_size)
    if dummy_vocab:
        from make_bench_gguf import placeholder_vocab  # scripts/ is this script's sys.path[0]
        placeholder_vocab(w, cfg.vocab_size)
    w.add_file_type({QT.F32: 0, QT.F16: 1, QT.Q8_0: 7, QT.Q4_0: 2, QT.BF16: 32}[qtype])
    back = {}
    for hf, t in model.state_dict().items():
        if hf == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        a = t.detach().float().numpy().copy()
        if permute and hf.endswith("q_proj.weight"):
            a = permute_qk(a, cfg.num_attention_heads)
        elif permute and hf.endswith("k_proj.weight"):
            a = permute_qk(a, cfg.num_key_value_heads)
        if a.ndim == 2 and qtype != QT.F32:  # (BF16/F16 too: gguf.quants rounds them)
            q = quants.quantize(a, qtype)
            w.add_tensor(gguf_name(hf), q, raw_shape=q.shape, raw_dtype=qtype)
            deq = quants.dequantize(q, qtype).reshape(a.shape)
        else:
            w.add_tensor(gguf_name(hf), a)
            deq = a
        if permute and hf.endswith("q_proj.weight"):
            deq = unpermute_qk(deq, cfg.num_attention_heads)
        elif permute and hf.endswith("k_proj.weight"):
            deq = unpermute_qk(deq, cfg.num_key_value_heads)
        back[hf] = torch.from_numpy(np.ascontiguousarray(deq, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return back


# ---------------------------------------------------------------- quant blocks
def f16_bytes(vals):
    return np.asarray(vals, dtype=np.float16).view(np.uint8)


def quant_rows(rng, qtype, rows, cols):
    if qtype in (QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1):
        a = rng.standard_normal((rows, cols)).astype(np.float32)
        return quants.quantize(a, qtype)
    bs, nbytes = gguf.GGML_QUANT_SIZES[qtype]
    nb = cols // bs
    raw = rng.integers(0, 256, (rows, nb, nbytes), dtype=np.uint8)
    d = rng.uniform(0.001, 0.05, (rows, nb)).astype(np.float16)
    if qtype in (QT.Q4_K, QT.Q5_K):  # d (f16), dmin (f16), scales[12], [qh[32]], qs[128]
        dmin = rng.uniform(0.001, 0.05, (rows, nb)).astype(np.float16)
        raw[:, :, 0:2] = d.view(np.uint8).reshape(rows, nb, 2)
        raw[:, :, 2:4] = dmin.view(np.uint8).reshape(rows, nb, 2)
    elif qtype == QT.Q6_K:  # ql[128], qh[64], scales[16] (int8), d (f16)
        raw[:, :, 208:210] = d.view(np.uint8).reshape(rows, nb, 2)
    else:
        raise ValueError(qtype)
    return raw.reshape(rows, nb * nbytes)


def quant_blocks():
    rng = np.random.default_rng(SEED)
    out = []
    for qtype, cols in ((QT.Q8_0, 96), (QT.Q4_0, 96), (QT.Q4_1, 96), (QT.Q5_0, 96), (QT.Q5_1, 96),
                        (QT.Q4_K, 512), (QT.Q5_K, 512), (QT.Q6_K, 512)):
        rows = 5
        q = quant_rows(rng, qtype, rows, cols)
        deq = quants.dequantize(q, qtype).reshape(rows, cols).astype(np.float32)
        x = rng.standard_normal((3, cols)).astype(np.float32)
        dots = (deq.astype(np.float64) @ x.astype(np.float64).T).T  # [batch][row]
        out.append({"type": qtype.name, "rows": rows, "cols": cols, "data_hex": q.tobytes().hex(),
                    "dequant": [[float(v) for v in r] for r in deq],
                    "x": [[float(v) for v in r] for r in x],
                    "dot": [[float(v) for v in r] for r in dots]})
    return out


def main():
    torch.manual_seed(SEED)
    OUT.mkdir(parents=True, exist_ok=True)
    goldens = {}

    # Committed fp32 fixtures, reused as they are.
    for name in ("llama", "qwen2", "mistral"):
        m = AutoModelForCausalLM.from_pretrained(MODELS / name, torch_dtype=torch.float32)
        goldens[f"models/{name}"] = reference(m, m.config.vocab_size)

    torch.manual_seed(SEED + 1)
    q3 = Qwen3ForCausalLM(Qwen3Config(**small_cfg(tie_word_embeddings=True))).float()
    perturb_norms(q3)
    save_new("qwen3", q3)
    goldens["engine/qwen3"] = reference(q3, 128)

    torch.manual_seed(SEED + 2)
    l3 = LlamaForCausalLM(LlamaConfig(**small_cfg(
        head_dim=16, num_attention_heads=2, num_key_value_heads=1, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 16}))).float()
    perturb_norms(l3)
    save_new("llama3-rope", l3)
    goldens["engine/llama3-rope"] = reference(l3, 128)

    torch.manual_seed(SEED + 3)
    lt = LlamaForCausalLM(LlamaConfig(**small_cfg(tie_word_embeddings=True))).float()
    perturb_norms(lt)
    save_new("llama-tied", lt)
    goldens["engine/llama-tied"] = reference(lt, 128)

    torch.manual_seed(SEED + 4)
    cfg = LlamaConfig(**small_cfg())
    ls = LlamaForCausalLM(cfg).float()
    perturb_norms(ls)
    save_new("llama-small", ls)
    goldens["engine/llama-small"] = reference(ls, 128)

    # Half-precision copies: the reference is fp32 compute over the rounded weights, which
    # is what the engine does (weights stay bf16/f16 in memory, math in fp32).
    for name, dt in (("llama-small-bf16", torch.bfloat16), ("llama-small-f16", torch.float16)):
        h = LlamaForCausalLM(cfg)
        h.load_state_dict(ls.state_dict())
        h = h.to(dt)
        save_new(name, h)
        # A fresh fp32 model over the rounded weights (h.float() would also keep the rope
        # inv_freq buffer that .to(dt) rounded).
        ref = LlamaForCausalLM(cfg).float()
        ref.load_state_dict({k: v.float() for k, v in h.state_dict().items()})
        goldens[f"engine/{name}"] = reference(ref, 128)

    # GGUF copies of llama-small.
    for qtype, suffix in ((QT.F32, "f32"), (QT.Q8_0, "q8_0"), (QT.Q4_0, "q4_0")):
        d = OUT / "llama-small-gguf"
        d.mkdir(exist_ok=True)
        path = d / f"llama-small-{suffix}.gguf"
        back = write_gguf(ls, cfg, path, qtype)
        ref = LlamaForCausalLM(cfg).float()
        ref.load_state_dict(back)
        goldens[f"engine/llama-small-gguf/llama-small-{suffix}.gguf"] = reference(ref, 128)

    # qwen2 as GGUF (arch qwen2: biases, tied, HF row order, NeoX rope): same weights as
    # testdata/models/qwen2, so the engine test compares it with that model's goldens.
    q2 = AutoModelForCausalLM.from_pretrained(MODELS / "qwen2", dtype=torch.float32)
    q2.config.head_dim = q2.config.hidden_size // q2.config.num_attention_heads
    write_gguf(q2, q2.config, OUT / "qwen2-f32.gguf", QT.F32, arch="qwen2")

    for k, v in goldens.items():
        print(f"{k:50s} min greedy margin {v['min_greedy_margin']:.2e}")
    (OUT / "goldens.json").write_text(json.dumps(goldens, separators=(",", ":")))
    (OUT / "quant_blocks.json").write_text(json.dumps(quant_blocks(), separators=(",", ":")))
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"testdata/engine: {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
