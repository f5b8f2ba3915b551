"""llama.cpp's own buffer sizes for `nunchaku estimate --runtime llama.cpp` to be checked against.

    python scripts/measure_llamacpp.py measure [--dir /tmp/nunchaku-measure] [--out testdata/golden/measured_llamacpp.json]
    python scripts/measure_llamacpp.py table BIN [--golden testdata/golden/measured_llamacpp.json]
    python scripts/measure_llamacpp.py process [--gguf-dir /tmp/bench] [--out testdata/golden/measured_llamacpp_process.json]
                                               [--llama-completion BIN] [--remeasure]
    python scripts/measure_llamacpp.py process-table BIN [--gguf-dir /tmp/bench]

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
  reserved graph (ggml_backend_sched_reserve_size); model and KV buffer lines print 0 there
  and are not recorded, but each cache still prints its own size (the bytes of its tensors:
  "llama_kv_cache: size = ... (N cells, L layers, S seqs)"), and the recurrent state of a
  hybrid is allocated for real ("RS buffer size"). Used for the full-size models at long
  context.

Every case keeps those size lines as `kv_caches` (an iswa model's non-SWA cache, then its SWA
cache) and `rs_caches`; tests/test_estimate_measured_llamacpp.cpp checks the estimate's KV and
recurrent state against them exactly, cache by cache.

`process` runs real GGUFs (--gguf-dir, default /tmp/bench: the smol135m, llama1b, qwen3moe1b and
gemma3_270m files scripts/make_bench_gguf.py writes) through a whole llama-cpp-python process per
case of PROCESS_CASES: import, load (mmap), context (n_seq_max sequences, a KV type, swa_full,
kv_unified), each sequence's prompt of P tokens in llama_decode calls of n_batch, then 16 decode
steps of one token per sequence, each with only the last token's logits (as llama-cli,
llama-server and llama-cpp-python's Llama do), or every position's where the case says so. Each
process runs under /usr/bin/time -v (its maximum resident set size is the measurement:
interpreter, libraries and llama.cpp together) and reports VmRSS / RssAnon / RssFile after each
stage. The cases whose runner is llama-completion run llama.cpp's own program instead (no Python;
--llama-completion BIN, built from the vendored sources) on a prompt file it tokenizes to P tokens,
with the same settings as flags. It writes testdata/golden/measured_llamacpp_process.json
(versions, CPU, the files' index, the cases; a case --out already holds is kept as measured unless
--remeasure) that tests/test_estimate_measured_llamacpp.cpp checks the estimate's total against.

`table` runs BIN estimate for every golden case (on the GGUFs `measure` left in --dir) and
prints the predicted-vs-measured table that docs/measured_llamacpp.md keeps, with the holes
ggml-alloc leaves under each compute buffer's peak (from --phases, written by
scripts/llamacpp_compute_peak.py check --out).
"""
import argparse
import ctypes
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple, Optional

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
                        E=256, k=8, Ie=2048, shared=1, dense=3, q_lora=1536, kv_lora=512, rope=64, nope=128, vd=128,
                        groups=8, groups_used=4, wscale=2.5),
    # moonshotai/Kimi-K2-Instruct (DeepSeek-V3's layout: sigmoid scores, one expert group)
    "kimi-k2": dict(arch="deepseek2", h=7168, L=61, a=64, I=18432, V=163840, ctx=131072, tied=False,
                    E=384, k=8, Ie=2048, shared=1, dense=1, q_lora=1536, kv_lora=512, rope=64, nope=128, vd=128,
                    groups=1, groups_used=1, wscale=2.827),
    # google/gemma-3-12b-pt (sliding window 1024 on 5 of every 6 layers)
    "gemma3-12b": dict(arch="gemma3", h=3840, L=48, a=16, kv=8, d=256, I=15360, V=262208, ctx=131072, tied=True,
                       swa=1024, swa_every=6),
    # The other families of docs/architectures.md that llama.cpp runs, from the published
    # config.json each testdata/arch/<case>/config.json keeps, with the GGUF keys
    # convert_hf_to_gguf writes for them (llama.cpp's conversion/*.py at this version).
    # Qwen/Qwen2-7B (q/k/v biases; use_sliding_window false: llama.cpp's qwen2 has no window)
    "qwen2-7b": dict(arch="qwen2", h=3584, L=28, a=28, kv=4, d=128, I=18944, V=152064, ctx=131072, tied=False, qkv_bias=True),
    # Qwen/Qwen1.5-MoE-A2.7B (60 experts, top 4, a shared expert with its sigmoid gate)
    "qwen2-moe": dict(arch="qwen2moe", h=2048, L=24, a=16, kv=16, d=128, I=5632, V=151936, ctx=8192, tied=False,
                      qkv_bias=True, E=60, k=4, Ie=1408, shexp=5632),
    # Qwen/Qwen3-8B
    "qwen3-8b": dict(arch="qwen3", h=4096, L=36, a=32, kv=8, d=128, I=12288, V=151936, ctx=40960, tied=False),
    # google/gemma-7b (MHA, head_dim 256)
    "gemma-7b": dict(arch="gemma", h=3072, L=28, a=16, kv=16, d=256, I=24576, V=256000, ctx=8192, tied=True),
    # google/gemma-2-9b (window 4096 on every other layer: llama.cpp's default pattern 2, no key written)
    "gemma2-9b": dict(arch="gemma2", h=3584, L=42, a=16, kv=8, d=256, I=14336, V=256000, ctx=8192, tied=True,
                      swa=4096, softcap=(50.0, 30.0)),
    # microsoft/Phi-3-mini-4k-instruct (fused qkv and gate|up; sliding_window 2047 written,
    # llama.cpp's phi3 turns it off: "Phi SWA is currently disabled")
    "phi3-mini": dict(arch="phi3", h=3072, L=32, a=32, kv=32, d=96, I=8192, V=32064, ctx=4096, tied=False, swa=2047,
                      special_tokens=["<|endoftext|>"]),
    # microsoft/phi-4 (arch phi3; sliding_window null, written as 0)
    "phi4": dict(arch="phi3", h=5120, L=40, a=40, kv=10, d=128, I=17920, V=100352, ctx=16384, tied=False, swa=0),
    # mistralai/Mistral-Nemo-Base-2407 (arch llama; head_dim 128 while hidden / heads = 160)
    "mistral-nemo": dict(arch="llama", h=5120, L=40, a=32, kv=8, d=128, I=14336, V=131072, ctx=1024000, tied=False),
    # mistralai/Mixtral-8x7B-v0.1 (arch llama with experts; experts sized by feed_forward_length)
    "mixtral-8x7b": dict(arch="llama", h=4096, L=32, a=32, kv=8, d=128, I=14336, V=32000, ctx=32768, tied=False,
                         E=8, k=2, Ie=14336, exp_ff_key=False),
    # allenai/OLMo-2-1124-7B (no pre-norms: post-attention and post-MLP norms, q/k norms over all heads)
    "olmo2-7b": dict(arch="olmo2", h=4096, L=32, a=32, kv=32, d=128, I=11008, V=100352, ctx=4096, tied=False),
    # allenai/OLMoE-1B-7B-0924 (64 experts, top 8, experts sized by feed_forward_length)
    "olmoe": dict(arch="olmoe", h=2048, L=16, a=16, kv=16, d=128, I=1024, V=50304, ctx=4096, tied=False,
                  E=64, k=8, Ie=1024, exp_ff_key=False),
    # openai/gpt-oss-20b (window 128 on every other layer, attention sinks, 32 experts with biases)
    "gpt-oss-20b": dict(arch="gpt-oss", h=2880, L=24, a=64, kv=8, d=64, I=2880, V=201088, ctx=131072, tied=False,
                        E=32, k=4, Ie=2880, swa=128),
    # meta-llama/Llama-4-Scout-17B-16E (text: chunked attention 8192 on 3 of 4 layers, llama.cpp's
    # default when no window key is written; 16 experts + a shared one on every layer)
    "llama4-scout": dict(arch="llama4", h=5120, L=48, a=40, kv=8, d=128, I=16384, V=202048, ctx=10485760, tied=False,
                         E=16, k=1, Ie=8192, moe_step=1),
    # meta-llama/Llama-2-7b-hf (MHA: 32 KV heads)
    "llama2-7b": dict(arch="llama", h=4096, L=32, a=32, kv=32, d=128, I=11008, V=32000, ctx=4096, tied=False),
    # llava-hf/llava-1.5-7b-hf's language model (LlamaConfig's defaults under a sparse text_config, 32064 tokens)
    "llava-1.5-7b": dict(arch="llama", h=4096, L=32, a=32, kv=32, d=128, I=11008, V=32064, ctx=4096, tied=False),
    # The language models of two multimodal wrappers, as convert_hf_to_gguf writes them (the
    # vision tower goes to a separate mmproj GGUF): Qwen/Qwen2-VL-7B-Instruct (arch qwen2vl, M-RoPE
    # sections) and mistralai/Mistral-Small-3.1-24B-Instruct-2503 (arch mistral3).
    "qwen2-vl-7b": dict(arch="qwen2vl", h=3584, L=28, a=28, kv=4, d=128, I=18944, V=152064, ctx=32768, tied=False,
                        qkv_bias=True, rope_sections=[16, 24, 24, 0]),
    "mistral3-24b": dict(arch="mistral3", h=5120, L=40, a=32, kv=8, d=128, I=32768, V=131072, ctx=131072, tied=False),
    # ai21labs/Jamba-v0.1 (hybrid: attention on layer 4 of every 8, Mamba otherwise; MoE on odd layers)
    "jamba": dict(arch="jamba", h=4096, L=32, a=32, kv=8, d=128, I=14336, V=65536, ctx=262144, tied=False,
                  E=16, k=2, Ie=14336, exp_ff_key=False, attn_period=8, attn_offset=4, moe_period=2, moe_offset=1,
                  d_conv=4, d_inner=8192, d_state=16, dt_rank=256),
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
    ("kimi-k2", None, "q4_0", "no_alloc", 4096, 1, 512, True, "f16", False, False),
    ("kimi-k2", None, "q4_0", "no_alloc", 4096, 1, 512, False, "f16", False, False),
    # sliding window
    ("gemma3-12b", None, "q4_0", "no_alloc", 8192, 1, 512, True, "f16", False, False),
    ("gemma3-12b", None, "q4_0", "no_alloc", 8192, 1, 512, True, "f16", True, False),
    ("gemma3-12b", None, "q4_0", "no_alloc", 32768, 1, 512, True, "f16", False, False),  # issue 34's 2528 MiB
    ("gemma3-12b", 6, "q4_0", "alloc", 8192, 1, 512, True, "f16", False, False),
    ("gemma3-12b", 6, "q4_0", "alloc", 8192, 1, 512, True, "f16", True, False),
    ("gemma3-12b", 6, "q4_0", "alloc", 4096, 2, 1024, False, "f16", False, False),
    # One GGUF twin per family llama.cpp runs (KV and recurrent state: the caches' own "size ="
    # lines, which the memory-fit mode prints too; a few cut models allocate for real).
    ("qwen2-7b", None, "q4_0", "no_alloc", 8192, 1, 512, True, "f16", False, False),
    ("qwen2-7b", None, "q4_0", "no_alloc", 32768, 1, 512, True, "q8_0", False, False),
    ("qwen2-7b", 2, "q4_0", "alloc", 4096, 1, 512, True, "f16", False, False),
    ("qwen2-moe", None, "q4_0", "no_alloc", 8192, 1, 512, True, "f16", False, False),
    ("qwen2-moe", None, "q4_0", "no_alloc", 4096, 4, 512, True, "q8_0", False, False),
    ("qwen3-8b", None, "q4_0", "no_alloc", 8192, 1, 512, True, "f16", False, False),
    ("qwen3-8b", None, "q4_0", "no_alloc", 32768, 2, 512, True, "q8_0", False, False),
    ("gemma-7b", None, "q4_0", "no_alloc", 8192, 1, 512, True, "f16", False, False),
    ("gemma-7b", None, "q4_0", "no_alloc", 4096, 1, 512, True, "q8_0", False, False),
    ("gemma2-9b", None, "q4_0", "no_alloc", 8192, 1, 512, True, "f16", False, False),
    ("gemma2-9b", None, "q4_0", "no_alloc", 32768, 1, 512, True, "q8_0", False, False),
    ("gemma2-9b", None, "q4_0", "no_alloc", 8192, 1, 512, True, "f16", True, False),
    ("gemma2-9b", None, "q4_0", "no_alloc", 8192, 2, 1024, True, "f16", False, False),
    ("gemma2-9b", 2, "q4_0", "alloc", 8192, 1, 512, True, "f16", False, False),
    ("phi3-mini", None, "q4_0", "no_alloc", 4096, 1, 512, True, "f16", False, False),
    ("phi3-mini", None, "q4_0", "no_alloc", 4096, 2, 512, True, "q8_0", False, False),
    ("phi3-mini", 2, "q4_0", "alloc", 4096, 1, 512, True, "f16", False, False),
    ("phi4", None, "q4_0", "no_alloc", 16384, 1, 512, True, "f16", False, False),
    ("phi4", None, "q4_0", "no_alloc", 8192, 1, 512, True, "q8_0", False, False),
    ("mistral-nemo", None, "q4_0", "no_alloc", 8192, 1, 512, True, "f16", False, False),
    ("mistral-nemo", None, "q4_0", "no_alloc", 65536, 1, 512, True, "q8_0", False, False),
    ("mixtral-8x7b", None, "q4_0", "no_alloc", 8192, 1, 512, True, "f16", False, False),
    ("mixtral-8x7b", None, "q4_0", "no_alloc", 32768, 1, 512, True, "q8_0", False, False),
    ("olmo2-7b", None, "q4_0", "no_alloc", 4096, 1, 512, True, "f16", False, False),
    ("olmo2-7b", None, "q4_0", "no_alloc", 4096, 2, 512, True, "q8_0", False, False),
    ("olmoe", None, "q4_0", "no_alloc", 4096, 1, 512, True, "f16", False, False),
    ("olmoe", None, "q4_0", "no_alloc", 4096, 1, 512, True, "q8_0", False, False),
    ("gpt-oss-20b", None, "q4_0", "no_alloc", 8192, 1, 512, True, "f16", False, False),
    ("gpt-oss-20b", None, "q4_0", "no_alloc", 32768, 1, 512, True, "q8_0", False, False),
    ("gpt-oss-20b", None, "q4_0", "no_alloc", 32768, 1, 512, True, "f16", True, False),
    ("gpt-oss-20b", None, "q4_0", "no_alloc", 8192, 4, 2048, True, "f16", False, False),
    ("gpt-oss-20b", 2, "q4_0", "alloc", 8192, 1, 512, True, "f16", False, False),
    ("llama4-scout", None, "q4_0", "no_alloc", 32768, 1, 512, True, "f16", False, False),
    ("llama4-scout", None, "q4_0", "no_alloc", 131072, 1, 512, True, "q8_0", False, False),
    ("llama4-scout", None, "q4_0", "no_alloc", 32768, 1, 512, True, "f16", True, False),
    ("llama2-7b", None, "q4_0", "no_alloc", 4096, 1, 512, True, "f16", False, False),
    ("llama2-7b", None, "q4_0", "no_alloc", 4096, 4, 512, True, "q8_0", False, False),
    ("llava-1.5-7b", None, "q4_0", "no_alloc", 4096, 1, 512, True, "f16", False, False),
    ("qwen2-vl-7b", None, "q4_0", "no_alloc", 8192, 1, 512, True, "f16", False, False),
    ("mistral3-24b", None, "q4_0", "no_alloc", 32768, 1, 512, True, "f16", False, False),
    ("mistral3-24b", None, "q4_0", "no_alloc", 8192, 2, 512, True, "q8_0", False, False),
    ("jamba", None, "q4_0", "no_alloc", 8192, 1, 512, True, "f16", False, False),
    ("jamba", None, "q4_0", "no_alloc", 32768, 4, 512, True, "q8_0", False, False),
    # The compute buffer's layer phase at a larger micro-batch, where it outgrows the output
    # projection: a fused gate|up (phi3, phi4), routed experts (mixtral, jamba), routed and
    # shared experts (qwen2-moe)
    ("phi3-mini", None, "q4_0", "no_alloc", 4096, 1, 2048, True, "f16", False, False),
    ("phi4", None, "q4_0", "no_alloc", 16384, 1, 2048, True, "f16", False, False),
    ("mixtral-8x7b", None, "q4_0", "no_alloc", 8192, 1, 2048, True, "f16", False, False),
    ("jamba", None, "q4_0", "no_alloc", 8192, 1, 2048, True, "f16", False, False),
    ("qwen2-moe", None, "q4_0", "no_alloc", 8192, 1, 2048, True, "f16", False, False),
    ("olmoe", None, "q4_0", "no_alloc", 4096, 1, 2048, True, "f16", False, False),
    ("mistral-nemo", None, "q4_0", "no_alloc", 8192, 1, 2048, True, "f16", False, False),
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
    """(name, ggml ne) of every tensor, in llama.cpp's names, as convert_hf_to_gguf orders them
    (what each architecture's load_arch_tensors creates, src/models/<arch>.cpp)."""
    h, V = s["h"], s["V"]
    t = [("token_embd.weight", [h, V])]
    for i in range(L):
        t += layer_tensors(s, i)
    t.append(("output_norm.weight", [h]))
    if not s["tied"]:
        t.append(("output.weight", [h, V]))
    return t


