"""llama.cpp's own buffer sizes for `nunchaku estimate --runtime llama.cpp` to be checked against.

    python scripts/measure_llamacpp.py measure [--dir /tmp/nunchaku-measure] [--out testdata/golden/measured_llamacpp.json]
    python scripts/measure_llamacpp.py table BIN [--golden testdata/golden/measured_llamacpp.json]

`measure` writes GGUFs with the real dimensions of public models (sparse: the tensor index
and metadata only, the data a hole made with truncate) into --dir, and for each case of the
matrix below constructs a llama.cpp context in a fresh process (llama-cpp-python's C API:
llama_model_load_from_file + llama_init_from_model, no tokens decoded), reads llama.cpp's
own log lines ("CPU_Mapped model buffer size", "CPU_REPACK model buffer size", "KV buffer
size", "output buffer size", "compute buffer size") and writes them, with the case, to the
golden JSON that tests/test_estimate_measured_llamacpp.cpp checks the estimate against.

Two modes per case:
- "alloc": an ordinary mmap load. The weights are mapped (MAP_POPULATE faults the sparse
  file's zero pages in, so these models are cut to a few layers of real width: the
  per-layer buffers are what is compared), the KV cache is allocated and cleared, and with
  repacking on (llama.cpp's default, use_extra_bufts) eligible weights are copied into a
  CPU_REPACK buffer.
- "no_alloc": llama.cpp's memory-fit mode (model params no_alloc, no mmap): nothing is read
  or allocated, and the compute buffer line is still the size ggml-alloc plans for the
  reserved graph (ggml_backend_sched_reserve_size); model and KV lines print 0 there and are
  not recorded. Used for the full-size models at long context.

`table` runs BIN estimate for every golden case (on the GGUFs `measure` left in --dir) and
prints the predicted-vs-measured table that docs/measured_llamacpp.md keeps.
"""
import argparse
import ctypes
import json
import os
import re
import subprocess
import sys
from pathlib import Path

MiB = 1 << 20

# Real dimensions (config.json of each model on the Hub).
MODELS = {
    # meta-llama/Meta-Llama-3-8B
    "llama3-8b": dict(arch="llama", h=4096, L=32, a=32, kv=8, d=128, I=14336, V=128256, ctx=8192, tied=False),
    # mistralai/Mistral-7B-v0.1 (without its sliding window, as llama.cpp's llama arch runs it)
    "mistral-7b": dict(arch="llama", h=4096, L=32, a=32, kv=8, d=128, I=14336, V=32000, ctx=32768, tied=False),
    # HuggingFaceTB/SmolLM2-135M
    "smollm2-135m": dict(arch="llama", h=576, L=30, a=9, kv=3, d=64, I=1536, V=49152, ctx=8192, tied=True),
    # Qwen/Qwen3-30B-A3B
    "qwen3-30b-a3b": dict(arch="qwen3moe", h=2048, L=48, a=32, kv=4, d=128, I=6144, V=151936, ctx=40960, tied=False,
                          E=128, k=8, Ie=768),
    # deepseek-ai/DeepSeek-V2-Lite (MLA, no q LoRA)
    "deepseek-v2-lite": dict(arch="deepseek2", h=2048, L=27, a=16, I=10944, V=102400, ctx=163840, tied=False,
                             E=64, k=6, Ie=1408, shared=2, dense=1, q_lora=0, kv_lora=512, rope=64, nope=128, vd=128),
    # deepseek-ai/DeepSeek-V3 (MLA)
    "deepseek-v3": dict(arch="deepseek2", h=7168, L=61, a=128, I=18432, V=129280, ctx=163840, tied=False,
                        E=256, k=8, Ie=2048, shared=1, dense=3, q_lora=1536, kv_lora=512, rope=64, nope=128, vd=128),
    # google/gemma-3-12b-pt (sliding window 1024 on 5 of every 6 layers)
    "gemma3-12b": dict(arch="gemma3", h=3840, L=48, a=16, kv=8, d=256, I=15360, V=262208, ctx=131072, tied=True,
                       swa=1024, swa_every=6),
}

