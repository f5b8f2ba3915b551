"""The whole process's peak RSS under PyTorch/transformers on the CPU, for
`nunchaku estimate --runtime transformers --device cpu` to be checked against.

    python scripts/measure_torch.py measure [--dir /tmp/nunchaku-measure/torch] [--out testdata/golden/measured_torch.json]
                                            [--only NAME,...] [--reps N] [--fixtures testdata/measured_torch]
                                            (--only: the other cases stay as --out has them)
    python scripts/measure_torch.py fixtures [--dir ...] [--fixtures testdata/measured_torch]
    python scripts/measure_torch.py moe-block [--dir ...] [--out testdata/golden/measured_torch_moe.json]

Writes small models with transformers (random weights, save_pretrained: config.json +
model.safetensors) into --dir, then runs every case of the matrix below in a fresh Python
process under /usr/bin/time -v (its "Maximum resident set size" is the measurement: the
whole process, interpreter and libraries included). The case process also reports its RSS
right after `import torch, transformers` and right after `from_pretrained`, which the
estimate's named baselines (python_runtime, torch_loader) are set from. The golden JSON
names the versions; the models' config.json and tensor tables go to testdata/measured_torch/;
tests/test_estimate_measured_torch.cpp checks the estimate against both.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

THREADS = 2

MODELS = {
    # Llama-shaped, ~60M parameters (hidden 768, 8 layers, 12 heads)
    "llama-60m": dict(cls="LlamaForCausalLM", cfg="LlamaConfig", hidden_size=768, intermediate_size=2048, num_attention_heads=12,
                      num_key_value_heads=12, num_hidden_layers=8, vocab_size=8192, max_position_embeddings=4096,
                      tie_word_embeddings=False),
    # Qwen3-shaped with GQA and q/k norms
    "qwen3-50m": dict(cls="Qwen3ForCausalLM", cfg="Qwen3Config", hidden_size=640, intermediate_size=1792, num_attention_heads=10,
                      num_key_value_heads=2, head_dim=64, num_hidden_layers=8, vocab_size=8192, max_position_embeddings=4096,
                      tie_word_embeddings=True),
    # Gemma-2-shaped (softcapping, alternating sliding window of 512)
    "gemma2-50m": dict(cls="Gemma2ForCausalLM", cfg="Gemma2Config", hidden_size=640, intermediate_size=2048, num_attention_heads=8,
                       num_key_value_heads=4, head_dim=80, num_hidden_layers=8, vocab_size=8192, max_position_embeddings=4096,
                       sliding_window=512),
    # Qwen3-MoE-shaped: 16 experts, top-4, experts of 256 (the dense intermediate_size 1024 unused)
    "qwen3moe-30m": dict(cls="Qwen3MoeForCausalLM", cfg="Qwen3MoeConfig", hidden_size=512, intermediate_size=1024,
                         moe_intermediate_size=256, num_experts=16, num_experts_per_tok=4, num_attention_heads=8,
                         num_key_value_heads=2, head_dim=64, num_hidden_layers=4, vocab_size=4096, max_position_embeddings=8192,
                         tie_word_embeddings=False),
}

# (name, model, kind, dtype, attention, batch, prompt or sequence, new tokens or steps, extra)
CASES = [
    ("generate b1 sdpa fp32", "llama-60m", "generate", "float32", "sdpa", 1, 256, 64, ""),
    ("generate b1 eager fp32", "llama-60m", "generate", "float32", "eager", 1, 256, 64, ""),
    ("generate b8 sdpa fp32", "llama-60m", "generate", "float32", "sdpa", 8, 256, 64, ""),
    ("generate b8 eager fp32", "llama-60m", "generate", "float32", "eager", 8, 256, 64, ""),
    ("generate b1 sdpa bf16", "llama-60m", "generate", "bfloat16", "sdpa", 1, 256, 64, ""),
    ("generate b8 eager bf16", "llama-60m", "generate", "bfloat16", "eager", 8, 256, 64, ""),
    ("generate b8 sdpa bf16", "llama-60m", "generate", "bfloat16", "sdpa", 8, 256, 64, ""),
    ("forward 2048 sdpa fp32", "llama-60m", "forward", "float32", "sdpa", 1, 2048, 0, ""),
    ("forward 2048 eager fp32", "llama-60m", "forward", "float32", "eager", 1, 2048, 0, ""),
    ("train 1 step b4x256", "llama-60m", "train", "float32", "sdpa", 4, 256, 1, ""),
    ("train 2 steps b4x256", "llama-60m", "train", "float32", "sdpa", 4, 256, 2, ""),
    ("train 1 step b4x256 ckpt", "llama-60m", "train", "float32", "sdpa", 4, 256, 1, "ckpt"),
    ("train 2 steps b4x256 ckpt", "llama-60m", "train", "float32", "sdpa", 4, 256, 2, "ckpt"),
    ("lora 2 steps b4x256", "llama-60m", "lora", "float32", "sdpa", 4, 256, 2, ""),
    ("qwen3 generate b1 sdpa fp32", "qwen3-50m", "generate", "float32", "sdpa", 1, 256, 64, ""),
    ("qwen3 generate b8 sdpa bf16", "qwen3-50m", "generate", "bfloat16", "sdpa", 8, 256, 64, ""),
    ("gemma2 generate b1 eager fp32", "gemma2-50m", "generate", "float32", "eager", 1, 256, 64, ""),
    ("gemma2 train 2 steps b4x256", "gemma2-50m", "train", "float32", "eager", 4, 256, 2, ""),
    ("qwen3moe generate 4096 sdpa fp32", "qwen3moe-30m", "generate", "float32", "sdpa", 1, 4096, 32, ""),
    ("qwen3moe generate 4096 sdpa bf16", "qwen3moe-30m", "generate", "bfloat16", "sdpa", 1, 4096, 32, ""),
]

CASE_PY = r'''
import json, sys, time
from pathlib import Path
def rss(key="VmRSS"):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
import torch, transformers
after_import = rss()
torch.set_num_threads(int(sys.argv[9]))
torch.manual_seed(0)
model_dir, kind, dtype, attn, batch, seq, n, extra = sys.argv[1:9]
batch, seq, n = int(batch), int(seq), int(n)
out = {"after_import": after_import}
if kind != "import":
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype), attn_implementation=attn)
    out["after_load"] = rss()
    vocab = model.config.vocab_size
    ids = torch.randint(3, vocab, (batch, seq))
    if kind == "generate":
        model.eval()
        with torch.no_grad():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                           eos_token_id=None, pad_token_id=0)
    elif kind == "forward":
        model.eval()
        with torch.no_grad():
            logits = model(input_ids=ids).logits
            del logits
    else:
        if extra == "ckpt":
            model.gradient_checkpointing_enable()
        if kind == "lora":
            import peft
            model = peft.get_peft_model(model, peft.LoraConfig(r=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
        model.train()
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
        for _ in range(n):
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            del loss
out["end"] = rss()
out["run_peak"] = rss("VmHWM")  # the peak before the interpreter's exit (max_rss includes the exit)
print(json.dumps(out))
'''


BLOCK_PY = r'''
import json, sys
from pathlib import Path
def status(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
import torch, transformers
torch.set_num_threads(int(sys.argv[4]))
torch.manual_seed(0)
model_dir, dtype, tokens = sys.argv[1], getattr(torch, sys.argv[2]), int(sys.argv[3])
model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).eval()
block = model.model.layers[0].mlp
x = torch.randn(tokens, model.config.hidden_size, dtype=dtype).view(1, tokens, -1)
with torch.no_grad():
    block(x[:, :8])  # the kernels' first-call state
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (the load's own peak forgotten)
    before = status("VmRSS")
    y = block(x)
peak = status("VmHWM")
print(json.dumps({"experts_implementation": model.config._experts_implementation, "transient": peak - before,
                  "output": y.numel() * y.element_size()}))
'''


def moe_block(args):
    """One MoE block's forward over t tokens in a fresh process with MALLOC_MMAP_THRESHOLD_=65536
    (freed tensors go back to the kernel, so the RSS rise is the live transient): its peak RSS
    (VmHWM, reset through /proc/self/clear_refs just before) above the RSS before the call,
    output included."""
    import torch
    import transformers
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    make_models(d)
    block_py = d / "block.py"
    block_py.write_text(BLOCK_PY)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    rows = []
    for dtype in ("float32", "bfloat16"):
        for tokens in (2048, 4096, 8192):
            r = subprocess.run([sys.executable, str(block_py), str(d / "qwen3moe-30m"), dtype, str(tokens), str(THREADS)],
                               capture_output=True, text=True, env=env)
            if r.returncode != 0:
                sys.exit(f"block failed:\n{r.stderr[-4000:]}")
            got = json.loads(r.stdout.strip().splitlines()[-1])
            print(f"== qwen3moe-30m block {dtype} t={tokens}: {got['transient']} B ({got['experts_implementation']})", file=sys.stderr)
            rows.append({"dtype": dtype, "tokens": tokens, **got})
    doc = {"torch": torch.__version__, "transformers": transformers.__version__, "python": sys.version.split()[0],
           "threads": THREADS, "malloc": "MALLOC_MMAP_THRESHOLD_=65536", "model": "qwen3moe-30m", "cases": rows}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}: {len(rows)} cases", file=sys.stderr)


def make_models(d):
    import torch
    import transformers
    for name, spec in MODELS.items():
        out = d / name
        if (out / "config.json").exists():
            continue
        spec = dict(spec)
        cls, cfg = getattr(transformers, spec.pop("cls")), getattr(transformers, spec.pop("cfg"))
        torch.manual_seed(0)
        model = cls(cfg(bos_token_id=1, eos_token_id=2, pad_token_id=0, **spec)).float()
        model.save_pretrained(out, safe_serialization=True)
        print(f"== {name}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters", file=sys.stderr)


def run(d, case_py, model, kind, dtype, attn, batch, seq, n, extra):
    r = subprocess.run(["/usr/bin/time", "-v", sys.executable, str(case_py), str(d / model) if model else "-", kind, dtype, attn,
                        str(batch), str(seq), str(n), extra or "-", str(THREADS)], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"case failed:\n{r.stderr[-4000:]}")
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
    got = json.loads(r.stdout.strip().splitlines()[-1])
    got["max_rss"] = int(m.group(1)) * 1024
    return got


def measure(args):
    import torch
    import transformers
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    make_models(d)
    case_py = d / "case.py"
    case_py.write_text(CASE_PY)
    only = set(args.only.split(",")) if args.only else None
    rows = []
    # The baselines: the interpreter with torch and transformers imported, nothing else.
    base = [run(d, case_py, None, "import", "float32", "sdpa", 1, 1, 0, "") for _ in range(args.reps)]
    print(f"== import: {[b['max_rss'] >> 20 for b in base]} MiB", file=sys.stderr)
    for name, model, kind, dtype, attn, batch, seq, n, extra in CASES:
        if only and name not in only:
            continue
        reps = [run(d, case_py, model, kind, dtype, attn, batch, seq, n, extra) for _ in range(args.reps)]
        print(f"== {name}: {[r['max_rss'] >> 20 for r in reps]} MiB (run {[r['run_peak'] >> 20 for r in reps]}, end "
              f"{[r['end'] >> 20 for r in reps]}, after load {reps[0]['after_load'] >> 20})", file=sys.stderr)
        rows.append({"name": name, "model": model, "kind": kind, "dtype": dtype, "attention": attn, "batch": batch, "sequence": seq,
                     "new_tokens_or_steps": n, "extra": extra, "peak": statistics.median(r["max_rss"] for r in reps),
                     **{k: [r[k] for r in reps] for k in ("max_rss", "run_peak", "end", "after_import", "after_load")}})
    import peft
    doc = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__, "python": sys.version.split()[0],
           "threads": THREADS, "malloc": "glibc defaults", "reps": args.reps, "peak": "the median over reps of max_rss",
           "import_max_rss": [b["max_rss"] for b in base], "import_rss": [b["after_import"] for b in base], "cases": rows}
    if only and Path(args.out).exists():
        doc["cases"] = merged_cases(json.loads(Path(args.out).read_text()), doc, rows)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}: {len(rows)} cases", file=sys.stderr)


def merged_cases(old, doc, rows):
    """--only re-measures some cases: the others stay as --out has them, in CASES order, when
    --out was measured with the same versions (else the file would mix them)."""
    for k in ("torch", "transformers", "peft", "python", "threads", "malloc", "reps"):
        if old.get(k) != doc[k]:
            sys.exit(f"--only: {k} is {doc[k]} here but {old.get(k)} in the existing file: measure every case")
    new = {r["name"]: r for r in rows}
    kept = {c["name"]: c for c in old["cases"]}
    return [new.get(n, kept.get(n)) for n, *_ in CASES if n in new or n in kept]


def write_fixtures(d, out):
    """Each model's config.json and tensor table [name, dtype, shape] (tensors.json) under
    `out`/<model>/, the form tests/arch_fixture.cpp turns into a sparse checkpoint."""
    for name in MODELS:
        st = (d / name / "model.safetensors").read_bytes()
        n = int.from_bytes(st[:8], "little")
        header = json.loads(st[8:8 + n])
        tensors = [[k, v["dtype"], v["shape"]] for k, v in header.items() if k != "__metadata__"]
        dst = Path(out) / name
        dst.mkdir(parents=True, exist_ok=True)
        (dst / "config.json").write_text((d / name / "config.json").read_text())
        (dst / "tensors.json").write_text("[\n" + ",\n".join(json.dumps(t) for t in tensors) + "\n]\n")


def estimate_args(binary, model_dir, c):
    """The estimate command line that models case `c` (as tests/test_estimate_measured_torch.cpp does)."""
    a = [binary, "estimate", str(model_dir), "--runtime", "transformers", "--device", "cpu", "--json", "--attention", c["attention"]]
    if c["dtype"] == "bfloat16":
        a += ["--dtype", "bf16"]
    n = c["new_tokens_or_steps"]
    if c["kind"] == "generate":  # the prompt is the prefill
        return a + ["--batch", str(c["batch"]), "--context", str(c["sequence"] + n), "--prefill-chunk", str(c["sequence"])]
    if c["kind"] == "forward":
        return a + ["--batch", str(c["batch"]), "--context", str(c["sequence"]), "--all-logits"]
    a += ["--mode", c["kind"], "--batch", str(c["batch"]), "--context", str(c["sequence"])]
    if c["extra"] == "ckpt":
        a.append("--grad-checkpointing")
    if n == 1:
        a += ["--steps", "1"]
    if c["kind"] == "lora":
        a += ["--lora-targets", "q_proj,v_proj"]
    return a


def table(args):
    """BIN estimate for every golden case on the models in --dir: a Markdown table."""
    g = json.loads(Path(args.golden).read_text())
    M = 1 << 20
    out = [f"torch {g['torch']}, transformers {g['transformers']}, peft {g['peft']}, Python {g['python']}, {g['threads']} threads, "
           f"{g['malloc']}, {g['reps']} fresh processes per case; RSS after `import torch, transformers`: "
           f"{statistics.median(g['import_rss']) / M:.0f} MiB, max RSS of that process (its exit included): "
           f"{statistics.median(g['import_max_rss']) / M:.0f} MiB", "",
           "| case | after from_pretrained MiB | run's own peak MiB | max RSS MiB (runs) | median | estimate MiB | diff |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for c in g["cases"]:
        r = subprocess.run(estimate_args(args.bin, Path(args.dir) / c["model"], c), capture_output=True, text=True)
        if r.returncode not in (0, 3):
            sys.exit(r.stderr)
        pred, got = sum(json.loads(r.stdout)["component_bytes"].values()), c["peak"]
        runs = "/".join(f"{x / M:.0f}" for x in c["max_rss"])
        own = "/".join(f"{x / M:.0f}" for x in c["run_peak"])
        out.append(f"| {c['name']} | {statistics.median(c['after_load']) / M:.0f} | {own} | {runs} | {got / M:.0f} | {pred / M:.0f} | "
                   f"{(pred - got) / got * 100:+.1f} % |")
    print("\n".join(out))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("fixtures", help="write the models' config.json and tensors.json under --fixtures")
    i.add_argument("--dir", default=os.environ.get("MEASURE_DIR", "/tmp/nunchaku-measure/torch"))
    a = sub.add_parser("measure")
    a.add_argument("--dir", default=os.environ.get("MEASURE_DIR", "/tmp/nunchaku-measure/torch"))
    a.add_argument("--out", default="testdata/golden/measured_torch.json")
    a.add_argument("--only", default="")
    a.add_argument("--reps", type=int, default=3)
    for x in (i, a):
        x.add_argument("--fixtures", default="testdata/measured_torch")
    b = sub.add_parser("moe-block", help="one MoE block's transient at 2048, 4096 and 8192 tokens (qwen3moe-30m)")
    b.add_argument("--dir", default=os.environ.get("MEASURE_DIR", "/tmp/nunchaku-measure/torch"))
    b.add_argument("--out", default="testdata/golden/measured_torch_moe.json")
    t = sub.add_parser("table")
    t.add_argument("bin")
    t.add_argument("--dir", default=os.environ.get("MEASURE_DIR", "/tmp/nunchaku-measure/torch"))
    t.add_argument("--golden", default="testdata/golden/measured_torch.json")
    args = ap.parse_args()
    if args.cmd == "table":
        table(args)
        return
    if args.cmd == "moe-block":
        moe_block(args)
        return
    if args.cmd == "measure":
        measure(args)
    write_fixtures(Path(args.dir), args.fixtures)


if __name__ == "__main__":
    main()
