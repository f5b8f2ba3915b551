#!/usr/bin/env python3
"""The peers and bounds of scripts/gpu-check.sh, on the same weights nunchaku runs, in one
process. Prints one JSON object:
  device            cuda, or cpu (--device cpu)
  hbm_gb_per_s      device-to-device copy, bytes read + written per second (best of 5, 1 GiB):
                    the HBM traffic a weight-reading kernel can reach
  h2d_gb_per_s      pinned host -> device copy (best of 5, 1 GiB): the PCIe bound of streaming
  hf[B]             transformers generate, bf16, resident on cuda:0: generated tok/s at batch B
  accelerate[B]     transformers + accelerate device_map="auto" with max_memory {0: GPU_BYTES}:
                    generated tok/s at batch B (the rest of the weights offloaded to the CPU)
Every generate is greedy, `--tokens` new tokens exactly (min_new_tokens), prompts of
`--prompt-len` random ids, after one warm-up call; prefill is inside the timing, as in
nunchaku's tok/s.
usage: gpu_peers.py MODEL --tokens N --prompt-len P --batches 1,32 --offload-batches 1,16
                    --offload-tokens N --gpu-bytes B [--device cpu]
--device cpu (gpu-check.sh's rehearsal, GPU_CHECK_REHEARSAL=1): the same calls without a GPU,
so the script and these library calls can be checked anywhere; the bandwidths are then host
memory copies, the offloaded model keeps GPU_BYTES in host memory and the rest on disk, and
no number it prints is a GPU result.
"""
import argparse
import gc
import json
import shutil
import sys
import tempfile
import time

import torch


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def best_rate(fn, nbytes, device, reps=5):
    best = 0.0
    for _ in range(reps):
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        best = max(best, nbytes / (time.perf_counter() - t) / 1e9)
    return best


def bandwidths(device):
    n = 1 << 30 if device == "cuda" else 64 << 20
    x = torch.empty(n, dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    hbm = best_rate(lambda: y.copy_(x), 2 * n, device)
    h = torch.empty(n, dtype=torch.uint8, pin_memory=device == "cuda")
    h2d = best_rate(lambda: y.copy_(h, non_blocking=True), n, device)
    del x, y, h
    return hbm, h2d


def tok_per_s(model, vocab, batch, prompt_len, tokens, device):
    g = torch.Generator().manual_seed(batch)
    ids = torch.randint(3, vocab, (batch, prompt_len), generator=g).to(device)
    mask = torch.ones_like(ids)
    kw = dict(do_sample=False, pad_token_id=0, attention_mask=mask)
    model.generate(ids, max_new_tokens=2, min_new_tokens=2, **kw)
    sync(device)
    t = time.perf_counter()
    out = model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, **kw)
    sync(device)
    dt = time.perf_counter() - t
    return batch * (out.shape[1] - prompt_len) / dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=10)
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--offload-batches", default="1,16")
    ap.add_argument("--offload-tokens", type=int, default=8)
    ap.add_argument("--gpu-bytes", type=int, required=True)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    a = ap.parse_args()
    import transformers
    from packaging.version import Version
    from transformers import AutoModelForCausalLM

    # bf16 weights: `dtype` since transformers 4.56 (`torch_dtype` before, deprecated after)
    bf16 = {"dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype": torch.bfloat16}
    dev = a.device
    res = {"device": dev}
    res["hbm_gb_per_s"], res["h2d_gb_per_s"] = bandwidths(dev)
    m = AutoModelForCausalLM.from_pretrained(a.model, **bf16).to(dev).eval()
    vocab = m.config.vocab_size
    with torch.no_grad():
        res["hf"] = {b: tok_per_s(m, vocab, int(b), a.prompt_len, a.tokens, dev) for b in a.batches.split(",")}
    del m
    gc.collect()
    if dev == "cuda":
        torch.cuda.empty_cache()
    offload_dir = tempfile.mkdtemp(prefix="gpu-peers-")
    try:
        if dev == "cuda":
            where = dict(max_memory={0: a.gpu_bytes, "cpu": 1 << 40})
        else:  # no GPU: GPU_BYTES in host memory, the rest offloaded to disk (the same hooks move it)
            where = dict(max_memory={"cpu": a.gpu_bytes}, offload_folder=offload_dir)
        m = AutoModelForCausalLM.from_pretrained(a.model, device_map="auto", **bf16, **where).eval()
        with torch.no_grad():
            res["accelerate"] = {b: tok_per_s(m, vocab, int(b), a.prompt_len, a.offload_tokens, dev)
                                 for b in a.offload_batches.split(",")}
    except Exception as e:  # accelerate missing or refusing: say so, keep the other numbers
        res["accelerate_error"] = f"{type(e).__name__}: {e}"
    finally:
        shutil.rmtree(offload_dir, ignore_errors=True)
    json.dump(res, sys.stdout)
    print()


if __name__ == "__main__":
    main()
