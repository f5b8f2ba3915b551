"""Random-weight llama GGUFs in the shapes of small real models, for scripts/bench_run.sh.

    python make_bench_gguf.py OUT.gguf SHAPE TYPE

SHAPE: smol135m (hidden 576, 30 layers, 9:3 heads, ffn 1536, vocab 49152, tied, as
SmolLM2-135M), smol360m (960, 32 layers, 15:5, ffn 2560, vocab 49152, tied), llama1b
(2048, 16 layers, 32:8, ffn 8192, vocab 128256, tied, as Llama-3.2-1B), qwen3moe1b (arch
qwen3moe: hidden 1024, 16 layers, 16:4 heads of 64, 64 experts of ffn 512, top 8, vocab 32000,
untied; stacked ffn_*_exps, f32 router and q/k norms, as Qwen3-30B-A3B's Q4_K_M file has them),
gptoss2b (arch gpt-oss with TYPE mxfp4 only: gpt-oss-20b's layer, hidden 2880, 64:8 heads of
64, 32 experts of ffn 2880, top 4, sliding window 128 on every other layer, yarn; 4 layers,
vocab 32000; experts in ggml's MXFP4 blocks with E8M0 scales 2^-10 .. 2^-8, the other
matrices Q8_0, f32 biases, sinks and router, as llama.cpp's MXFP4_MOE files; ~2 GB), gemma3_270m
(arch gemma3, as Gemma-3-270M: hidden 640, 18 layers, 4:1 heads of 256, ffn 2048, vocab 262144,
tied; sliding window 512 on 5 of every 6 layers, q/k norms and the norms after attention and
after the FFN).
TYPE (not gptoss2b): q4_0 q4_1 q5_0 q5_1 q8_0 q4_k q5_k q6_k f16 bf16 f32 (every matrix, the tied
embedding/head too; norms f32). K-quants need rows of a multiple of 256: other rows take
llama.cpp's fallback type (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0), as its quantizer
does for hidden 576 / 960. q4_k_m: llama.cpp's Q4_K_M mix, Q4_K but Q6_K for the tied
embedding/head and for attn_v and ffn_down of the layers its quantizer gives more bits (the
first and last eighth, and every third in between).

Speed only: quantized blocks are random bytes with small valid f16 scales (every value
finite), f16/bf16/f32 values are N(0, 0.02). A placeholder SentencePiece vocabulary
makes llama.cpp load the file; nunchaku ignores it. Writes tensors one at a time, so a
1B model needs little memory.
"""
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT

SHAPES = {
    "smol135m": dict(hidden=576, layers=30, heads=9, kv=3, ffn=1536, vocab=49152),
    "smol360m": dict(hidden=960, layers=32, heads=15, kv=5, ffn=2560, vocab=49152),
    "llama1b": dict(hidden=2048, layers=16, heads=32, kv=8, ffn=8192, vocab=128256),
    # Qwen3-MoE-shaped (scripts/bench_moe.sh): 64 experts, top 8, q/k norms, untied head.
    "qwen3moe1b": dict(hidden=1024, layers=16, heads=16, kv=4, ffn=512, vocab=32000, experts=64, top_k=8),
    # gpt-oss-20b's layer (scripts/bench_experts.sh): MXFP4 experts, 4 of its 24 layers.
    "gptoss2b": dict(hidden=2880, layers=4, heads=64, kv=8, head_dim=64, ffn=2880, vocab=32000, experts=32, top_k=4,
                     window=128),
    # Gemma-3-270M (scripts/measure_llamacpp.py process: a sliding-window model).
    "gemma3_270m": dict(hidden=640, layers=18, heads=4, kv=1, head_dim=256, ffn=2048, vocab=262144, window=512,
                        window_pattern=6),
}
TYPES = {"q4_k_m": QT.Q4_K, "q4_0": QT.Q4_0, "q4_1": QT.Q4_1, "q5_0": QT.Q5_0, "q5_1": QT.Q5_1, "q8_0": QT.Q8_0, "q4_k": QT.Q4_K,
         "q5_k": QT.Q5_K, "q6_k": QT.Q6_K, "f16": QT.F16, "bf16": QT.BF16, "f32": QT.F32}