def layer_tensors(s, i):
    h, arch, b = s["h"], s["arch"], f"blk.{i}."
    t = []
    if arch != "olmo2":  # OLMo 2 has no pre-norms
        t.append((b + "attn_norm.weight", [h]))
    if arch == "gpt-oss":
        t.append((b + "post_attention_norm.weight", [h]))
    if arch == "deepseek2":
        t += mla_tensors(s, b)
    elif arch == "jamba" and not is_attention_layer(s, i):
        t += mamba_tensors(s, b)
    else:
        t += attention_tensors(s, b)
    if arch not in ("olmo2", "gpt-oss"):  # gpt-oss: the post-attention norm is the MLP's
        t.append((b + "ffn_norm.weight", [h]))
    if is_moe_layer(s, i):
        t += moe_tensors(s, b)
    elif arch == "phi3":  # gate|up fused
        t += [(b + "ffn_down.weight", [s["I"], h]), (b + "ffn_up.weight", [h, 2 * s["I"]])]
    else:
        t += [(b + "ffn_gate.weight", [h, s["I"]]), (b + "ffn_down.weight", [s["I"], h]), (b + "ffn_up.weight", [h, s["I"]])]
    if arch in ("gemma2", "gemma3", "olmo2"):
        t.append((b + "post_ffw_norm.weight", [h]))
    return t