# The matrix: (model, layers or None = all, weight type, mode, n_ctx per sequence, n_seq, ubatch,
# flash (True/False), kv type, swa_full, repack).
CASES = [
    # Llama-3-8B: ubatch, flash, context, quantized KV, repack
    ("llama3-8b", None, "q4_0", "no_alloc", 4096, 1, 512, True, "f16", False, False),
    ("llama3-8b", None, "q4_0", "no_alloc", 4096, 1, 512, False, "f16", False, False),
    ("llama3-8b", None, "q4_0", "no_alloc", 4096, 1, 2048, True, "f16", False, False),
    ("llama3-8b", None, "q4_0", "no_alloc", 4096, 1, 2048, False, "f16", False, False),
    ("llama3-8b", None, "q4_0", "no_alloc", 32768, 1, 512, True, "f16", False, False),
    ("llama3-8b", None, "q4_0", "no_alloc", 8192, 4, 512, True, "f16", False, False),
    ("llama3-8b", None, "q4_0", "no_alloc", 4096, 1, 128, False, "f16", False, False),
    ("llama3-8b", 2, "q4_0", "alloc", 4096, 1, 512, True, "f16", False, True),
    ("llama3-8b", 2, "q4_0", "alloc", 4096, 1, 512, True, "q8_0", False, False),
    ("llama3-8b", 2, "q4_0", "alloc", 4096, 1, 512, True, "q4_0", False, False),
    ("llama3-8b", 2, "q4_k", "alloc", 2048, 2, 512, True, "f16", False, True),
    ("llama3-8b", 2, "q8_0", "alloc", 2048, 1, 512, True, "q8_0", False, True),
    ("mistral-7b", None, "q4_0", "no_alloc", 8192, 1, 512, True, "f16", False, False),
    ("mistral-7b", None, "q4_0", "no_alloc", 8192, 1, 1024, False, "f16", False, False),
    ("smollm2-135m", None, "q4_0", "alloc", 2048, 1, 512, True, "f16", False, True),
    ("smollm2-135m", None, "f16", "alloc", 2048, 8, 512, False, "f16", False, True),
    ("smollm2-135m", None, "q8_0", "alloc", 4096, 1, 256, True, "q8_0", False, False),
    # MoE
    ("qwen3-30b-a3b", None, "q4_0", "no_alloc", 4096, 1, 512, True, "f16", False, False),
    ("qwen3-30b-a3b", None, "q4_0", "no_alloc", 4096, 1, 512, False, "f16", False, False),
    ("qwen3-30b-a3b", None, "q4_0", "no_alloc", 32768, 1, 2048, True, "f16", False, False),
    ("qwen3-30b-a3b", 2, "q4_0", "alloc", 4096, 1, 512, True, "q8_0", False, True),
    # MLA
    ("deepseek-v2-lite", None, "q4_0", "no_alloc", 4096, 1, 512, True, "f16", False, False),
    ("deepseek-v2-lite", None, "q4_0", "no_alloc", 32768, 1, 512, True, "f16", False, False),
    ("deepseek-v2-lite", None, "q4_0", "no_alloc", 4096, 1, 512, False, "f16", False, False),
    ("deepseek-v2-lite", 3, "q4_0", "alloc", 4096, 1, 512, True, "f16", False, True),
    ("deepseek-v3", None, "q4_0", "no_alloc", 4096, 1, 512, True, "f16", False, False),
    ("deepseek-v3", None, "q4_0", "no_alloc", 32768, 1, 512, True, "f16", False, False),
    ("deepseek-v3", None, "q4_0", "no_alloc", 131072, 1, 512, True, "f16", False, False),
    ("deepseek-v3", None, "q4_0", "no_alloc", 4096, 1, 2048, True, "f16", False, False),
    ("deepseek-v3", 3, "q4_0", "alloc", 4096, 1, 512, True, "q8_0", False, False),
    # sliding window
    ("gemma3-12b", None, "q4_0", "no_alloc", 8192, 1, 512, True, "f16", False, False),
    ("gemma3-12b", None, "q4_0", "no_alloc", 8192, 1, 512, True, "f16", True, False),
    ("gemma3-12b", 6, "q4_0", "alloc", 8192, 1, 512, True, "f16", False, False),
    ("gemma3-12b", 6, "q4_0", "alloc", 8192, 1, 512, True, "f16", True, False),
    ("gemma3-12b", 6, "q4_0", "alloc", 4096, 2, 1024, False, "f16", False, False),
]