FILE_TYPE = {QT.F32: 0, QT.F16: 1, QT.Q4_0: 2, QT.Q4_1: 3, QT.Q8_0: 7, QT.Q5_0: 8, QT.Q5_1: 9, QT.Q4_K: 15,
             QT.Q5_K: 17, QT.Q6_K: 18, QT.BF16: 32}
FALLBACK = {QT.Q4_K: QT.Q5_0, QT.Q5_K: QT.Q5_1, QT.Q6_K: QT.Q8_0}
# Byte offsets of the f16 scale fields in a block: d (and m / dmin).
SCALES = {QT.Q4_0: [0], QT.Q4_1: [0, 2], QT.Q5_0: [0], QT.Q5_1: [0, 2], QT.Q8_0: [0], QT.Q4_K: [0, 2],
          QT.Q5_K: [0, 2], QT.Q6_K: [208]}


def matrix(rng, rows, cols, qt):
    if qt in (QT.F32, QT.F16, QT.BF16):
        a = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02)
        if qt == QT.F32:
            return a, None
        if qt == QT.F16:
            return a.astype(np.float16), None
        bits = (a.view(np.uint32) >> 16).astype(np.uint16)
        return bits.view(np.uint8).reshape(rows, cols * 2), qt
    bs, nbytes = gguf.GGML_QUANT_SIZES[qt]
    nb = cols // bs
    raw = rng.integers(0, 256, (rows, nb, nbytes), dtype=np.uint8)
    for off in SCALES[qt]:
        d = rng.uniform(0.0005, 0.004, (rows, nb)).astype(np.float16)
        raw[:, :, off:off + 2] = d.view(np.uint8).reshape(rows, nb, 2)
    return raw.reshape(rows, nb * nbytes), qt


def placeholder_vocab(w, n, special=()):
    """A SentencePiece-style vocabulary of n pieces: llama.cpp loads it, nunchaku ignores it.
    `special`: pieces after the byte tokens (llama.cpp's vocab looks some up by name: phi3)."""
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + list(special)
    toks += [f"\u2581t{i}" for i in range(n - len(toks))]
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores([0.0] * len(toks))
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (len(toks) - 259))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)


