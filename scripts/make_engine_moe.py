#!/usr/bin/env python3
"""Tiny random fp32 mixture-of-experts checkpoints written by transformers, and transformers'
own answers for them (testdata/engine/moe.json), for the engine's MoE layers:

    /work/venv/bin/python scripts/make_engine_moe.py      (transformers 5, torch)

Families: mixtral (softmax over the top-k, block_sparse_moe.experts.N.w1/w2/w3), qwen2_moe
(top-k of the softmax without renormalization, a shared expert behind a sigmoid gate, q/k/v
biases, one dense layer off decoder_sparse_step), qwen3_moe (renormalized top-k, q/k norms per
head, one dense mlp_only layer) and olmoe (q/k norms over all of q and k, top-k of the softmax;
no GQA, as OLMoE itself and llama.cpp's graph for it).

As scripts/make_engine_families.py (whose model and reference code this reuses): a prompt,
the first 32 greedy ids of eager generate, the prompt's logits, the final logits. A seed is
kept only when, besides a varied and well-separated greedy path, every routing decision of
the reference passes is clear: the k-th and (k+1)-th router logits of every token of every MoE
layer differ by more than 1e-3 (fp32 summation order cannot flip an expert).
No network; seeded.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_engine_families as fam  # noqa: E402
import torch  # noqa: E402

OUT = fam.OUT
FAMILIES = {
    "mixtral": dict(model_type="mixtral", num_hidden_layers=2, num_local_experts=4, num_experts_per_tok=2,
                    intermediate_size=24, hidden_act="silu", tie_word_embeddings=False),
    "qwen2_moe": dict(model_type="qwen2_moe", num_hidden_layers=3, num_experts=6, num_experts_per_tok=2,
                      moe_intermediate_size=16, shared_expert_intermediate_size=24, intermediate_size=40,
                      decoder_sparse_step=1, mlp_only_layers=[1], norm_topk_prob=False, hidden_act="silu",
                      tie_word_embeddings=False, use_sliding_window=False),
    "qwen3_moe": dict(model_type="qwen3_moe", num_hidden_layers=3, num_experts=8, num_experts_per_tok=3,
                      moe_intermediate_size=16, intermediate_size=40, mlp_only_layers=[2], norm_topk_prob=True,
                      hidden_act="silu", tie_word_embeddings=False, use_sliding_window=False),
    "olmoe": dict(model_type="olmoe", num_hidden_layers=2, num_experts=8, num_experts_per_tok=2, num_key_value_heads=4,
                  intermediate_size=16, norm_topk_prob=False, hidden_act="silu", tie_word_embeddings=False,
                  clip_qkv=None),
}


def routing_gap(model, prompt_ids, k):
    """The smallest gap between the k-th and (k+1)-th router logit over the passes' tokens."""
    gaps = []

    def hook(mod, args, _out):
        x = args[0].reshape(-1, args[0].shape[-1]).float()
        logits = x @ mod.weight.float().T
        top = torch.topk(logits, k + 1, dim=-1).values
        gaps.append(float((top[:, k - 1] - top[:, k]).min()))

    hooks = [m.register_forward_hook(hook) for n, m in model.named_modules()
             if n.endswith("mlp.gate") or n.endswith("block_sparse_moe.gate")]
    with torch.no_grad():
        model(torch.tensor([prompt_ids]))
    for h in hooks:
        h.remove()
    assert gaps, "no router found"
    return min(gaps)


def main():
    goldens = {}
    for name, kw in FAMILIES.items():
        k = kw["num_experts_per_tok"]
        for attempt in range(60):
            model = fam.make_model(name, kw, attempt)
            ref = fam.reference(name, model, model.config.vocab_size)
            seq = ref["prompt"] + ref["ids"]
            gap = routing_gap(model, seq, k)
            if len(set(ref["ids"])) >= 6 and ref["min_greedy_margin"] > 1e-3 and gap > 1e-3:
                break
        else:
            raise SystemExit(f"{name}: no seed gives a varied greedy path with clear routing")
        d = OUT / name
        if d.exists():
            shutil.rmtree(d)
        model.save_pretrained(d, safe_serialization=True)
        (d / "generation_config.json").unlink(missing_ok=True)
        ref["seed_attempt"] = attempt
        ref["min_routing_gap"] = gap
        goldens[name] = ref
        print(name, ref["ids"][:8], "margin", ref["min_greedy_margin"], "routing gap", gap)
    with open(OUT / "moe.json", "w") as f:
        json.dump(goldens, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