def case_name(c):
    m, L, wt, mode, ctx, nseq, ub, fa, kv, swa_full, repack = c
    parts = [m + (f"-l{L}" if L else ""), wt, f"ctx{ctx}", f"np{nseq}", f"ub{ub}", "fa" if fa else "nofa", f"kv-{kv}"]
    if swa_full:
        parts.append("swa-full")
    if mode == "alloc":
        parts.append("repack" if repack else "no-repack")
    return " ".join(parts)


# --- sparse GGUF ---------------------------------------------------------------------------

def tensors_of(s, L):
    """(name, ggml ne) of every tensor, in llama.cpp's names, as convert_hf_to_gguf orders them."""
    h, V = s["h"], s["V"]
    t = [("token_embd.weight", [h, V])]
    arch = s["arch"]
    for i in range(L):
        b = f"blk.{i}."
        t.append((b + "attn_norm.weight", [h]))
        if arch == "deepseek2":
            a, hk = s["a"], s["nope"] + s["rope"]
            if s["q_lora"]:
                t += [(b + "attn_q_a.weight", [h, s["q_lora"]]), (b + "attn_q_a_norm.weight", [s["q_lora"]]),
                      (b + "attn_q_b.weight", [s["q_lora"], a * hk])]
            else:
                t.append((b + "attn_q.weight", [h, a * hk]))
            t += [(b + "attn_kv_a_mqa.weight", [h, s["kv_lora"] + s["rope"]]), (b + "attn_kv_a_norm.weight", [s["kv_lora"]]),
                  (b + "attn_k_b.weight", [s["nope"], s["kv_lora"], a]), (b + "attn_v_b.weight", [s["kv_lora"], s["vd"], a]),
                  (b + "attn_output.weight", [a * s["vd"], h])]
        else:
            q, kvd = s["a"] * s["d"], s["kv"] * s["d"]
            t += [(b + "attn_q.weight", [h, q]), (b + "attn_k.weight", [h, kvd]), (b + "attn_v.weight", [h, kvd]),
                  (b + "attn_output.weight", [q, h])]
            if arch in ("qwen3moe", "gemma3"):
                t += [(b + "attn_q_norm.weight", [s["d"]]), (b + "attn_k_norm.weight", [s["d"]])]
            if arch == "gemma3":
                t.append((b + "post_attention_norm.weight", [h]))
        t.append((b + "ffn_norm.weight", [h]))
        moe = "E" in s and not (arch == "deepseek2" and i < s["dense"])
        if moe:
            E, Ie = s["E"], s["Ie"]
            t += [(b + "ffn_gate_inp.weight", [h, E]), (b + "ffn_gate_exps.weight", [h, Ie, E]),
                  (b + "ffn_down_exps.weight", [Ie, h, E]), (b + "ffn_up_exps.weight", [h, Ie, E])]
            if arch == "deepseek2":
                if s["q_lora"]:
                    t.append((b + "exp_probs_b.bias", [E]))
                sh = Ie * s["shared"]
                t += [(b + "ffn_gate_shexp.weight", [h, sh]), (b + "ffn_down_shexp.weight", [sh, h]),
                      (b + "ffn_up_shexp.weight", [h, sh])]
        else:
            t += [(b + "ffn_gate.weight", [h, s["I"]]), (b + "ffn_down.weight", [s["I"], h]), (b + "ffn_up.weight", [h, s["I"]])]
        if arch == "gemma3":
            t.append((b + "post_ffw_norm.weight", [h]))
    t.append(("output_norm.weight", [h]))
    if not s["tied"]:
        t.append(("output.weight", [h, V]))
    return t