def is_attention_layer(s, i):
    """Jamba: attention on layer attn_offset of every attn_period (convert's head_count_kv vector)."""
    return "attn_period" not in s or (i >= s["attn_offset"] and (i - s["attn_offset"]) % s["attn_period"] == 0)


def is_moe_layer(s, i):
    if "E" not in s:
        return False
    if s["arch"] == "deepseek2":
        return i >= s["dense"]
    if "moe_period" in s:
        return i >= s["moe_offset"] and (i - s["moe_offset"]) % s["moe_period"] == 0
    if "moe_step" in s:
        return (i + 1) % s["moe_step"] == 0
    return True


def mla_tensors(s, b):
    h, a, hk = s["h"], s["a"], s["nope"] + s["rope"]
    t = []
    if s["q_lora"]:
        t += [(b + "attn_q_a.weight", [h, s["q_lora"]]), (b + "attn_q_a_norm.weight", [s["q_lora"]]),
              (b + "attn_q_b.weight", [s["q_lora"], a * hk])]
    else:
        t.append((b + "attn_q.weight", [h, a * hk]))
    return t + [(b + "attn_kv_a_mqa.weight", [h, s["kv_lora"] + s["rope"]]), (b + "attn_kv_a_norm.weight", [s["kv_lora"]]),
                (b + "attn_k_b.weight", [s["nope"], s["kv_lora"], a]), (b + "attn_v_b.weight", [s["kv_lora"], s["vd"], a]),
                (b + "attn_output.weight", [a * s["vd"], h])]