def mxfp4_experts(rng, experts, rows, cols):
    """ggml MXFP4 blocks (E8M0 scale byte, 16 code bytes) for an [experts, rows, cols] stack."""
    raw = rng.integers(0, 256, (experts * rows, cols // 32, 17), dtype=np.uint8)
    raw[:, :, 0] = rng.integers(117, 120, (experts * rows, cols // 32), dtype=np.uint8)  # 2^-10 .. 2^-8
    return raw.reshape(experts * rows, -1)


def main_gptoss(out, s):
    """gpt-oss with llama.cpp's tensor names (src/models/openai-moe.cpp): ggml MXFP4 experts."""
    rng = np.random.default_rng(0)
    H, L, E, F, hd = s["hidden"], s["layers"], s["experts"], s["ffn"], s["head_dim"]
    Q, KV = s["heads"] * hd, s["kv"] * hd
    arch = "gpt-oss"
    w = gguf.GGUFWriter(out, arch)
    w.add_name("bench-gptoss2b-mxfp4")
    w.add_context_length(4096)
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(F)
    w.add_expert_feed_forward_length(F)
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(150000.0)
    w.add_string(f"{arch}.rope.scaling.type", "yarn")
    w.add_float32(f"{arch}.rope.scaling.factor", 32.0)
    w.add_uint32(f"{arch}.rope.scaling.original_context_length", 4096)
    w.add_uint32(f"{arch}.attention.sliding_window", s["window"])
    w.add_expert_count(E)
    w.add_expert_used_count(s["top_k"])
    w.add_vocab_size(s["vocab"])
    placeholder_vocab(w, s["vocab"])
    w.add_file_type(38)  # MOSTLY_MXFP4_MOE
    q8 = gguf.GGML_QUANT_SIZES[QT.Q8_0]
    mx = gguf.GGML_QUANT_SIZES[QT.MXFP4]
    mats = [("token_embd.weight", s["vocab"], H), ("output.weight", s["vocab"], H)]  # Q8_0
    exps, vecs = [], [("output_norm.weight", [H])]
    for l in range(L):
        b = f"blk.{l}."
        mats += [(b + "attn_q.weight", Q, H), (b + "attn_k.weight", KV, H), (b + "attn_v.weight", KV, H),
                 (b + "attn_output.weight", H, Q)]
        exps += [(b + "ffn_gate_exps.weight", F, H), (b + "ffn_up_exps.weight", F, H), (b + "ffn_down_exps.weight", H, F)]
        vecs += [(b + "attn_norm.weight", [H]), (b + "post_attention_norm.weight", [H]), (b + "attn_q.bias", [Q]),
                 (b + "attn_k.bias", [KV]), (b + "attn_v.bias", [KV]), (b + "attn_output.bias", [H]),
                 (b + "attn_sinks.weight", [s["heads"]]), (b + "ffn_gate_inp.weight", [E, H]),
                 (b + "ffn_gate_inp.bias", [E]), (b + "ffn_gate_exps.bias", [E, F]), (b + "ffn_up_exps.bias", [E, F]),
                 (b + "ffn_down_exps.bias", [E, H])]
    for name, rows, cols in mats:
        w.add_tensor_info(name, [rows, cols * q8[1] // q8[0]], np.dtype(np.uint8), rows * cols * q8[1] // q8[0],
                          raw_dtype=QT.Q8_0)
    for name, rows, cols in exps:
        w.add_tensor_info(name, [E, rows, cols * mx[1] // mx[0]], np.dtype(np.uint8), E * rows * cols * mx[1] // mx[0],
                          raw_dtype=QT.MXFP4)
    for name, shp in vecs:
        w.add_tensor_info(name, shp, np.dtype(np.float32), int(np.prod(shp)) * 4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, rows, cols in mats:
        a, _ = matrix(rng, rows, cols, QT.Q8_0)
        w.write_tensor_data(a)
    for name, rows, cols in exps:
        w.write_tensor_data(mxfp4_experts(rng, E, rows, cols).reshape(E, rows, -1))
    for name, shp in vecs:
        if "norm" in name:
            v = 1.0 + 0.1 * rng.standard_normal(shp)
        else:  # biases, sinks, router
            v = (0.5 if "sinks" in name else 0.05) * rng.standard_normal(shp)
        w.write_tensor_data(v.astype(np.float32))
    w.close()


def main():
    out, shape, tname = sys.argv[1], sys.argv[2], sys.argv[3]
    if shape == "gptoss2b":
        if tname != "mxfp4":
            sys.exit("make_bench_gguf.py: gptoss2b takes TYPE mxfp4 only")
        return main_gptoss(out, SHAPES[shape])
    s, qt = SHAPES[shape], TYPES[tname]
    rng = np.random.default_rng(0)
    hd = s.get("head_dim", s["hidden"] // s["heads"])
    moe, gemma3 = "experts" in s, "window_pattern" in s
    arch = "qwen3moe" if moe else "gemma3" if gemma3 else "llama"
    w = gguf.GGUFWriter(out, arch)
    w.add_name(f"bench-{shape}-{tname}")
    w.add_context_length(2048)
    w.add_embedding_length(s["hidden"])
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(s["ffn"])
    w.add_rope_dimension_count(hd)
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(s["vocab"])
    if moe or gemma3:
        w.add_key_length(hd)
        w.add_value_length(hd)
    if gemma3:
        w.add_sliding_window(s["window"])
        w.add_uint32(f"{arch}.attention.sliding_window_pattern", s["window_pattern"])
    if moe:
        w.add_expert_count(s["experts"])
        w.add_expert_used_count(s["top_k"])
        w.add_expert_feed_forward_length(s["ffn"])
    placeholder_vocab(w, s["vocab"])
    w.add_file_type(FILE_TYPE[qt])

    H, Q, KV, F = s["hidden"], s["heads"] * hd, s["kv"] * hd, s["ffn"]
    E = s.get("experts", 1)
    tensors = [("token_embd.weight", s["vocab"], H)] + ([("output.weight", s["vocab"], H)] if moe else [])
    for l in range(s["layers"]):
        tensors += [(f"blk.{l}.attn_q.weight", Q, H), (f"blk.{l}.attn_k.weight", KV, H),
                    (f"blk.{l}.attn_v.weight", KV, H), (f"blk.{l}.attn_output.weight", H, Q)]
        if moe:  # stacked experts: rows are E x rows of one expert (GGUF ne = [cols, rows, E])
            tensors += [(f"blk.{l}.ffn_gate_exps.weight", E * F, H), (f"blk.{l}.ffn_up_exps.weight", E * F, H),
                        (f"blk.{l}.ffn_down_exps.weight", E * H, F)]
        else:
            tensors += [(f"blk.{l}.ffn_gate.weight", F, H), (f"blk.{l}.ffn_up.weight", F, H),
                        (f"blk.{l}.ffn_down.weight", H, F)]
    post = ("post_attention_norm", "post_ffw_norm") if gemma3 else ()
    norms = [f"blk.{l}.{n}.weight" for l in range(s["layers"]) for n in ("attn_norm", "ffn_norm") + post] + ["output_norm.weight"]
    # f32 vectors and matrices beside the quantized ones: per-head q/k norms, the router.
    extra = [(f"blk.{l}.{n}.weight", [hd]) for l in range(s["layers"]) for n in ("attn_q_norm", "attn_k_norm")] if moe or gemma3 else []
    extra += [(f"blk.{l}.ffn_gate_inp.weight", [E, H]) for l in range(s["layers"])] if moe else []
    shape_of = lambda name, rows, row_len: [E, rows // E, row_len] if "_exps" in name else [rows, row_len]
    # Tensor infos first (shapes only), then the data one tensor at a time.
    n = s["layers"]
    more_bits = lambda l: l < n // 8 or l >= 7 * n // 8 or (l - n // 8) % 3 == 2

    def type_of(name, cols):
        t = qt
        if tname == "q4_k_m" and (name in ("token_embd.weight", "output.weight") or
                                  (name.endswith(("attn_v.weight", "ffn_down.weight", "ffn_down_exps.weight"))
                                                                  and more_bits(int(name.split(".")[1])))):
            t = QT.Q6_K
        return FALLBACK[t] if t in FALLBACK and cols % 256 else t
    for name, rows, cols in tensors:
        t = type_of(name, cols)
        bs, nbytes = gguf.GGML_QUANT_SIZES[t]
        w.add_tensor_info(name, shape_of(name, rows, cols * nbytes // bs), np.dtype(np.uint8), rows * cols * nbytes // bs,
                          raw_dtype=t)
    for name in norms:
        w.add_tensor_info(name, [H], np.dtype(np.float32), H * 4)
    for name, shp in extra:
        w.add_tensor_info(name, shp, np.dtype(np.float32), int(np.prod(shp)) * 4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, rows, cols in tensors:
        a, _ = matrix(rng, rows, cols, type_of(name, cols))
        w.write_tensor_data(np.ascontiguousarray(a).view(np.uint8).reshape(rows, -1))
    for name in norms:
        w.write_tensor_data((1.0 + 0.1 * rng.standard_normal(H)).astype(np.float32))
    for name, shp in extra:
        scale = 1.0 if "norm" in name else 0.05
        w.write_tensor_data(((1.0 if "norm" in name else 0.0) + scale * rng.standard_normal(shp)).astype(np.float32))
    w.close()


if __name__ == "__main__":
    main()