def write_gguf(path, name, s, L, wtype):
    import gguf
    from gguf import GGMLQuantizationType as QT
    qt = {"q4_0": QT.Q4_0, "q4_k": QT.Q4_K, "q8_0": QT.Q8_0, "f16": QT.F16}[wtype]
    file_type = {QT.Q4_0: 2, QT.Q4_K: 15, QT.Q8_0: 7, QT.F16: 1}[qt]
    arch = s["arch"]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_context_length(s["ctx"])
    w.add_embedding_length(s["h"])
    w.add_block_count(L)
    w.add_feed_forward_length(s["I"])
    w.add_head_count(s["a"])
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(s["V"])
    w.add_file_type(file_type)
    if arch == "deepseek2":
        w.add_head_count_kv(1)
        w.add_key_length(s["kv_lora"] + s["rope"])
        w.add_value_length(s["kv_lora"])
        w.add_key_length_mla(s["nope"] + s["rope"])
        w.add_value_length_mla(s["vd"])
        w.add_rope_dimension_count(s["rope"])
        w.add_kv_lora_rank(s["kv_lora"])
        w.add_q_lora_rank(s["q_lora"])  # 0: no q LoRA (the "lite" layout, whatever the layer count)
        if s["q_lora"]:
            w.add_uint32(f"{arch}.expert_gating_func", 2)  # sigmoid
            w.add_expert_weights_norm(True)
        w.add_leading_dense_block_count(min(s["dense"], L))
        w.add_expert_shared_count(s["shared"])
        w.add_expert_weights_scale(1.0)
    else:
        w.add_head_count_kv(s["kv"])
        w.add_key_length(s["d"])
        w.add_value_length(s["d"])
        w.add_rope_dimension_count(s["d"])
    if "E" in s:
        w.add_expert_count(s["E"])
        w.add_expert_used_count(s["k"])
        w.add_expert_feed_forward_length(s["Ie"])
    if "swa" in s:
        w.add_sliding_window(s["swa"])
        w.add_uint32(f"{arch}.attention.sliding_window_pattern", s["swa_every"])
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    toks += [f"\u2581t{i}" for i in range(s["V"] - len(toks))]
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores([0.0] * len(toks))
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (len(toks) - 259))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    fallback = {QT.Q4_K: QT.Q5_0}
    total = 0
    for tname, ne in tensors_of(s, L):
        t = qt if len(ne) > 1 and "gate_inp" not in tname else QT.F32
        if t == QT.Q4_K and ne[0] % 256:
            t = fallback[t]
        bs, nb = gguf.GGML_QUANT_SIZES[t]
        numel = 1
        for x in ne:
            numel *= x
        nbytes = numel // bs * nb
        shape = list(reversed(ne))
        if t == QT.F32:
            w.add_tensor_info(tname, shape, gguf.np.dtype(gguf.np.float32), nbytes)
        else:
            shape[-1] = shape[-1] // bs * nb  # byte shape, as gguf-py takes a raw type
            w.add_tensor_info(tname, shape, gguf.np.dtype(gguf.np.uint8), nbytes, raw_dtype=t)
        total += gguf.GGUFWriter.ggml_pad(nbytes, w.data_alignment)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    fout = w.fout[0]
    start = gguf.GGUFWriter.ggml_pad(fout.tell(), w.data_alignment)
    fout.truncate(start + total)  # the data: a hole (reads as zeros: zero scales, zero weights)
    fout.close()


# --- one case in a fresh process -----------------------------------------------------------

LINE = re.compile(r"(\w+):\s+(\S+)\s+(model|KV|output|compute) buffer size =\s+([0-9.]+) MiB")


