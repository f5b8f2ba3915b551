#!/usr/bin/env python3
"""Checks `nunchaku plan --format fsdp -o DIR` with accelerate's own code, for tests/test_fsdp.cpp.

For each case below (a sparse Llama-2-70B-shaped checkpoint from
testdata/models/llama2-70b-config, full training), runs build/nunchaku and reads the two files:
  config.yaml     accelerate.commands.config.config_args.load_config_from_file (ClusterConfig
                  .from_yaml_file: unknown keys are refused)
  fsdp_launch.sh  the `accelerate launch ...` line (as node 1 would run it) through accelerate's
                  launch_command_parser and _validate_launch_command (which merges the config
                  file), then prepare_multi_gpu_env: the torchrun arguments and the FSDP_* and
                  PARALLELISM_CONFIG_* environment the processes get; with that environment,
                  FullyShardedDataParallelPlugin() and ParallelismConfig() as the Accelerator
                  makes them; and the device mesh accelerate would give fully_shard, built under
                  torch's fake process group as rank 0 of nodes x GPUs (its shard dimension is
                  the ranks each parameter is split over)
Writes testdata/golden/fsdp_exports_check.json: the files as checked and what accelerate read
from them. The C++ test re-runs the cases and requires the same files.

Usage: /work/venv-torch/bin/python scripts/check_fsdp_exports.py [build/nunchaku]
"""
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "golden" / "fsdp_exports_check.json"
sys.path.insert(0, str(ROOT / "scripts"))
from check_deepspeed_exports import sparse_llama  # noqa: E402

CASES = [
    ["--nodes", "2", "--gpus", "8", "--vram", "80G", "--grad-checkpointing", "--context", "2048"],
    ["--nodes", "2", "--gpus", "8", "--vram", "80G", "--grad-checkpointing", "--context", "2048", "--fsdp-strategy", "hybrid"],
    ["--nodes", "4", "--gpus", "8", "--vram", "141G", "--grad-checkpointing", "--context", "2048", "--fsdp-strategy", "hybrid"],
    ["--nodes", "1", "--gpus", "8", "--vram", "80G", "--grad-checkpointing", "--context", "2048"],
    ["--nodes", "4", "--gpus", "4", "--vram", "40G", "--grad-checkpointing", "--context", "1024", "--dtype", "bf16"],
]


