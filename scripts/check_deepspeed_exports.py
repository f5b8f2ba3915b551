#!/usr/bin/env python3
"""Checks `nunchaku plan --format deepspeed -o DIR` with DeepSpeed's own code, for
tests/test_multinode.cpp.

For each case below (a sparse Llama-2-70B-shaped checkpoint from
testdata/models/llama2-70b-config, full training), runs build/nunchaku and reads the three files:
  ds_config.json       deepspeed.DeepSpeedConfig(config, mpu) with the data-parallel world size
                       of the plan (nodes x GPUs; a one-process gloo group stands in for the job)
  hostfile             deepspeed.launcher.runner._parse_hostfile: one entry per node, slots = GPUs
  deepspeed_launch.sh  each `deepspeed ...` line through deepspeed.launcher.runner.parse_args
Writes testdata/golden/deepspeed_exports_check.json: the files as checked and what DeepSpeed
read from them. The C++ test re-runs the cases and requires the same files.

Usage: /work/venv-torch/bin/python scripts/check_deepspeed_exports.py [build/nunchaku]
"""
import json
import os
import shlex
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "golden" / "deepspeed_exports_check.json"
CASES = [
    ["--nodes", "2", "--gpus", "8", "--vram", "80G", "--grad-checkpointing", "--context", "2048"],
    ["--nodes", "1", "--gpus", "8", "--vram", "80G", "--grad-checkpointing", "--context", "2048"],
    ["--nodes", "4", "--gpus", "8", "--vram", "40G", "--grad-checkpointing", "--context", "2048", "--batch", "2"],
    ["--nodes", "2", "--gpus", "4", "--vram", "24G", "--grad-checkpointing", "--context", "1024", "--dtype", "bf16"],
]


def sparse_llama(d, cfg):
    h, i, v, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    kv = h // cfg["num_attention_heads"] * cfg["num_key_value_heads"]
    ts = [("model.embed_tokens.weight", [v, h])]
    for l in range(L):
        p = f"model.layers.{l}."
        ts += [(p + "self_attn.q_proj.weight", [h, h]), (p + "self_attn.k_proj.weight", [kv, h]),
               (p + "self_attn.v_proj.weight", [kv, h]), (p + "self_attn.o_proj.weight", [h, h]),
               (p + "mlp.gate_proj.weight", [i, h]), (p + "mlp.up_proj.weight", [i, h]),
               (p + "mlp.down_proj.weight", [h, i]), (p + "input_layernorm.weight", [h]),
               (p + "post_attention_layernorm.weight", [h])]
    ts += [("model.norm.weight", [h]), ("lm_head.weight", [v, h])]
    hdr, off = {}, 0
    for n, s in ts:
        b = 2
        for x in s:
            b *= x
        hdr[n] = {"dtype": "F16", "shape": s, "data_offsets": [off, off + b]}
        off += b
    t = json.dumps(hdr).encode()
    t += b" " * (-len(t) % 8)
    (Path(d) / "config.json").write_text(json.dumps(cfg))
    with open(Path(d) / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(t)) + t)
        f.truncate(8 + len(t) + off)


class DataParallel:
    def __init__(self, n):
        self.n = n

    def get_data_parallel_world_size(self):
        return self.n


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "build" / "nunchaku")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29511", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    import deepspeed
    from deepspeed.launcher.runner import _parse_hostfile, parse_args
    deepspeed.init_distributed(dist_backend="gloo")
    cfg = json.loads((ROOT / "testdata" / "models" / "llama2-70b-config" / "config.json").read_text())
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        model.mkdir()
        sparse_llama(model, cfg)
        for k, extra in enumerate(CASES):
            out = Path(tmp) / f"out{k}"
            args = ["plan", "MODEL", "--mode", "train", "--format", "deepspeed", "-o", "OUT/"] + extra
            run = subprocess.run([binary] + [str(model) if a == "MODEL" else str(out) + "/" if a == "OUT/" else a for a in args],
                                 capture_output=True, text=True)
            files = {n: (out / n).read_text() for n in ("ds_config.json", "hostfile", "deepspeed_launch.sh")}
            nodes, gpus = int(extra[extra.index("--nodes") + 1]), int(extra[extra.index("--gpus") + 1])
            ds = deepspeed.DeepSpeedConfig(json.loads(files["ds_config.json"]), mpu=DataParallel(nodes * gpus))
            pool = _parse_hostfile(files["hostfile"].splitlines())
            launches = []
            for line in files["deepspeed_launch.sh"].splitlines():
                if not line.startswith("deepspeed "):
                    continue
                words = shlex.split(line.replace("$MASTER_ADDR", "10.0.0.1").replace("$NODE_RANK", "1"))
                a = parse_args(words[1:])
                launches.append({"num_nodes": a.num_nodes, "num_gpus": a.num_gpus, "no_ssh": a.no_ssh, "node_rank": a.node_rank,
                                 "master_addr": a.master_addr, "master_port": a.master_port, "hostfile": a.hostfile,
                                 "user_script": a.user_script, "user_args": a.user_args})
            zero = ds.zero_config
            results.append({"args": args, "exit_code": run.returncode, "files": files, "deepspeed_read": {
                "world_size": ds.world_size, "train_batch_size": ds.train_batch_size,
                "train_micro_batch_size_per_gpu": ds.train_micro_batch_size_per_gpu,
                "gradient_accumulation_steps": ds.gradient_accumulation_steps, "zero_stage": int(zero.stage),
                "offload_optimizer": str(getattr(zero.offload_optimizer.device, "value", zero.offload_optimizer.device)) if zero.offload_optimizer else None,
                "offload_param": str(getattr(zero.offload_param.device, "value", zero.offload_param.device)) if zero.offload_param else None,
                "fp16": bool(ds.float16_config.enabled), "bf16": bool(ds.bfloat16_config.enabled),
                "hostfile": dict(pool), "launches": launches}})
            print(f"case {k}: exit {run.returncode}, ZeRO-{int(zero.stage)}, world {ds.world_size}, hosts {dict(pool)}", file=sys.stderr)
    doc = {"deepspeed_version": deepspeed.__version__, "cases": results}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print("wrote", OUT, file=sys.stderr)


if __name__ == "__main__":
    main()
