#!/usr/bin/env python3
"""Golden numbers for `nunchaku estimate`, produced by the real packages.

Writes testdata/golden/estimate_*.json, read by tests/test_estimate.cpp:
  estimate_accelerate.json  accelerate's `accelerate estimate-memory` code path
                            (accelerate.commands.estimate.gather_data) on the fixture configs
  estimate_deepspeed.json   DeepSpeed's estimate_zero2/zero3_model_states_mem_needs
  estimate_torch_train.json peak RSS of a real AdamW training step of a tiny
                            Llama-shaped model on CPU (torch), with its tensor list

transformers >= 5 refuses torch < 2.6, so create_empty_model cannot build the model here;
we build the same module tree (LlamaForCausalLM's names, shapes, non-persistent rotary
buffers and _no_split_modules) with torch.nn under accelerate's init_empty_weights and hand
it to accelerate's own gather_data. Usage: python3 scripts/make_golden_estimate.py
"""
import argparse
import gc
import json
import os
import sys
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "testdata" / "golden"


class Attn(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, a, kv = c["hidden_size"], c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
        d = c.get("head_dim", h // a)
        self.a, self.kv, self.d = a, kv, d
        self.q_proj = nn.Linear(h, a * d, bias=False)
        self.k_proj = nn.Linear(h, kv * d, bias=False)
        self.v_proj = nn.Linear(h, kv * d, bias=False)
        self.o_proj = nn.Linear(a * d, h, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.a, self.d).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv, self.d).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv, self.d).transpose(1, 2)
        rep = self.a // self.kv
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        # eager attention, as transformers' eager path: fp32 softmax over materialized scores
        scores = (q @ k.transpose(-1, -2)) / self.d ** 0.5
        mask = torch.full((s, s), float("-inf")).triu(1)
        p = torch.softmax(scores + mask, dim=-1, dtype=torch.float32).to(q.dtype)
        return self.o_proj((p @ v).transpose(1, 2).reshape(b, s, self.a * self.d))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, i = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class RMSNorm(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = Attn(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c["hidden_size"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"])

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Rotary(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c.get("head_dim", c["hidden_size"] // c["num_attention_heads"])
        inv = 1.0 / (c.get("rope_theta", 10000.0) ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        self.register_buffer("inv_freq", inv, persistent=False)
        self.register_buffer("original_inv_freq", inv.clone(), persistent=False)


class Body(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"])
        self.rotary_emb = Rotary(c)


class LlamaForCausalLM(nn.Module):
    _no_split_modules = ["DecoderLayer"]

    def __init__(self, c):
        super().__init__()
        self.model = Body(c)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)

    def forward(self, ids):
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x)
        return self.lm_head(self.model.norm(x))


def accelerate_golden():
    import accelerate
    import accelerate.commands.estimate as est
    from accelerate import init_empty_weights

    out = {"accelerate_version": accelerate.__version__, "models": {}}
    for name in ("llama2-7b-config", "llama3-8b-config"):
        cfg = json.loads((ROOT / "testdata" / "models" / name / "config.json").read_text())
        with init_empty_weights():
            model = LlamaForCausalLM(cfg)
        est.create_empty_model = lambda *a, **k: model  # the only step transformers would do
        args = argparse.Namespace(model_name=name, library_name="transformers", trust_remote_code=False,
                                  dtypes=["float32", "float16", "int8", "int4"])
        rows = est.gather_data(args)
        total, largest = est.calculate_maximum_sizes(model)
        params = sum(p.numel() for p in model.parameters())
        out["models"][name] = {
            "parameters": params,
            "total_size_fp32": int(total),
            "largest_layer_fp32": int(largest[0]),
            "rows": [{"dtype": r[0], "largest_layer": r[1], "total_size": r[2], "training": r[3],
                      "training_adam_max": max(r[3].values())} for r in rows],
        }
    return out


def deepspeed_golden():
    import deepspeed
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

    # Llama-2-7B: all parameters, and the largest leaf module (embed_tokens / lm_head) as
    # estimate_zero3_model_states_mem_needs_all_live computes it from a model.
    P, L = 6738415616, 32000 * 4096
    cases = []
    for gpus in (1, 4, 8):
        for off in (False, True):
            cpu, gpu = estimate_zero2_model_states_mem_needs(P, gpus, 1, cpu_offload=off)
            cases.append({"stage": 2, "gpus": gpus, "offload": "optimizer" if off else "none", "gpu": gpu, "cpu": cpu})
        for off, offp in ((False, False), (True, False), (True, True)):
            cpu, gpu, _ = estimate_zero3_model_states_mem_needs(P, L, gpus, 1, cpu_offload=off, cpu_offload_params=offp)
            cases.append({"stage": 3, "gpus": gpus, "offload": "params" if offp else "optimizer" if off else "none",
                          "gpu": gpu, "cpu": int(cpu)})
    return {"deepspeed_version": deepspeed.__version__, "total_params": P, "largest_layer_params": L, "cases": cases}


def rss_kib(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


def torch_train_golden():
    """Peak RSS growth over one fp32 AdamW step (forward, backward, step) of a tiny model."""
    cfg = {"hidden_size": 512, "intermediate_size": 1536, "num_attention_heads": 8, "num_key_value_heads": 8,
           "num_hidden_layers": 8, "vocab_size": 8000, "max_position_embeddings": 1024}
    batch, seq = 4, 256
    torch.manual_seed(0)
    torch.set_num_threads(1)
    ids = torch.randint(0, cfg["vocab_size"], (batch, seq + 1))
    gc.collect()
    # VmHWM can only be reset by writing /proc/self/clear_refs (Linux >= 4.0).
    Path("/proc/self/clear_refs").write_text("5")
    base = rss_kib("VmRSS")
    model = LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    logits = model(ids[:, :-1])
    loss = nn.functional.cross_entropy(logits.float().reshape(-1, cfg["vocab_size"]), ids[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    peak = rss_kib("VmHWM")
    tensors = [{"name": n, "shape": list(p.shape)} for n, p in model.named_parameters()]
    return {"torch_version": torch.__version__, "config": cfg, "batch": batch, "seq": seq, "dtype": "F32",
            "optimizer": "adamw", "parameters": sum(p.numel() for p in model.parameters()),
            "baseline_rss_bytes": base * 1024, "peak_rss_growth_bytes": (peak - base) * 1024, "tensors": tensors}


def main():
    GOLDEN.mkdir(parents=True, exist_ok=True)
    jobs = {"estimate_accelerate.json": accelerate_golden, "estimate_deepspeed.json": deepspeed_golden,
            "estimate_torch_train.json": torch_train_golden}
    for fname, fn in jobs.items():
        data = fn()
        (GOLDEN / fname).write_text(json.dumps(data, indent=1) + "\n")
        print("wrote", GOLDEN / fname, file=sys.stderr)


if __name__ == "__main__":
    main()
