#!/usr/bin/env python3
"""Writes tiny random fp32 checkpoints of the engine's recipe families with transformers
itself, and transformers' own answers for them (testdata/engine/families.json):

    /work/venv/bin/python scripts/make_engine_families.py      (transformers 5, torch)

Families: gemma (embedding scale, (1+w) RMSNorm, gelu-tanh, tied head), gemma2 (post-
attention / post-FFN norms, attention and final-logit softcaps, query_pre_attn_scalar,
alternating sliding window), gemma3 text (q/k norms, 5:1 local/global layers with their
own rope bases, linear scaling on the global ones), phi3 (fused qkv_proj / gate_up_proj)
and phi4-mini-like (phi3 with partial rotary and longrope scaling).

Each model is written with save_pretrained (safetensors, fp32). Its golden: a prompt, the
first 32 greedy token ids of model.generate (eager attention, do_sample=False), the logits
of every prompt position (one forward) and the logits of the last position of prompt +
continuation (the "final logits"). Windows are a few positions wide so that a 40-token
sequence crosses them; softcaps are small so that a missing one moves the logits.
No network; seeded.
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
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "engine"
SEED = 9876
NEW_TOKENS = 32

BASE = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
            head_dim=8, vocab_size=128, max_position_embeddings=128, rms_norm_eps=1e-6,
            initializer_range=0.15, bos_token_id=1, eos_token_id=2, pad_token_id=0)

FAMILIES = {
    "gemma": dict(model_type="gemma", num_hidden_layers=2, hidden_activation="gelu_pytorch_tanh",
                  tie_word_embeddings=True),
    "gemma2": dict(model_type="gemma2", num_hidden_layers=4, hidden_activation="gelu_pytorch_tanh",
                   tie_word_embeddings=True, sliding_window=6, query_pre_attn_scalar=12,
                   attn_logit_softcapping=1.5, final_logit_softcapping=2.5),
    "gemma3": dict(model_type="gemma3_text", num_hidden_layers=6, hidden_activation="gelu_pytorch_tanh",
                   tie_word_embeddings=True, sliding_window=5, query_pre_attn_scalar=12,
                   rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0,
                                                       "rope_theta": 1000000.0},
                                    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
    "phi3": dict(model_type="phi3", num_hidden_layers=2, hidden_act="silu", tie_word_embeddings=False),
    "phi4-mini": dict(model_type="phi3", num_hidden_layers=2, hidden_act="silu", tie_word_embeddings=True,
                      max_position_embeddings=256, original_max_position_embeddings=64,
                      rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                       "partial_rotary_factor": 0.5,
                                       "short_factor": [1.0, 1.7], "long_factor": [2.5, 9.0],
                                       "original_max_position_embeddings": 64}),
}


def make_model(name, kw, attempt):
    cfg_kw = dict(BASE)
    cfg_kw.update(kw)
    model_type = cfg_kw.pop("model_type")
    cfg = AutoConfig.for_model(model_type, **cfg_kw)
    cfg._attn_implementation = "eager"
    torch.manual_seed(SEED + sum(map(ord, name)) + 1000 * attempt)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    # Norm weights start at 0 (gemma's 1 + w) or 1; random ones make a wrong norm visible.
    g = torch.Generator().manual_seed(SEED + 7)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.copy_(p + 0.3 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in pname:
                # A tied head over an embedding scaled by sqrt(hidden) repeats the input token
                # unless the layers' updates are of the embedding's size.
                p.mul_(0.25)
    return model.eval()


def reference(name, model, vocab):
    rng = np.random.default_rng(SEED + len(name))
    prompt = [1] + rng.integers(3, vocab, 7).tolist()
    gc = GenerationConfig(do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                          pad_token_id=0, eos_token_id=None, bos_token_id=None)
    with torch.no_grad():
        prompt_logits = model(torch.tensor([prompt])).logits[0].float().numpy()
        g = model.generate(torch.tensor([prompt]), generation_config=gc, output_scores=True,
                           return_dict_in_generate=True)
        seq = g.sequences[0].tolist()
        ids = seq[len(prompt):]
        assert len(ids) == NEW_TOKENS, ids
        margin = min(float((lambda t: (t[0] - t[1]) / max(1e-9, abs(float(t[0]))))(
            torch.topk(s[0].float(), 2).values)) for s in g.scores)
        final = model(torch.tensor([seq[:-1]])).logits[0, -1].float().numpy()
    as_list = lambda row: [float(v) for v in row.astype(np.float32)]
    return {"prompt": prompt, "ids": ids, "prompt_logits": [as_list(r) for r in prompt_logits],
            "final_logits": as_list(final), "min_greedy_margin": margin,
            "transformers": __import__("transformers").__version__}


def main():
    goldens = {}
    for name, kw in FAMILIES.items():
        # The first seed whose greedy path is varied (not one token repeated) and whose top-2
        # logits stay apart (a relative gap far above fp32 summation-order noise).
        for attempt in range(40):
            model = make_model(name, kw, attempt)
            ref = reference(name, model, model.config.vocab_size)
            if len(set(ref["ids"])) >= 6 and ref["min_greedy_margin"] > 1e-3:
                break
        else:
            raise SystemExit(f"{name}: no seed gives a varied, well-separated greedy path")
        d = OUT / name
        if d.exists():
            shutil.rmtree(d)
        model.save_pretrained(d, safe_serialization=True)
        (d / "generation_config.json").unlink(missing_ok=True)
        ref["seed_attempt"] = attempt
        goldens[name] = ref
        print(name, goldens[name]["ids"][:8], "margin", goldens[name]["min_greedy_margin"])
    with open(OUT / "families.json", "w") as f:
        json.dump(goldens, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