def accelerate_read(files, tmp):
    import accelerate
    import torch
    import torch.distributed as dist
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.parallelism_config import ParallelismConfig
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.launch import prepare_multi_gpu_env
    from torch.testing._internal.distributed.fake_pg import FakeStore

    d = Path(tmp)
    (d / "config.yaml").write_text(files["config.yaml"])
    cfg = load_config_from_file(str(d / "config.yaml"))
    out = {"config": {"distributed_type": str(cfg.distributed_type.value), "num_machines": cfg.num_machines,
                      "num_processes": cfg.num_processes, "machine_rank": cfg.machine_rank,
                      "main_process_ip": cfg.main_process_ip, "main_process_port": cfg.main_process_port,
                      "mixed_precision": str(cfg.mixed_precision.value if hasattr(cfg.mixed_precision, "value") else cfg.mixed_precision),
                      "same_network": cfg.same_network, "rdzv_backend": cfg.rdzv_backend, "fsdp_config": cfg.fsdp_config,
                      "parallelism_config": cfg.parallelism_config}}
    line = next(l for l in files["fsdp_launch.sh"].splitlines() if l.startswith("accelerate launch "))
    words = shlex.split(line.replace("$MACHINE_RANK", "1").replace("$MAIN_PROCESS_IP", "10.0.0.1"))
    cwd = os.getcwd()
    os.chdir(d)  # --config_file config.yaml, as the line names it
    try:
        args = launch_command_parser().parse_args(words[2:])
        args, _, _ = _validate_launch_command(args)
        env = prepare_multi_gpu_env(args)
    finally:
        os.chdir(cwd)
    keep = {k: v for k, v in env.items() if k.startswith(("FSDP_", "PARALLELISM_CONFIG_", "ACCELERATE_USE_", "ACCELERATE_MIXED"))}
    # One machine: torchrun gets --nproc_per_node only (prepare_multi_gpu_env sets nnodes for num_machines > 1).
    out["launch"] = {"nnodes": int(getattr(args, "nnodes", 1)), "nproc_per_node": int(args.nproc_per_node),
                     "node_rank": getattr(args, "node_rank", 0),
                     "master_addr": getattr(args, "master_addr", None), "master_port": getattr(args, "master_port", None),
                     "rdzv_endpoint": getattr(args, "rdzv_endpoint", None),
                     "training_script": args.training_script, "env": dict(sorted(keep.items()))}
    saved = dict(os.environ)
    os.environ.update(keep)
    try:
        plugin = FullyShardedDataParallelPlugin()
        out["fsdp_plugin"] = {"fsdp_version": plugin.fsdp_version, "reshard_after_forward": plugin.reshard_after_forward,
                              "cpu_offload": type(plugin.cpu_offload).__name__,
                              "auto_wrap_policy": getattr(plugin.auto_wrap_policy, "__name__", str(plugin.auto_wrap_policy)),
                              "activation_checkpointing": plugin.activation_checkpointing,
                              "cpu_ram_efficient_loading": plugin.cpu_ram_efficient_loading,
                              "state_dict_type": str(plugin.state_dict_type)}
        world = out["launch"]["nnodes"] * out["launch"]["nproc_per_node"]
        pc = ParallelismConfig() if keep.get("ACCELERATE_USE_PARALLELISM_CONFIG") == "true" else None
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
        try:
            if pc is not None:
                mesh = pc.build_device_mesh("cpu")[tuple(pc.fsdp_dim_names)]
                out["parallelism_config"] = {"dp_replicate_size": pc.dp_replicate_size, "dp_shard_size": pc.dp_shard_size,
                                             "total_size": pc.total_size, "fsdp_dim_names": list(pc.fsdp_dim_names)}
            else:  # fully_shard's default: one dimension over the whole world
                from torch.distributed.device_mesh import init_device_mesh
                mesh = init_device_mesh("cpu", (world,))
                out["parallelism_config"] = None
            out["mesh"] = {"shape": list(mesh.shape), "shard_ranks": mesh.size(mesh.ndim - 1), "world_size": world}
        finally:
            dist.destroy_process_group()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    out["accelerate_version"] = accelerate.__version__
    out["torch_version"] = torch.__version__
    return out


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "build" / "nunchaku")
    cfg = json.loads((ROOT / "testdata" / "models" / "llama2-70b-config" / "config.json").read_text())
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        model.mkdir()
        sparse_llama(model, cfg)
        for k, extra in enumerate(CASES):
            out = Path(tmp) / f"out{k}"
            args = ["plan", "MODEL", "--mode", "train", "--format", "fsdp", "-o", "OUT/"] + extra
            run = subprocess.run([binary] + [str(model) if a == "MODEL" else str(out) + "/" if a == "OUT/" else a for a in args],
                                 capture_output=True, text=True)
            files = {n: (out / n).read_text() for n in ("config.yaml", "fsdp_launch.sh")}
            scratch = Path(tmp) / f"read{k}"
            scratch.mkdir()
            read = accelerate_read(files, scratch)
            verdict = [l for l in run.stdout.splitlines() if not l.startswith(("note:", "wrote ", " "))]
            results.append({"args": args, "exit_code": run.returncode, "verdict": verdict, "files": files, "accelerate_read": read})
            print(f"case {k}: exit {run.returncode}, world {read['mesh']['world_size']}, mesh {read['mesh']['shape']}, "
                  f"offload {read['fsdp_plugin']['cpu_offload']}", file=sys.stderr)
    import accelerate
    doc = {"accelerate_version": accelerate.__version__, "cases": results}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print("wrote", OUT, file=sys.stderr)


if __name__ == "__main__":
    main()
