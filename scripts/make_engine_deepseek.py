#!/usr/bin/env python3
"""Tiny random fp32 DeepSeek-V2 / V3 checkpoints written by transformers, and transformers'
own answers for them (testdata/engine/deepseek.json), for the engine's MLA attention and
DeepSeek routing:

    /work/venv-torch/bin/python scripts/make_engine_deepseek.py      (transformers 5.25, torch)

Models (all: first_k_dense_replace 1, so layer 0 is a dense MLP and the others MoE with
shared experts; v_head_dim 12 != qk_nope_head_dim 8, so a mix-up of the two shows):
- deepseek_v3: q through the low-rank path (q_lora_rank 24), kv_lora_rank 16, yarn rope
  (factor 4, mscale 0.707, mscale_all_dim 1: attention factor and softmax mscale both != 1),
  interleaved rope, sigmoid scores + a random e_score_correction_bias, 8 experts in 4 groups,
  top 2 groups, top 3 experts, normalized, routed_scaling_factor 2.5, 1 shared expert.
- deepseek_v3_neox: the same with rope_interleave false (rotate-half on the rope part) and
  q_proj directly (q_lora_rank None), 2 shared experts.
- deepseek_v2: q_proj directly, softmax scores, group_limited_greedy (4 groups, top 2),
  top 2 experts, routed_scaling_factor 1.5 (V2's router never renormalizes), default rope,
  2 shared experts.
- deepseek_v2_lite: greedy top 3, q_lora_rank 24, yarn with mscale = mscale_all_dim 0.707
  (as DeepSeek-V2-Lite's config: attention factor 1, softmax mscale != 1).

As scripts/make_engine_moe.py: a prompt, the first 32 greedy ids of eager generate, the
prompt's logits, the final logits. A seed is kept only when the greedy path is varied and
well separated and every routing decision of the reference passes is clear: the group
choice and the expert choice (on the scores the router ranks) each differ by more than 1e-3
between the last chosen and the first left out. No network; seeded.
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
COMMON = dict(num_hidden_layers=3, num_key_value_heads=4, intermediate_size=48, moe_intermediate_size=16,
              first_k_dense_replace=1, n_routed_experts=8, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8,
              v_head_dim=12, hidden_act="silu", tie_word_embeddings=False)
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "mscale": 0.707, "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 32, "beta_fast": 32.0, "beta_slow": 1.0}
FAMILIES = {
    "deepseek_v3": dict(COMMON, model_type="deepseek_v3", q_lora_rank=24, num_experts_per_tok=3, n_group=4,
                        topk_group=2, n_shared_experts=1, norm_topk_prob=True, routed_scaling_factor=2.5,
                        rope_interleave=True, rope_parameters=YARN),
    "deepseek_v3_neox": dict(COMMON, model_type="deepseek_v3", q_lora_rank=None, num_experts_per_tok=2, n_group=2,
                             topk_group=1, n_shared_experts=2, norm_topk_prob=True, routed_scaling_factor=1.8,
                             rope_interleave=False),
    "deepseek_v2": dict(COMMON, model_type="deepseek_v2", q_lora_rank=None, num_experts_per_tok=2,
                        topk_method="group_limited_greedy", n_group=4, topk_group=2, n_shared_experts=2,
                        routed_scaling_factor=1.5),
    "deepseek_v2_lite": dict(COMMON, model_type="deepseek_v2", q_lora_rank=24, num_experts_per_tok=3,
                             topk_method="greedy", n_shared_experts=1, routed_scaling_factor=1.0,
                             rope_parameters=dict(YARN, mscale=0.707, mscale_all_dim=0.707)),
}


def gap_after(values, k):
    """Per row: the k-th largest minus the (k+1)-th (inf when there is no (k+1)-th)."""
    if values.shape[-1] <= k:
        return torch.full(values.shape[:-1], float("inf"))
    top = torch.topk(values, k + 1, dim=-1).values
    return top[..., k - 1] - top[..., k]


def routing_gap(model, prompt_ids):
    """The smallest gap of a group or expert choice over the passes' tokens (see the docstring)."""
    cfg = model.config
    k, E = cfg.num_experts_per_tok, cfg.n_routed_experts
    v3 = cfg.model_type == "deepseek_v3"
    grouped = v3 or getattr(cfg, "topk_method", "greedy") == "group_limited_greedy"
    gaps = []

    def hook(mod, args, _out):
        x = args[0].reshape(-1, args[0].shape[-1]).float()
        logits = x @ mod.weight.float().T
        scores = logits.sigmoid() + mod.e_score_correction_bias if v3 else logits.softmax(-1)
        if grouped:
            g = scores.view(-1, cfg.n_group, E // cfg.n_group)
            gs = g.topk(2, dim=-1).values.sum(-1) if v3 else g.max(-1).values
            gaps.append(float(gap_after(gs, cfg.topk_group).min()))
            keep = torch.zeros_like(gs).scatter_(1, torch.topk(gs, cfg.topk_group, dim=-1).indices, 1)
            keep = keep.unsqueeze(-1).expand(-1, cfg.n_group, E // cfg.n_group).reshape(-1, E).bool()
            scores = scores.masked_fill(~keep, float("-inf") if v3 else 0.0)
        gaps.append(float(gap_after(scores, k).min()))

    hooks = [m.register_forward_hook(hook) for n, m in model.named_modules() if n.endswith("mlp.gate")]
    with torch.no_grad():
        model(torch.tensor([prompt_ids]))
    for h in hooks:
        h.remove()
    assert gaps, "no router found"
    return min(gaps)


def make(name, kw, attempt):
    model = fam.make_model(name, kw, attempt)
    g = torch.Generator().manual_seed(fam.SEED + 31 * attempt + len(name))
    with torch.no_grad():
        for mname, m in model.named_modules():
            if hasattr(m, "e_score_correction_bias"):  # a zero buffer after init: make it matter
                m.e_score_correction_bias.copy_(0.2 * torch.randn(m.e_score_correction_bias.shape, generator=g))
    return model


def main():
    goldens = {}
    for name, kw in FAMILIES.items():
        for attempt in range(80):
            model = make(name, kw, attempt)
            ref = fam.reference(name, model, model.config.vocab_size)
            gap = routing_gap(model, ref["prompt"] + ref["ids"])
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
        print(name, ref["ids"][:8], "margin", ref["min_greedy_margin"], "routing gap", gap, "attempt", attempt)
    with open(OUT / "deepseek.json", "w") as f:
        json.dump(goldens, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
