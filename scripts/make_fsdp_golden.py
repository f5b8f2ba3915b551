#!/usr/bin/env python3
"""What PyTorch FSDP2 itself puts on a rank, for tests/test_fsdp.cpp.

Writes testdata/golden/fsdp_shards.json. For each model (a config.json under testdata/, or
the small odd-sized Llama below whose dimensions no world size divides), transformers builds
the model on the meta device in bf16; then, as accelerate 1.16's fsdp2_prepare_model does
under mixed_precision bf16, every trainable parameter is upcast to fp32 and fully_shard is
applied to each decoder layer (the classes in model._no_split_modules), the input embedding
(when not tied), [final norm, lm_head] (reshard_after_forward=False; tied: with the
embedding) and the root, with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16).

The process group is torch's fake backend (torch.testing._internal.distributed.fake_pg:
FakeStore + init_process_group("fake", rank=r, world_size=W)): one process is rank r of W,
no collective runs, and fully_shard shards exactly as on W GPUs. Full shard uses a 1-D mesh
of W = nodes x GPUs; hybrid shard a (nodes, GPUs) mesh ("dp_replicate", "dp_shard"), as
accelerate's ParallelismConfig builds it for parallelism_config_dp_replicate_size = nodes
(one node: a 1-D mesh of its GPUs).

Recorded per case, for rank 0 and the last rank of the shard group, read from torch's own
objects (never from nunchaku's formula):
  param_bytes            the local tensors of the sharded DTensor parameters (numel x
                         element_size: the fp32 shards)
  param_storage_bytes    FSDPParam._sharded_param_data: the padded storage behind them
  grad_bytes             the sharded gradients FSDP makes: views of the reduce-scatter output
                         cast to the parameter's dtype (_cast_and_view_sharded_grads), i.e. the
                         padded shard size x the parameter's element size
  adamw_state_bytes      torch.optim.AdamW's own _init_group on the sharded parameters
                         (exp_avg + exp_avg_sq: zeros_like of the DTensor, the local shape)
and per FSDP unit (parameter group): its parameters unsharded and the all-gather output's
padded size.

Usage: /work/venv-torch/bin/python scripts/make_fsdp_golden.py
"""
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import transformers
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.fsdp._fully_shard._fsdp_state import _get_module_fsdp_state
from torch.testing._internal.distributed.fake_pg import FakeStore

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "golden" / "fsdp_shards.json"
MODELS = ["arch/llama2-7b", "arch/llama3-8b", "arch/qwen2-7b", "arch/gemma3-1b", "models/llama2-70b-config"]
# Dimensions no world size of the matrix divides: dim 0 is padded on every tensor.
ODD = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 100, "intermediate_size": 300,
       "num_attention_heads": 5, "num_key_value_heads": 1, "num_hidden_layers": 3, "vocab_size": 1001,
       "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16", "tie_word_embeddings": False}
NODES, GPUS = (1, 2, 4), (4, 8)


def build(cfg):
    config = transformers.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    for p in model.parameters():  # accelerate: upcast trainable parameters under mixed precision
        if p.requires_grad and p.dtype != torch.float32:
            p.data = p.data.to(torch.float32)
    return model


def shard(model, mesh):
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    kw = {"mesh": mesh, "mp_policy": mp, "reshard_after_forward": True}
    layer_classes = set(model._no_split_modules or [])
    units = []
    for name, module in model.named_modules():
        if type(module).__name__ in layer_classes:
            fully_shard(module, **kw)
            units.append((name, module))
    embed, head = model.get_input_embeddings(), model.get_output_embeddings()
    tied = head is not None and embed.weight is head.weight
    if not tied:
        fully_shard(embed, **kw)
        units.append(("embedding", embed))
    norm = model.model.norm
    tail = [norm, embed, head] if tied else [norm, head]
    fully_shard(tail, **{**kw, "reshard_after_forward": False})
    units.append(("norm + head" if not tied else "norm + tied embedding/head", norm))
    fully_shard(model, mesh=mesh, mp_policy=mp)
    units.append(("root", model))
    return units, tied