def run_case(path, mode, ctx, nseq, ub, fa, kv, swa_full, repack):
    """In this (fresh) process: load, make a context, return llama.cpp's buffer lines."""
    import llama_cpp as L
    logs = []

    @ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
    def on_log(level, text, user):
        logs.append(text.decode(errors="replace"))

    L.llama_log_set(on_log, None)
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    mp.use_extra_bufts = bool(repack)
    if mode == "no_alloc":
        mp.no_alloc = True
        mp.load_mode = 0  # LLAMA_LOAD_MODE_NONE: the memory-fit mode maps nothing
    else:
        mp.load_mode = 1  # LLAMA_LOAD_MODE_MMAP
    model = L.llama_model_load_from_file(str(path).encode(), mp)
    if not model:
        sys.exit("".join(logs[-20:]) + f"\nllama.cpp could not load {path}")
    types = {"f16": 1, "q8_0": 8, "q4_0": 2, "f32": 0}
    cp = L.llama_context_default_params()
    cp.n_ctx = ctx * nseq
    cp.n_batch = max(ub, 2048)
    cp.n_ubatch = ub
    cp.n_seq_max = nseq
    cp.n_threads = 2
    cp.n_threads_batch = 2
    cp.flash_attn_type = 1 if fa else 0  # LLAMA_FLASH_ATTN_TYPE_ENABLED / DISABLED
    cp.type_k = types[kv]
    cp.type_v = types[kv]
    cp.swa_full = bool(swa_full)
    cp.no_perf = True
    c = L.llama_init_from_model(model, cp)
    if not c:
        sys.exit("".join(logs[-20:]) + "\nllama.cpp could not create a context")
    out = {}
    for line in "".join(logs).splitlines():
        m = LINE.search(line)
        if not m:
            continue
        buf, kind, mib = m.group(2), m.group(3), float(m.group(4))
        key = {"model": f"model_{buf}", "KV": "kv", "output": "output", "compute": "compute"}[kind]
        if mode == "no_alloc" and kind in ("model", "KV"):
            continue  # dummy buffers in the memory-fit mode
        out[key] = round(out.get(key, 0.0) + mib, 2)  # the SWA cache's KV line adds to the other
    sysinfo = L.llama_print_system_info().decode(errors="replace").strip()
    out["_log"] = [l for l in "".join(logs).splitlines() if "buffer size" in l or "cells" in l or "n_ctx" in l]
    out["_system"] = sysinfo
    return out


def index_of(path, full):
    """The file as gguf-py reads it: metadata (token arrays as their length) and the tensor
    table [name, ggml type, ne, absolute offset, bytes]. Files only measured in the no_alloc
    mode (compute and output buffers) keep the tensors of their first 4 layers and the global
    ones: enough for the graph's dimensions."""
    import gguf
    r = gguf.GGUFReader(str(path))
    md = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.alignment":
            continue
        v = f.contents()
        if isinstance(v, list) and len(v) > 16:
            md[k] = {"array": "string" if f.types[-1] == gguf.GGUFValueType.STRING else "number", "length": len(v)}
        else:
            md[k] = v
    ts = []
    for t in r.tensors:
        layer = re.match(r"blk\.(\d+)\.", t.name)
        if not full and layer and int(layer.group(1)) >= 4:
            continue
        ts.append([t.name, int(t.tensor_type), [int(x) for x in t.shape], int(t.data_offset), int(t.n_bytes)])
    return {"bytes": path.stat().st_size, "full_index": full, "metadata": md, "tensors": ts}