def attention_tensors(s, b):
    h, arch = s["h"], s["arch"]
    q, kvd = s["a"] * s["d"], s["kv"] * s["d"]
    if arch == "phi3":
        t = [(b + "attn_qkv.weight", [h, q + 2 * kvd])]
    else:
        t = [(b + "attn_q.weight", [h, q]), (b + "attn_k.weight", [h, kvd]), (b + "attn_v.weight", [h, kvd])]
    if s.get("qkv_bias") or arch == "gpt-oss":
        t += [(b + "attn_q.bias", [q]), (b + "attn_k.bias", [kvd]), (b + "attn_v.bias", [kvd])]
    t.append((b + "attn_output.weight", [q, h]))
    if arch == "gpt-oss":
        t += [(b + "attn_output.bias", [h]), (b + "attn_sinks.weight", [s["a"]])]
    if arch in ("qwen3moe", "qwen3", "gemma3"):
        t += [(b + "attn_q_norm.weight", [s["d"]]), (b + "attn_k_norm.weight", [s["d"]])]
    if arch in ("olmo2", "olmoe"):  # over the whole projection
        t += [(b + "attn_q_norm.weight", [q]), (b + "attn_k_norm.weight", [kvd])]
    if arch in ("gemma2", "gemma3", "olmo2"):
        t.append((b + "post_attention_norm.weight", [h]))
    return t


def mamba_tensors(s, b):
    h, di, ds, dt, dc = s["h"], s["d_inner"], s["d_state"], s["dt_rank"], s["d_conv"]
    return [(b + "ssm_in.weight", [h, 2 * di]), (b + "ssm_conv1d.weight", [dc, di]), (b + "ssm_conv1d.bias", [di]),
            (b + "ssm_x.weight", [di, dt + 2 * ds]), (b + "ssm_dt_norm.weight", [dt]), (b + "ssm_dt.weight", [dt, di]),
            (b + "ssm_dt.bias", [di]), (b + "ssm_b_norm.weight", [ds]), (b + "ssm_c_norm.weight", [ds]),
            (b + "ssm_a", [ds, di]), (b + "ssm_d", [di]), (b + "ssm_out.weight", [di, h])]


def moe_tensors(s, b):
    h, E, Ie, arch = s["h"], s["E"], s["Ie"], s["arch"]
    t = [(b + "ffn_gate_inp.weight", [h, E])]
    if arch == "gpt-oss":
        t.append((b + "ffn_gate_inp.bias", [E]))
    t += [(b + "ffn_gate_exps.weight", [h, Ie, E]), (b + "ffn_down_exps.weight", [Ie, h, E]), (b + "ffn_up_exps.weight", [h, Ie, E])]
    if arch == "gpt-oss":
        t += [(b + "ffn_gate_exps.bias", [Ie, E]), (b + "ffn_down_exps.bias", [h, E]), (b + "ffn_up_exps.bias", [Ie, E])]
    if arch == "deepseek2":
        if s["q_lora"]:
            t.append((b + "exp_probs_b.bias", [E]))
        sh = Ie * s["shared"]
        t += [(b + "ffn_gate_shexp.weight", [h, sh]), (b + "ffn_down_shexp.weight", [sh, h]), (b + "ffn_up_shexp.weight", [h, sh])]
    if arch == "qwen2moe":
        sh = s["shexp"]
        t += [(b + "ffn_gate_inp_shexp.weight", [h]), (b + "ffn_gate_shexp.weight", [h, sh]),
              (b + "ffn_down_shexp.weight", [sh, h]), (b + "ffn_up_shexp.weight", [h, sh])]
    if arch == "llama4":  # the shared expert is as wide as a routed one
        t += [(b + "ffn_gate_shexp.weight", [h, Ie]), (b + "ffn_down_shexp.weight", [Ie, h]), (b + "ffn_up_shexp.weight", [h, Ie])]
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
        w.add_expert_weights_scale(s.get("wscale", 1.0))
        if "groups" in s:  # convert_hf_to_gguf: n_group, topk_group
            w.add_expert_group_count(s["groups"])
            w.add_expert_group_used_count(s["groups_used"])
    else:
        # Jamba: one KV head count per layer, 0 on the Mamba layers (convert's n_kv_vec)
        w.add_head_count_kv([s["kv"] if is_attention_layer(s, i) else 0 for i in range(L)] if arch == "jamba" else s["kv"])
        w.add_key_length(s["d"])
        w.add_value_length(s["d"])
        w.add_rope_dimension_count(s["d"])
    if "E" in s:
        w.add_expert_count(s["E"])
        w.add_expert_used_count(s["k"])
        if s.get("exp_ff_key", True):  # mixtral, olmoe, jamba: experts sized by feed_forward_length
            w.add_expert_feed_forward_length(s["Ie"])
    if "shexp" in s:
        w.add_expert_shared_feed_forward_length(s["shexp"])
    if "moe_step" in s:
        w.add_interleave_moe_layer_step(s["moe_step"])
    if "swa" in s:
        w.add_sliding_window(s["swa"])
    if "swa_every" in s:
        w.add_uint32(f"{arch}.attention.sliding_window_pattern", s["swa_every"])
    if "softcap" in s:
        w.add_attn_logit_softcapping(s["softcap"][0])
        w.add_final_logit_softcapping(s["softcap"][1])
    if "rope_sections" in s:
        w.add_rope_dimension_sections(s["rope_sections"])
    if "d_inner" in s:
        w.add_ssm_conv_kernel(s["d_conv"])
        w.add_ssm_inner_size(s["d_inner"])
        w.add_ssm_state_size(s["d_state"])
        w.add_ssm_time_step_rank(s["dt_rank"])
    from make_bench_gguf import placeholder_vocab  # scripts/ is this script's sys.path[0]
    placeholder_vocab(w, s["V"], s.get("special_tokens", []))
    fallback = {QT.Q4_K: QT.Q5_0}
    total = 0
    for tname, ne in tensors_of(s, L):
        t = qt if len(ne) > 1 and "gate_inp" not in tname and not tname.endswith(".bias") else QT.F32
        if t == QT.Q4_K and ne[0] % 256:
            t = fallback[t]
        if ne[0] % gguf.GGML_QUANT_SIZES[t][0]:  # rows of whole blocks only (Mamba's conv and A)
            t = QT.F32
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