def unit_info(name, module):
    state = _get_module_fsdp_state(module)
    group = state._fsdp_param_group if state is not None else None
    if group is None:
        return {"name": name, "num_parameters": 0, "all_gather_numel": 0}
    n = sum(fp._orig_size.numel() for fp in group.fsdp_params)
    ws = group.mesh_info.shard_mesh_size
    padded = sum(fp.padded_sharded_param_size.numel() for fp in group.fsdp_params) * ws
    return {"name": name, "num_parameters": n, "all_gather_numel": padded}


def rank_view(cfg, nodes, gpus, strategy, rank):
    world = nodes * gpus
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        if strategy == "hybrid" and nodes > 1:
            mesh = init_device_mesh("cpu", (nodes, gpus), mesh_dim_names=("dp_replicate", "dp_shard"))
        elif strategy == "hybrid":
            mesh = init_device_mesh("cpu", (gpus,), mesh_dim_names=("dp_shard",))
        else:
            mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp_shard",))
        model = build(cfg)
        units, tied = shard(model, mesh)
        params = storage = grads = 0
        seen = set()
        for module in model.modules():
            state = _get_module_fsdp_state(module)
            group = state._fsdp_param_group if state is not None else None
            if group is None or id(group) in seen:
                continue
            seen.add(id(group))
            for fp in group.fsdp_params:
                local = fp.sharded_param._local_tensor
                params += local.numel() * local.element_size()
                storage += fp._sharded_param_data.numel() * fp._sharded_param_data.element_size()
                grads += fp.padded_sharded_param_size.numel() * fp.sharded_param.dtype.itemsize
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
        group = opt.param_groups[0]
        for p in group["params"]:
            p.grad = torch.zeros_like(p)
        opt._init_group(group, [], [], [], [], [], [])  # torch/optim/adam.py: the states AdamW makes
        adamw = 0
        for st in opt.state.values():
            for key in ("exp_avg", "exp_avg_sq"):
                t = st[key]._local_tensor
                adamw += t.numel() * t.element_size()
        n_params = sum({id(p): p.numel() for p in model.parameters()}.values())
        return {"param_bytes": params, "param_storage_bytes": storage, "grad_bytes": grads, "adamw_state_bytes": adamw,
                "units": [unit_info(n, m) for n, m in units], "tied": tied, "num_parameters": n_params,
                "shard_ranks": mesh.size(-1) if mesh.ndim > 1 else mesh.size()}
    finally:
        dist.destroy_process_group()


def main():
    models = []
    for fixture in MODELS + ["odd"]:
        cfg = ODD if fixture == "odd" else json.loads((ROOT / "testdata" / fixture / "config.json").read_text())
        cases = []
        first = None
        for nodes in NODES:
            for gpus in GPUS:
                for strategy in ("full", "hybrid"):
                    r0 = rank_view(cfg, nodes, gpus, strategy, 0)
                    S = r0["shard_ranks"]
                    last = rank_view(cfg, nodes, gpus, strategy, S - 1)
                    first = first or r0
                    cases.append({"nodes": nodes, "gpus_per_node": gpus, "strategy": strategy, "shard_ranks": S,
                                  "rank0": {k: r0[k] for k in ("param_bytes", "param_storage_bytes", "grad_bytes", "adamw_state_bytes")},
                                  "last_rank": {k: last[k] for k in ("param_bytes", "param_storage_bytes", "grad_bytes", "adamw_state_bytes")},
                                  "units": r0["units"]})
                    print(f"{fixture} {nodes}x{gpus} {strategy}: S={S} rank0 params {r0['param_bytes']} "
                          f"last {last['param_bytes']}", file=sys.stderr)
        entry = {"fixture": fixture, "num_parameters": first["num_parameters"], "tied": first["tied"], "cases": cases}
        if fixture == "odd":
            entry["config"] = ODD
        models.append(entry)
    doc = {"torch_version": torch.__version__, "transformers_version": transformers.__version__,
           "process_group": "fake (torch.testing._internal.distributed.fake_pg.FakeStore)",
           "wrapping": "accelerate 1.16 fsdp2_prepare_model: decoder layers, embedding, [norm, lm_head], root",
           "dtype": "bf16 checkpoint, trainable parameters upcast to fp32 (mixed_precision bf16)", "models": models}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print("wrote", OUT, file=sys.stderr)


if __name__ == "__main__":
    main()
