#!/usr/bin/env python3
"""Golden device maps from accelerate's own infer_auto_device_map, for `plan --compat accelerate`.

For each fixture model under testdata/models the model is built from its config.json on the
meta device (init_empty_weights, in the stored dtype), then accelerate maps it under several
max_memory settings sized from the model's own byte count so that the maps split across
GPUs, the CPU and the disk. Also accelerate's documented test case (linear1 / batchnorm /
linear2 with max_memory {0: 200, 1: 200}) with real torch modules.

Run with a Python that has torch, transformers (4.57 here: 5.x needs torch >= 2.6) and
accelerate:   /tmp/fxenv/bin/python scripts/make_golden_plan.py
Writes testdata/golden/plan_accelerate.json.
"""
import json
import os
from collections import OrderedDict

import accelerate
import torch
import transformers
from accelerate import init_empty_weights
from accelerate.utils import compute_module_sizes, infer_auto_device_map
from transformers import AutoConfig, AutoModelForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MODELS = ["models/llama", "models/qwen2", "models/mistral", "models/mixtral", "models/gemma", "models/gemma2",
          "models/phi3", "models/qwen3", "models/llama-sharded", "plan/llama-deep", "plan/qwen2-deep-tied"]
# Deeper models written here (random weights, 12 layers) so the maps split between layers.
DEEP = {
    "plan/llama-deep": transformers.LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=12,
                                                num_attention_heads=4, num_key_value_heads=2, vocab_size=64,
                                                max_position_embeddings=128, tie_word_embeddings=False),
    "plan/qwen2-deep-tied": transformers.Qwen2Config(hidden_size=16, intermediate_size=32, num_hidden_layers=12,
                                                     num_attention_heads=4, num_key_value_heads=2, vocab_size=96,
                                                     max_position_embeddings=128, tie_word_embeddings=True),
}
# (label, {device: fraction of the model's bytes})
CASES = [
    ("one_gpu_roomy", {0: 2.0, "cpu": 2.0}),
    ("gpu_then_cpu", {0: 0.5, "cpu": 2.0}),
    ("two_gpus", {0: 0.45, 1: 0.7, "cpu": 1.0}),
    ("spill_to_disk", {0: 0.3, 1: 0.3, "cpu": 0.2}),
    ("tiny_gpu", {0: 0.05, "cpu": 0.5}),
    ("three_gpus", {0: 0.2, 1: 0.25, 2: 0.3, "cpu": 0.3}),
    ("thin_gpus_cpu_disk", {0: 0.15, 1: 0.15, "cpu": 0.25}),
    ("uneven", {0: 0.6, 1: 0.1, "cpu": 0.12}),
]


def dev(v):
    return v if isinstance(v, int) else str(v)


def main():
    out = {"accelerate": accelerate.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
           "models": {}}
    torch.manual_seed(0)
    for name, cfg in DEEP.items():
        model = AutoModelForCausalLM.from_config(cfg)
        model.save_pretrained(os.path.join(ROOT, "testdata", name), safe_serialization=True)
    for name in MODELS:
        path = os.path.join(ROOT, "testdata", name)
        cfg = AutoConfig.from_pretrained(path)
        dtype = getattr(cfg, "torch_dtype", None) or torch.float32
        with init_empty_weights():
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype)
        model.tie_weights()
        total = compute_module_sizes(model)[""]
        cases = []
        for label, frac in CASES:
            mm = {k: int(total * f) for k, f in frac.items()}
            dm = infer_auto_device_map(model, max_memory=mm, no_split_module_classes=model._no_split_modules)
            cases.append({"label": label, "max_memory": {str(k): v for k, v in mm.items()},
                          "device_map": {k: dev(v) for k, v in dm.items()}})
        out["models"][name] = {"total_bytes": total, "no_split": sorted(model._no_split_modules), "cases": cases}

    # accelerate's own test case (tests/test_modeling_utils.py): sizes 64, 72, 100 bytes.
    model = torch.nn.Sequential(OrderedDict([("linear1", torch.nn.Linear(3, 4)), ("batchnorm", torch.nn.BatchNorm1d(4)),
                                             ("linear2", torch.nn.Linear(4, 5))]))
    sizes = compute_module_sizes(model)
    dm = infer_auto_device_map(model, max_memory={0: 200, 1: 200})
    out["modules_case"] = {"sizes": {k: sizes[k] for k in ["linear1", "batchnorm", "linear2"]},
                           "max_memory": {"0": 200, "1": 200}, "device_map": {k: dev(v) for k, v in dm.items()}}
    dst = os.path.join(ROOT, "testdata", "golden", "plan_accelerate.json")
    with open(dst, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    print("wrote", dst)


if __name__ == "__main__":
    main()