LINE = re.compile(r"(\w+):\s+(\S+)\s+(model|KV|RS|output|compute) buffer size =\s+([0-9.]+) MiB")
# A cache's own count (the bytes of its tensors, printed in the memory-fit mode too):
# "llama_kv_cache: size = 512.00 MiB (  4096 cells,  32 layers,  1/1 seqs), K (f16): ..."
# "llama_memory_recurrent: size = 16.62 MiB (1 cells, 32 layers, 1 seqs 0 rs_seq), R (f32): ..."
CACHE = re.compile(r"(llama_kv_cache|llama_memory_recurrent): size =\s+([0-9.]+) MiB \(\s*(\d+) cells,\s+(\d+) layers,\s+(\d+)")


def llama_cpu(repack):
    """llama_cpp with its log captured (the list the lines go to, and the callback, which the
    caller keeps alive while llama.cpp may log) and CPU model params (repacking as asked)."""
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
    return L, logs, on_log, mp


def run_case(path, mode, ctx, nseq, ub, fa, kv, swa_full, repack):
    """In this (fresh) process: load, make a context, return llama.cpp's buffer lines."""
    L, logs, _keep, mp = llama_cpu(repack)
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
        key = {"model": f"model_{buf}", "KV": "kv", "RS": "rs", "output": "output", "compute": "compute"}[kind]
        if mode == "no_alloc" and kind in ("model", "KV"):
            continue  # dummy buffers in the memory-fit mode
        out[key] = round(out.get(key, 0.0) + mib, 2)  # the SWA cache's KV line adds to the other
    sysinfo = L.llama_print_system_info().decode(errors="replace").strip()
    out["_log"] = [l for l in "".join(logs).splitlines() if "buffer size" in l or "cells" in l or "n_ctx" in l]
    out["_system"] = sysinfo
    return out


def index_of(path):
    """The file as gguf-py reads it: metadata (token arrays as their length) and the whole tensor
    table [name, ggml type, ne, absolute offset, bytes] (every layer: the estimate sizes the KV
    cache per decoder layer it finds)."""
    import gguf
    r = gguf.GGUFReader(str(path))
    md = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.alignment":
            continue
        v = f.contents()
        if isinstance(v, list) and len(v) > 64:
            md[k] = {"array": "string" if f.types[-1] == gguf.GGUFValueType.STRING else "number", "length": len(v)}
        else:
            md[k] = v
    ts = [[t.name, int(t.tensor_type), [int(x) for x in t.shape], int(t.data_offset), int(t.n_bytes)] for t in r.tensors]
    return {"bytes": path.stat().st_size, "metadata": md, "tensors": ts}


def dumps(doc):
    """JSON with one line per tensor row (the golden holds thousands)."""
    rows = []
    for f in doc["files"].values():
        for i, t in enumerate(f["tensors"]):
            rows.append(json.dumps(t, separators=(",", ":")))
            f["tensors"][i] = f"@@{len(rows) - 1}@@"
    text = json.dumps(doc, indent=1)
    return re.sub(r'"@@(\d+)@@"', lambda m: rows[int(m.group(1))], text) + "\n"


def caches_of(log):
    """The caches' "size =" lines of a case's log: llama_kv_cache (one per cache; an iswa model
    has the non-SWA one, then the SWA one) and llama_memory_recurrent."""
    out = {"llama_kv_cache": [], "llama_memory_recurrent": []}
    for line in log:
        m = CACHE.search(line)
        if m:
            out[m.group(1)].append({"mib": float(m.group(2)), "cells": int(m.group(3)), "layers": int(m.group(4)),
                                    "seqs": int(m.group(5))})
    return out["llama_kv_cache"], out["llama_memory_recurrent"]


def measure(args):
    """Every case of CASES into --out. A case the golden at --out already holds is kept as
    measured (--remeasure: run it again): the extra buffer types llama.cpp picks follow the CPU
    (an AMX machine adds an "AMX" model buffer to the repacked cases), so the golden keeps each
    case from the machine that measured it, and a newly measured case names its CPU when it is
    not the golden's."""
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    old = json.loads(Path(args.out).read_text()) if Path(args.out).exists() and not args.remeasure else None
    kept = {r["name"]: r for r in old["cases"]} if old else {}
    system = old["system_info"] if old else None
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
        if case_name(c) in kept:
            row = kept[case_name(c)]
            row["kv_caches"], row["rs_caches"] = caches_of(row["log"])
            rows.append(row)
            continue
        print(f"== {case_name(c)}", file=sys.stderr)
        r = subprocess.run([sys.executable, __file__, "_case", str(path), mode, str(ctx), str(nseq), str(ub), str(int(fa)), kv,
                            str(int(swa_full)), str(int(repack))], capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout[-3000:], r.stderr[-3000:], file=sys.stderr)
            sys.exit(f"case failed: {case_name(c)}")
        got = json.loads(r.stdout.strip().splitlines()[-1])
        print("   " + json.dumps({k: v for k, v in got.items() if not k.startswith("_")}), file=sys.stderr)
        kvc, rsc = caches_of(got["_log"])
        row = {"name": case_name(c), "model": m, "layers": layers, "weights": wt, "mode": mode, "context": ctx,
               "sequences": nseq, "ubatch": ub, "flash_attention": fa, "kv_type": kv, "swa_full": swa_full,
               "repack": repack, "file": path.name, "measured_mib": {k: v for k, v in got.items() if not k.startswith("_")},
               "kv_caches": kvc, "rs_caches": rsc, "log": got["_log"]}
        system = system or got["_system"]
        if got["_system"] != system:
            row["system_info"] = got["_system"]
        rows.append(row)
    import llama_cpp
    files = {f: index_of(d / f) for f in sorted({r["file"] for r in rows})}
    doc = {"llama_cpp_python": llama_cpp.__version__, "system_info": system, "files": files, "cases": rows}
    Path(args.out).write_text(dumps(doc))
    print(f"wrote {args.out}: {len(rows)} cases", file=sys.stderr)


COMPONENTS = [("model_CPU_Mapped", "weights", "CPU_Mapped"), ("model_CPU_REPACK", "weights_repacked", "CPU_REPACK"),
              ("kv", "kv_cache", "KV"), ("output", "logits", "output"), ("compute", "activations", "compute")]


