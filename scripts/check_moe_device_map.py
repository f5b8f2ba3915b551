#!/usr/bin/env python3
"""Checks that transformers takes nunchaku's MoE device_map (a layer on one device, its
`mlp.experts` module on another) as is: tiny random Qwen3-MoE and Mixtral models saved by
transformers, planned by `nunchaku plan --format accelerate`, then loaded with
from_pretrained(device_map=...).
No GPU here: the map's GPU entries are loaded on the CPU and its CPU entries offloaded to disk,
which exercises the same key precedence. Usage: scripts/check_moe_device_map.py BUILD/nunchaku"""
import json, subprocess, sys, tempfile

import torch
from transformers import AutoModelForCausalLM, MixtralConfig, Qwen3MoeConfig

nunchaku = sys.argv[1] if len(sys.argv) > 1 else "build/nunchaku"
CONFIGS = {
    "qwen3_moe": Qwen3MoeConfig(vocab_size=512, hidden_size=64, intermediate_size=128, moe_intermediate_size=256,
                                num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                num_experts=16, num_experts_per_tok=2, max_position_embeddings=256, tie_word_embeddings=False),
    "mixtral": MixtralConfig(vocab_size=512, hidden_size=64, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
                             num_key_value_heads=2, num_local_experts=16, num_experts_per_tok=2, max_position_embeddings=256,
                             tie_word_embeddings=False),
}


def check(family, cfg):
    with tempfile.TemporaryDirectory() as d:
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(cfg).save_pretrained(d)
        # A budget that holds every layer but only some layers' experts.
        out = subprocess.run([nunchaku, "plan", d, "--vram", "3000K", "--cpu-ram", "1G", "--context", "64", "--format",
                              "accelerate", "--overhead", "cuda_context=0", "--overhead", "cublas_workspace=0"],
                             capture_output=True, text=True)
        print(out.stderr, file=sys.stderr)
        dm = json.loads(out.stdout)
        apart = [k for k in dm if k.endswith(".mlp.experts")]
        assert apart, f"no experts apart in {dm}"
        local = {k: ("cpu" if v == 0 else "disk" if v == "cpu" else v) for k, v in dm.items()}
        m = AutoModelForCausalLM.from_pretrained(d, device_map=local, offload_folder=d + "/offload")
        for i, layer in enumerate(m.model.layers):
            name = f"model.layers.{i}.mlp.experts"
            exp_dev = {p.device.type for p in layer.mlp.experts.parameters()}
            att_dev = {p.device.type for p in layer.self_attn.parameters()}
            want = "meta" if name in apart else "cpu"  # offloaded parameters stay on meta until used
            assert exp_dev == {want}, (name, exp_dev, want)
            assert att_dev == {"cpu"}, (i, att_dev)
        ids = torch.tensor([[1, 2, 3]])
        m.generate(ids, max_new_tokens=4, do_sample=False)
        print(f"ok {family}: {len(apart)} of {len(m.model.layers)} layers' experts apart, attention with the layer; generate runs")


for family, cfg in CONFIGS.items():
    check(family, cfg)
