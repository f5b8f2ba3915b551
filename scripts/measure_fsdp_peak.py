#!/usr/bin/env python3
"""FSDP2's own memory accounting of its all-gathered units, for tests/test_fsdp.cpp.

Writes testdata/golden/fsdp_peaks.json. Small random Llamas (real tensors, on the CPU) are
wrapped as scripts/make_fsdp_golden.py wraps them (accelerate 1.16's fsdp2_prepare_model under
mixed_precision bf16) under torch's fake process group (rank 0 of W: the collectives send
nothing, but every buffer FSDP allocates for them is allocated), and two AdamW training steps
run inside torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker, torch's own tracker that
files every live tensor under FSDP's categories (sharded/unsharded params and grads,
all-gather and reduce-scatter buffers, activations, temporaries, optimizer states).

Recorded per case: the tracker's snapshot at the step's peak, and the largest sum of the
categories that only exist because FSDP gathers units (Unsharded Param + Unsharded Grad +
All Gather + Reduce Scatter) over every snapshot it took (each module's pre/post/peak
forward and backward, second step), with the moment it was taken: what
estimate's fsdp_unsharded line models.

Usage: /work/venv-torch/bin/python scripts/measure_fsdp_peak.py
"""
import json
import sys
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import transformers
from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
from torch.distributed.device_mesh import init_device_mesh
from torch.testing._internal.distributed.fake_pg import FakeStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_fsdp_golden import shard  # noqa: E402  (the same wrapping)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "golden" / "fsdp_peaks.json"
BASE = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 704,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4, "vocab_size": 1024,
        "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16", "tie_word_embeddings": False}
CASES = [
    {"name": "layers dominate", "config": {}, "nodes": 1, "gpus": 4, "strategy": "full"},
    {"name": "layers dominate, 2 x 4 hybrid", "config": {}, "nodes": 2, "gpus": 4, "strategy": "hybrid"},
    {"name": "large vocab: the tail at backward's start", "config": {"vocab_size": 16384}, "nodes": 1, "gpus": 8, "strategy": "full"},
    {"name": "tied embeddings", "config": {"tie_word_embeddings": True, "vocab_size": 4096}, "nodes": 2, "gpus": 4, "strategy": "full"},
]
FSDP_KEYS = ("Unsharded Param", "Unsharded Grad", "All Gather", "Reduce Scatter")
SEQ = 16


def run(case):
    cfg = {**BASE, **case["config"]}
    nodes, gpus = case["nodes"], case["gpus"]
    world = nodes * gpus
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**cfg), dtype=torch.bfloat16)
        for p in model.parameters():
            p.data = p.data.to(torch.float32)
        if case["strategy"] == "hybrid" and nodes > 1:
            mesh = init_device_mesh("cpu", (nodes, gpus), mesh_dim_names=("dp_replicate", "dp_shard"))
        else:
            mesh = init_device_mesh("cpu", (world if case["strategy"] == "full" else gpus,))
        shard(model, mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        inp = torch.randint(0, cfg["vocab_size"], (1, SEQ))
        tracker = FSDPMemTracker(model, opt)
        tracker.track_inputs((inp,))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with tracker:
                for step in range(2):
                    opt.zero_grad()
                    model(input_ids=inp, labels=inp).loss.backward()
                    opt.step()
                    if step == 0:
                        tracker.reset_mod_stats()
        best, where = 0, ""
        for mod, stats in tracker.memory_tracking.items():
            for state, snaps in stats.snapshots.items():
                for snap in snaps:
                    for dev, cats in snap.items():
                        s = sum(cats.get(k, 0) for k in FSDP_KEYS)
                        if s > best:
                            best, where = s, f"{getattr(stats, 'mod_fqn', type(mod).__name__)} {state}"
        peak = {str(k): v for k, v in tracker.get_tracker_snapshot("peak")[torch.device("cpu")].items()}
        return {"name": case["name"], "config": cfg, "nodes": nodes, "gpus_per_node": gpus, "strategy": case["strategy"],
                "batch": 1, "context": SEQ, "fsdp_transient_max_bytes": best, "fsdp_transient_max_at": where, "peak_snapshot": peak}
    finally:
        dist.destroy_process_group()


def main():
    cases = []
    for c in CASES:
        r = run(c)
        print(f"{c['name']}: FSDP transients {r['fsdp_transient_max_bytes']} B at {r['fsdp_transient_max_at']}", file=sys.stderr)
        cases.append(r)
    doc = {"torch_version": torch.__version__, "transformers_version": transformers.__version__,
           "tracker": "torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker", "categories": list(FSDP_KEYS), "cases": cases}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print("wrote", OUT, file=sys.stderr)


if __name__ == "__main__":
    main()