def table(args):
    """BIN estimate for every golden case, on the GGUFs in --dir: a Markdown table."""
    g = json.loads(Path(args.golden).read_text())
    # the holes ggml-alloc leaves under the compute buffer's peak (scripts/llamacpp_compute_peak.py)
    phases = {r["name"]: r for r in json.loads(Path(args.phases).read_text())["cases"]} if Path(args.phases).exists() else {}

    def holes(name):
        p = phases.get(name)
        if not p:
            return ""
        output = p["output_top"] is not None and p["output_top"] > p["layers_top"]
        return f"{(p['output_top'] - p['output_live']) if output else (p['layers_top'] - p['layers_live']):.2f}"

    out = [f"llama-cpp-python {g['llama_cpp_python']}, CPU: `{g['system_info'][:160]}`", "",
           "| case | buffer | llama.cpp MiB | estimate MiB | diff | holes at the peak MiB |", "|---|---|---:|---:|---:|---:|"]
    for c in g["cases"]:
        cmd = [args.bin, "estimate", str(Path(args.dir) / c["file"]), "--runtime", "llama.cpp", "--device", "cpu", "--context",
               str(c["context"]), "--batch", str(c["sequences"]), "--ubatch", str(c["ubatch"]), "--prefill-chunk",
               str(max(c["ubatch"], 2048)), "--kv-dtype", c["kv_type"], "--attention", "flash" if c["flash_attention"] else "eager",
               "--json"]
        if c["swa_full"]:
            cmd.append("--swa-full")
        if not c["repack"]:
            cmd.append("--no-repack")
        doc = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
        # the compute buffer as llama.cpp reserves it (activations: the part a run writes)
        est = dict(doc["component_bytes"], activations=doc["llamacpp_compute_buffer_bytes"])
        rows = [(label, c["measured_mib"][log] + (c["measured_mib"].get("rs", 0) if log == "kv" else 0), comp)
                for log, comp, label in COMPONENTS if log in c["measured_mib"]]
        if "kv" not in c["measured_mib"]:  # the memory-fit mode: the caches' own size lines
            caches = c.get("kv_caches", []) + c.get("rs_caches", [])
            rows.insert(0, ("KV" + (" + RS" if c.get("rs_caches") else "") + " (size lines)", sum(x["mib"] for x in caches),
                            "kv_cache"))
        for label, got, comp in rows:
            pred = est.get(comp, 0) / MiB
            d = (pred - got) / got * 100 if got else 0.0
            out.append(f"| {c['name']} | {label} | {got:.2f} | {pred:.2f} | {d:+.1f} % | {holes(c['name']) if comp == 'activations' else ''} |")
    out += ["", f"{len(g['cases'])} cases."]
    print("\n".join(out))


# --- the whole process ---------------------------------------------------------------------

class ProcessCase(NamedTuple):
    """One run: the GGUF in --gguf-dir, the context and the prompt per sequence (16 tokens are
    decoded after it: the prompt + 16 fill the context where P = context - 16), llama_decode's
    n_batch and n_ubatch, flash attention, repacking, every position's logits or the last
    token's; the sequences (n_seq_max: each its own prompt, decoded side by side), the KV type
    (K and V alike), swa_full (None: llama_context_default_params's, on), kv_unified, and the
    program: llama-cpp-python ("python") or llama.cpp's llama-completion (--llama-completion)."""
    file: str
    context: int
    prompt: int
    batch: int
    ubatch: int
    flash: bool
    repack: bool
    all_logits: bool = False
    seqs: int = 1
    kv: str = "f16"
    swa_full: Optional[bool] = None
    unified: bool = False
    runner: str = "python"


P = ProcessCase
PROCESS_CASES = [
    P("smol135m-q8_0", 2048, 1500, 2048, 512, True, True),
    P("smol135m-q8_0", 2048, 2032, 2048, 512, False, True),
    P("smol135m-q8_0", 8192, 100, 2048, 512, True, True),
    P("smol135m-q8_0", 1024, 1008, 1024, 512, True, True, all_logits=True),
    P("smol135m-f16", 4096, 4080, 2048, 512, True, True),
    P("smol135m-q4_k", 1024, 1008, 256, 256, True, True),
    P("smol135m-q4_k", 1024, 1008, 256, 256, True, False),
    P("llama1b-q4_0", 2048, 2032, 2048, 512, True, True),
    P("llama1b-q4_0", 2048, 2032, 2048, 512, True, False),
    P("llama1b-q4_k", 1024, 1008, 512, 128, True, True),
    P("llama1b-q8_0", 4096, 4080, 2048, 1024, True, True),
    P("llama1b-f16", 1024, 1008, 1024, 512, False, True),
    P("qwen3moe1b-q4_k", 2048, 2032, 2048, 512, True, True),
    P("qwen3moe1b-q8_0", 1024, 1008, 1024, 256, False, True),
    P("qwen3moe1b-f16", 1024, 300, 1024, 512, True, True),
    # Several sequences: one KV stream each, or one unified stream (kv_unified)
    P("smol135m-q8_0", 1024, 1008, 2048, 512, True, True, seqs=4),
    P("smol135m-q8_0", 1024, 1008, 2048, 512, True, True, seqs=4, unified=True),
    P("llama1b-q4_0", 1024, 1008, 2048, 512, True, True, seqs=4),
    P("qwen3moe1b-q4_k", 512, 496, 1024, 256, False, True, seqs=2),
    # A quantized KV cache (flash attention: llama.cpp needs it for a quantized V)
    P("smol135m-q8_0", 4096, 4080, 2048, 512, True, True, kv="q8_0"),
    P("llama1b-q4_0", 2048, 2032, 2048, 512, True, True, kv="q8_0"),
    P("llama1b-q8_0", 2048, 2032, 2048, 512, True, True, kv="q4_0"),
    # A sliding-window model (Gemma-3-270M's shape): llama_context_default_params's swa_full
    # (on) and off
    P("gemma3_270m-q8_0", 4096, 4080, 2048, 512, True, True),
    P("gemma3_270m-q8_0", 4096, 4080, 2048, 512, True, True, swa_full=False),
    P("gemma3_270m-q8_0", 2048, 2032, 2048, 512, False, True, swa_full=False),
    # llama.cpp's own program, no Python (common_params' defaults: swa_full off)
    P("smol135m-q8_0", 2048, 2032, 2048, 512, True, True, runner="llama-completion"),
    P("llama1b-q4_0", 2048, 2032, 2048, 512, True, True, runner="llama-completion"),
    P("gemma3_270m-q8_0", 4096, 4080, 2048, 512, True, True, swa_full=False, runner="llama-completion"),
]
PROCESS_DECODE = 16
PROCESS_THREADS = 2
# What a program without Python holds besides llama.cpp's state (docs/measured_llamacpp.md):
# the estimate's `--overhead python_runtime=` for the llama-completion cases.
LLAMA_CPP_PROGRAM_RUNTIME = "7M"