def measure(args):
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    rows = []
    for c in CASES:
        m, L, wt, mode, ctx, nseq, ub, fa, kv, swa_full, repack = c
        s = MODELS[m]
        layers = L or s["L"]
        path = d / f"{m}-l{layers}-{wt}.gguf"
        if not path.exists():
            print(f"== writing {path}", file=sys.stderr)
            write_gguf(path.with_suffix(".tmp"), m, s, layers, wt)
            path.with_suffix(".tmp").rename(path)
        print(f"== {case_name(c)}", file=sys.stderr)
        r = subprocess.run([sys.executable, __file__, "_case", str(path), mode, str(ctx), str(nseq), str(ub), str(int(fa)), kv,
                            str(int(swa_full)), str(int(repack))], capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout[-3000:], r.stderr[-3000:], file=sys.stderr)
            sys.exit(f"case failed: {case_name(c)}")
        got = json.loads(r.stdout.strip().splitlines()[-1])
        print("   " + json.dumps({k: v for k, v in got.items() if not k.startswith("_")}), file=sys.stderr)
        rows.append({"name": case_name(c), "model": m, "layers": layers, "weights": wt, "mode": mode, "context": ctx,
                     "sequences": nseq, "ubatch": ub, "flash_attention": fa, "kv_type": kv, "swa_full": swa_full,
                     "repack": repack, "file": path.name, "measured_mib": {k: v for k, v in got.items() if not k.startswith("_")},
                     "log": got["_log"]})
        system = got["_system"]
    import llama_cpp
    alloc_files = {r["file"] for r in rows if r["mode"] == "alloc"}
    files = {f: index_of(d / f, full=f in alloc_files) for f in sorted({r["file"] for r in rows})}
    doc = {"llama_cpp_python": llama_cpp.__version__, "system_info": system, "files": files, "cases": rows}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}: {len(rows)} cases", file=sys.stderr)


COMPONENTS = [("model_CPU_Mapped", "weights", "CPU_Mapped"), ("model_CPU_REPACK", "weights_repacked", "CPU_REPACK"),
              ("kv", "kv_cache", "KV"), ("output", "logits", "output"), ("compute", "activations", "compute")]


def table(args):
    """BIN estimate for every golden case, on the GGUFs in --dir: a Markdown table."""
    g = json.loads(Path(args.golden).read_text())
    out = [f"llama-cpp-python {g['llama_cpp_python']}, CPU: `{g['system_info'][:160]}`", "",
           "| case | buffer | llama.cpp MiB | estimate MiB | diff |", "|---|---|---:|---:|---:|"]
    for c in g["cases"]:
        cmd = [args.bin, "estimate", str(Path(args.dir) / c["file"]), "--runtime", "llama.cpp", "--device", "cpu", "--context",
               str(c["context"]), "--batch", str(c["sequences"]), "--ubatch", str(c["ubatch"]), "--prefill-chunk",
               str(max(c["ubatch"], 2048)), "--kv-dtype", c["kv_type"], "--attention", "flash" if c["flash_attention"] else "eager",
               "--json"]
        if c["swa_full"]:
            cmd.append("--swa-full")
        if not c["repack"]:
            cmd.append("--no-repack")
        est = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)["component_bytes"]
        for log, comp, label in COMPONENTS:
            if log not in c["measured_mib"]:
                continue
            got, pred = c["measured_mib"][log], est.get(comp, 0) / MiB
            d = (pred - got) / got * 100 if got else 0.0
            out.append(f"| {c['name']} | {label} | {got:.2f} | {pred:.2f} | {d:+.1f} % |")
    out += ["", f"{len(g['cases'])} cases."]
    print("\n".join(out))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "_case":
        p, mode, ctx, nseq, ub, fa, kv, sf, rp = sys.argv[2:]
        print(json.dumps(run_case(p, mode, int(ctx), int(nseq), int(ub), fa == "1", kv, sf == "1", rp == "1")))
        return
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("measure")
    a.add_argument("--dir", default=os.environ.get("MEASURE_DIR", "/tmp/nunchaku-measure"))
    a.add_argument("--out", default="testdata/golden/measured_llamacpp.json")
    t = sub.add_parser("table")
    t.add_argument("bin")
    t.add_argument("--dir", default=os.environ.get("MEASURE_DIR", "/tmp/nunchaku-measure"))
    t.add_argument("--golden", default="testdata/golden/measured_llamacpp.json")
    args = ap.parse_args()
    if args.cmd == "measure":
        measure(args)
    else:
        table(args)


if __name__ == "__main__":
    main()
