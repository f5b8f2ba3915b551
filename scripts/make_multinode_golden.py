#!/usr/bin/env python3
"""DeepSpeed's own model-state estimators over several nodes, for tests/test_multinode.cpp.

Writes testdata/golden/multinode_deepspeed.json: for each model (its config.json under
testdata/), the parameter counts of the model transformers builds from that config (on the
meta device) and, for nodes {1, 2, 4} x GPUs per node {4, 8} x offload, what
deepspeed.runtime.zero.stage_1_and_2.estimate_zero2_model_states_mem_needs and
deepspeed.runtime.zero.stage3.estimate_zero3_model_states_mem_needs return (cpu_mem is per
node, gpu_mem per GPU; zero_init and additional_buffer_factor at their defaults).

total_params is counted once per parameter object, the rule of DeepSpeed's model_to_params
(which keys by data_ptr(), all 0 on the meta device, so we key by id()); largest_layer_params
is stage3.model_to_params's own (it needs no data).

Usage: /work/venv-torch/bin/python scripts/make_multinode_golden.py
"""
import json
import sys
from pathlib import Path

import deepspeed
import torch
import transformers
from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs, model_to_params
from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "golden" / "multinode_deepspeed.json"
MODELS = ["arch/llama2-7b", "arch/llama3-8b", "arch/qwen2-7b", "models/llama2-70b-config"]


def params_of(fixture):
    cfg = transformers.AutoConfig.for_model(**json.loads((ROOT / "testdata" / fixture / "config.json").read_text()))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    total = sum({id(p): p.numel() for p in model.parameters()}.values())
    _, largest = model_to_params(model)
    return total, largest


def cases(P, L):
    out = []
    for nodes in (1, 2, 4):
        for gpus in (4, 8):
            def add(stage, offload, cpu, gpu):
                out.append({"stage": stage, "nodes": nodes, "gpus_per_node": gpus, "offload": offload,
                            "gpu": int(gpu), "cpu": int(cpu)})
            for off in (False, True):
                cpu, gpu = estimate_zero2_model_states_mem_needs(P, gpus, nodes, cpu_offload=off)
                add(2, "optimizer" if off else "none", cpu, gpu)
            for off, offp in ((False, False), (True, False), (True, True)):
                cpu, gpu, _ = estimate_zero3_model_states_mem_needs(P, L, gpus, nodes, cpu_offload=off, cpu_offload_params=offp)
                add(3, "params" if offp else "optimizer" if off else "none", cpu, gpu)
    return out


def main():
    models = []
    for fixture in MODELS:
        P, L = params_of(fixture)
        models.append({"fixture": fixture, "total_params": P, "largest_layer_params": L, "cases": cases(P, L)})
        print(f"{fixture}: {P} params, largest layer {L}", file=sys.stderr)
    doc = {"deepspeed_version": deepspeed.__version__, "transformers_version": transformers.__version__,
           "torch_version": torch.__version__, "models": models}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print("wrote", OUT, file=sys.stderr)


if __name__ == "__main__":
    main()