def process_case_name(c):
    parts = [c.file, f"ctx{c.context}", f"prompt{c.prompt}", f"b{c.batch}", f"ub{c.ubatch}", "fa" if c.flash else "nofa",
             "repack" if c.repack else "no-repack"]
    parts += ["all-logits"] if c.all_logits else []
    parts += [f"np{c.seqs}"] if c.seqs > 1 else []
    parts += [f"kv-{c.kv}"] if c.kv != "f16" else []
    parts += [] if c.swa_full is None else ["swa-full" if c.swa_full else "no-swa-full"]
    parts += ["unified"] if c.unified else []
    return " ".join(parts + ([c.runner] if c.runner != "python" else []))


def rss_now():
    """This process's resident memory (MiB, /proc/self/status): all, anonymous, file pages."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key = line.split(":")[0]
        if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
            out[key] = round(int(line.split()[1]) / 1024, 2)
    return out


KV_TYPES = {"f16": 1, "q8_0": 8, "q4_0": 2, "f32": 0}


def prompt_ids(seq, prompt, vocab):
    """Sequence seq's prompt: token ids spread over the vocabulary, a different list per sequence."""
    return [(i * 7919 + 3 + seq * 104723) % vocab for i in range(prompt)]


def run_process_case(path, c):
    """In this (fresh) process: what llama-cpp-python holds after each stage of a run."""
    stages = {"start": rss_now()}
    import llama_cpp  # noqa: F401 (its import is a stage of its own)
    stages["import"] = rss_now()
    L, logs, _keep, mp = llama_cpu(c.repack)
    model = L.llama_model_load_from_file(str(path).encode(), mp)
    if not model:
        sys.exit("".join(logs[-20:]) + f"\nllama.cpp could not load {path}")
    stages["load"] = rss_now()
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = c.context * c.seqs, c.batch, c.ubatch, c.seqs
    cp.n_threads = cp.n_threads_batch = PROCESS_THREADS
    cp.flash_attn_type = 1 if c.flash else 0
    cp.type_k = cp.type_v = KV_TYPES[c.kv]
    if c.swa_full is not None:
        cp.swa_full = c.swa_full
    cp.kv_unified = c.unified
    cp.no_perf = True
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        sys.exit("".join(logs[-20:]) + "\nllama.cpp could not create a context")
    stages["context"] = rss_now()
    vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    batch = L.llama_batch_init(c.batch, 0, c.seqs)

    def decode(tokens):  # [(sequence, position, token, logits)]
        batch.n_tokens = len(tokens)
        for i, (seq, pos, t, want) in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = t, pos, 1, 1 if c.all_logits or want else 0
            batch.seq_id[i][0] = seq
        if L.llama_decode(ctx, batch) != 0:
            sys.exit(f"llama_decode failed at {tokens[0][:2]}")

    # The prompts one sequence after another, in llama_decode calls of n_batch tokens.
    todo = [(s, i, t, i == c.prompt - 1) for s in range(c.seqs) for i, t in enumerate(prompt_ids(s, c.prompt, vocab))]
    for at in range(0, len(todo), c.batch):
        decode(todo[at:at + c.batch])
    stages["prefill"] = rss_now()
    for i in range(PROCESS_DECODE):
        decode([(s, c.prompt + i, (i * 104729 + 5 + s) % vocab, True) for s in range(c.seqs)])
    stages["decode"] = rss_now()
    return {"stages": stages, "buffers_mib": buffers_of("".join(logs)),
            "system_info": L.llama_print_system_info().decode(errors="replace").strip()}


def buffers_of(log):
    """llama.cpp's buffer lines ("CPU KV": MiB; an iswa model's two KV lines added up)."""
    out = {}
    for m in map(LINE.search, log.splitlines()):
        if m:
            key = m.group(2) + " " + m.group(3)
            out[key] = round(out.get(key, 0.0) + float(m.group(4)), 2)
    return out


def completion_prompt(path, n):
    """A prompt text that llama-completion tokenizes to exactly n tokens, BOS included: "a"s, each
    its own byte token in the placeholder vocabulary (which has no piece of two letters), counted
    with llama.cpp's tokenizer."""
    import llama_cpp as L
    global _quiet  # kept alive: llama.cpp calls it on every log line
    _quiet = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)(lambda *a: None)
    L.llama_log_set(_quiet, None)
    mp = L.llama_model_default_params()
    mp.vocab_only = True
    model = L.llama_model_load_from_file(str(path).encode(), mp)
    ids = (L.llama_token * (2 * n + 64))()
    count = lambda text: L.llama_tokenize(L.llama_model_get_vocab(model), text, len(text), ids, 2 * n + 64, True, True)
    text = b"a" * (2 * n - count(b"a" * n))  # the count is the letters plus a fixed prefix (BOS, the space)
    got = count(text)
    L.llama_model_free(model)
    if got != n:
        sys.exit(f"{path}: the prompt is {got} tokens, not {n}")
    return text.decode()


def completion_command(binary, path, c, prompt_file):
    """llama-completion with the case's settings, as a user would run it (its defaults otherwise)."""
    assert c.seqs == 1 and not c.all_logits and not c.unified
    cmd = [binary, "-m", str(path), "-c", str(c.context), "-b", str(c.batch), "-ub", str(c.ubatch), "-fa", "on" if c.flash else "off",
           "-ctk", c.kv, "-ctv", c.kv, "-t", str(PROCESS_THREADS), "-tb", str(PROCESS_THREADS), "-n", str(PROCESS_DECODE),
           "--ignore-eos", "-no-cnv", "--no-display-prompt", "-lv", "4", "-f", str(prompt_file)]  # -lv 4: the buffer lines
    return cmd + (["--swa-full"] if c.swa_full else []) + ([] if c.repack else ["--no-repack"])


def cpu_name():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "?"


def max_rss_mib(time_v):
    return int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", time_v).group(1)) / 1024


def measure_process_case(args, c, path):
    """One case in a fresh process under /usr/bin/time -v: (its row's measured fields, system info)."""
    if c.runner == "python":
        r = subprocess.run(["/usr/bin/time", "-v", sys.executable, __file__, "_process", str(path), json.dumps(c._asdict())],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"case failed: {process_case_name(c)}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        got = json.loads(r.stdout.strip().splitlines()[-1])
        return {"max_rss_mib": round(max_rss_mib(r.stderr), 2), "stages_mib": got["stages"], "buffers_mib": got["buffers_mib"]}, \
            got["system_info"]
    prompt_file = Path(args.gguf_dir) / f"{c.file}.prompt{c.prompt}.txt"
    prompt_file.write_text(completion_prompt(path, c.prompt))
    cmd = completion_command(args.llama_completion, path, c, prompt_file)
    r = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        sys.exit(f"case failed: {process_case_name(c)}\n{r.stderr[-3000:]}")
    if not re.search(rf"prompt eval time = .* /\s+{c.prompt} tokens", r.stderr):
        sys.exit(f"{process_case_name(c)}: llama-completion did not report a {c.prompt}-token prompt\n{r.stderr[-2000:]}")
    line = " ".join(["llama-completion"] + cmd[1:]).replace(str(path), path.name).replace(str(prompt_file), prompt_file.name)
    return {"max_rss_mib": round(max_rss_mib(r.stderr), 2), "stages_mib": None, "buffers_mib": buffers_of(r.stderr),
            "command": line}, None


def process(args):
    """Every PROCESS_CASES case in a fresh process under /usr/bin/time -v, into --out. A case the
    golden at --out already holds is kept as measured (--remeasure: run every case again)."""
    import llama_cpp
    d = Path(args.gguf_dir)
    old = json.loads(Path(args.out).read_text()) if Path(args.out).exists() and not args.remeasure else None
    kept = {r["name"]: r for r in old["cases"]} if old else {}
    rows, system = [], old["system_info"] if old else None
    for c in PROCESS_CASES:
        name = process_case_name(c)
        row = {"name": name, "file": c.file, "context": c.context, "prompt": c.prompt, "decoded": PROCESS_DECODE, "batch": c.batch,
               "ubatch": c.ubatch, "flash_attention": c.flash, "repack": c.repack, "all_logits": c.all_logits,
               "sequences": c.seqs, "kv_type": c.kv, "swa_full": c.swa_full if c.swa_full is not None else c.runner == "python",
               "kv_unified": c.unified, "runner": c.runner}
        if name in kept:
            rows.append({**row, **{k: v for k, v in kept[name].items() if k not in row}})
            continue
        if c.runner != "python" and not args.llama_completion:
            print(f"== {name}: skipped (no --llama-completion)", file=sys.stderr)
            continue
        print(f"== {name}", file=sys.stderr)
        got, sysinfo = measure_process_case(args, c, d / f"{c.file}.gguf")
        system = system or sysinfo
        rows.append({**row, **got})
        print(f"   max RSS {got['max_rss_mib']:.1f} MiB, " + json.dumps(got["buffers_mib"]), file=sys.stderr)
    files = {f: index_of(d / f"{f}.gguf") for f in sorted({r["file"] for r in rows})}
    doc = {"llama_cpp_python": llama_cpp.__version__, "python": sys.version.split()[0], "cpu": cpu_name(), "system_info": system,
           "threads": PROCESS_THREADS, "files": files, "cases": rows}
    Path(args.out).write_text(dumps(doc))
    print(f"wrote {args.out}: {len(rows)} cases", file=sys.stderr)


def process_table(args):
    """BIN estimate for every case of the process golden, on the GGUFs in --gguf-dir: a Markdown
    table of the estimate's total against the max RSS, with the RSS after each stage."""
    g = json.loads(Path(args.golden).read_text())
    out = [f"llama-cpp-python {g['llama_cpp_python']}, Python {g['python']}, {g['threads']} threads, CPU: {g['cpu']} "
           f"(`{g['system_info']}`)", "",
           "| case | RSS after import / load / context / prefill / decode MiB | max RSS MiB | estimate MiB | diff |",
           "|---|---|---:|---:|---:|"]
    for c in g["cases"]:
        cmd = [args.bin, "estimate", str(Path(args.gguf_dir) / f"{c['file']}.gguf"), "--runtime", "llama.cpp", "--device", "cpu",
               "--context", str(c["context"]), "--batch", str(c["sequences"]), "--prefill-chunk", str(c["batch"]), "--ubatch",
               str(c["ubatch"]), "--attention", "flash" if c["flash_attention"] else "eager", "--kv-dtype", c["kv_type"], "--json"]
        cmd += [] if c["repack"] else ["--no-repack"]
        cmd += ["--all-logits"] if c["all_logits"] else []
        cmd += ["--swa-full"] if c["swa_full"] else []
        cmd += [] if c["runner"] == "python" else ["--overhead", "python_runtime=" + LLAMA_CPP_PROGRAM_RUNTIME]
        est = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)["total_bytes"] / MiB
        stages = c["stages_mib"]
        st = " / ".join(f"{stages[k]['VmRSS']:.0f}" for k in ("import", "load", "context", "prefill", "decode")) if stages else "(no Python)"
        got = c["max_rss_mib"]
        out.append(f"| {c['name']} | {st} | {got:.1f} | {est:.1f} | {(est - got) / got * 100:+.1f} % |")
    print("\n".join(out))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "_process":
        print(json.dumps(run_process_case(sys.argv[2], ProcessCase(**json.loads(sys.argv[3])))))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_case":
        p, mode, ctx, nseq, ub, fa, kv, sf, rp = sys.argv[2:]
        print(json.dumps(run_case(p, mode, int(ctx), int(nseq), int(ub), fa == "1", kv, sf == "1", rp == "1")))
        return
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("measure")
    a.add_argument("--dir", default=os.environ.get("MEASURE_DIR", "/tmp/nunchaku-measure"))
    a.add_argument("--out", default="testdata/golden/measured_llamacpp.json")
    a.add_argument("--remeasure", action="store_true", help="run every case again, not only those --out lacks")
    t = sub.add_parser("table")
    t.add_argument("bin")
    t.add_argument("--dir", default=os.environ.get("MEASURE_DIR", "/tmp/nunchaku-measure"))
    t.add_argument("--golden", default="testdata/golden/measured_llamacpp.json")
    t.add_argument("--phases", default="testdata/golden/llamacpp_compute_phases.json")
    pr = sub.add_parser("process")
    pr.add_argument("--gguf-dir", default="/tmp/bench")
    pr.add_argument("--out", default="testdata/golden/measured_llamacpp_process.json")
    pr.add_argument("--remeasure", action="store_true", help="run every case again, not only those --out lacks")
    pr.add_argument("--llama-completion", help="llama.cpp's llama-completion, for the cases it runs")
    pt = sub.add_parser("process-table")
    pt.add_argument("bin")
    pt.add_argument("--gguf-dir", default="/tmp/bench")
    pt.add_argument("--golden", default="testdata/golden/measured_llamacpp_process.json")
    args = ap.parse_args()
    if args.cmd == "process":
        process(args)
    elif args.cmd == "process-table":
        process_table(args)
    elif args.cmd == "measure":
        measure(args)
    else:
        table(args)


if __name__ == "__main__":
    main()
