#!/usr/bin/env python3
"""Writes tests/hostile/: small checkpoints that each break one rule, and manifest.json
saying what every subcommand must answer (exit code; the nunchaku error code that indexing
and describing the model must raise). The bytes are built here by hand from the format
specs (safetensors, GGUF v3, zip/pickle), so the expectations do not come from nunchaku.
Run from the repository root; commit the output.   python3 scripts/make_hostile.py
"""
import json
import os
import shutil
import struct
import zlib

OUT = "tests/hostile"
entries = []  # (name, bytes or {relname: bytes}, manifest entry)


def add(name, data, code, why, exit_code=2, verify_code=None):
    """One corpus entry: `data` is bytes (a file) or {relname: bytes} (a directory).
    code: the Error code indexing + describing must raise ("" = none); exit_code: what
    inspect, estimate, plan, load and run answer (0: only inspect is run, the others
    need a tokenizer); verify_code: inspect --verify's code."""
    e = {"path": name, "code": code, "exit": exit_code, "why": why}
    if verify_code:
        e["verify_code"] = verify_code
    entries.append((name, data, e))


# ---- safetensors ------------------------------------------------------------------------

def st(header, data=b"", length=None):
    h = header if isinstance(header, bytes) else header.encode()
    n = len(h) if length is None else length
    return struct.pack("<Q", n) + h + data


def entry(dtype, shape, b, e):
    return {"dtype": dtype, "shape": shape, "data_offsets": [b, e]}


def st_json(d, data=b""):
    return st(json.dumps(d, separators=(",", ":")), data)


add("st_too_small.safetensors", b"\x01\x00", "format.unknown", "shorter than the length field")
add("st_header_too_large.safetensors", st("{}", length=2**63), "safetensors.header_too_large", "length 2^63")
add("st_header_out_of_file.safetensors", st("{}", length=1000), "safetensors.header_out_of_file", "length past EOF")
add("st_not_utf8.safetensors", st(b'{"a\xff":1}'), "safetensors.header_not_utf8", "0xFF in a key")
add("st_not_json.safetensors", st('{"a": '), "safetensors.header_not_json", "cut JSON")
add("st_nul.safetensors", st(b"{}\x00\x00"), "safetensors.header_not_json", "NUL padding")
add("st_big_number.safetensors", st('{"__metadata__":1e400}'), "safetensors.header_not_json", "1e400")
add("st_deep.safetensors", st('{"a":' + "[" * 100 + "]" * 100 + "}"), "safetensors.header_too_deep", "100 nested arrays")
add("st_not_object.safetensors", st("[1,2]"), "format.unknown", "an array")
add("st_duplicate.safetensors",
    st('{"w":' + json.dumps(entry("U8", [2], 0, 2)) + ',"w":' + json.dumps(entry("U8", [2], 2, 4)) + "}", b"\0" * 4),
    "safetensors.duplicate_name", "one name twice")
add("st_bad_metadata.safetensors", st_json({"__metadata__": {"epoch": 3}}), "safetensors.bad_metadata", "a number")
add("st_bad_entry.safetensors", st_json({"w": [1]}), "safetensors.bad_entry", "entry is an array")
add("st_unknown_dtype.safetensors", st_json({"w": entry("F7", [2], 0, 2)}, b"\0\0"), "safetensors.unknown_dtype", "F7")
add("st_overflow.safetensors", st_json({"w": entry("U8", [2**32, 2**32], 0, 0)}), "safetensors.overflow", "2^64 elements")
add("st_offsets_max.safetensors", st_json({"w": entry("U8", [0], 2**64 - 1, 7)}), "safetensors.offsets_reversed",
    "data_offsets [2^64-1, 7]")
add("st_size_mismatch.safetensors", st_json({"w": entry("F32", [2], 0, 4)}, b"\0" * 4), "safetensors.size_mismatch",
    "8 bytes of F32 in 4")
add("st_gap.safetensors", st_json({"w": entry("U8", [2], 2, 4)}, b"\0" * 4), "safetensors.offsets_gap", "2 bytes unowned")
add("st_overlap.safetensors", st_json({"a": entry("U8", [4], 0, 4), "b": entry("U8", [2], 2, 4)}, b"\0" * 4),
    "safetensors.offsets_overlap", "b inside a")
add("st_truncated_data.safetensors", st_json({"w": entry("F32", [1000], 0, 4000)}, b"\0" * 100),
    "safetensors.data_out_of_file", "data cut short")
add("st_not_covered.safetensors", st_json({"w": entry("U8", [2], 0, 2)}, b"\0" * 10), "safetensors.data_not_covered",
    "trailing bytes")
# A name that would drive a terminal: ESC sequences, BEL, newlines, a forged log line.
evil = "evil\x1b[2J\x1b]0;owned\x07\nnunchaku: error: forged\r"
add("st_escape_name.safetensors", st_json({evil: entry("F7", [2], 0, 2)}, b"\0\0"), "safetensors.unknown_dtype",
    "control characters in the tensor name")


# ---- GGUF ---------------------------------------------------------------------------------
U32, I32, F32, BOOL, STR, ARR, U64 = 4, 5, 6, 7, 8, 9, 10


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def kv(key, t, value):
    out = gstr(key) + struct.pack("<I", t)
    if t == STR:
        return out + gstr(value)
    fmt = {U32: "<I", I32: "<i", F32: "<f", BOOL: "<B", U64: "<Q"}[t]
    return out + struct.pack(fmt, value)


def kv_arr(key, t, values):
    out = gstr(key) + struct.pack("<IIQ", ARR, t, len(values))
    for v in values:
        out += gstr(v) if t == STR else struct.pack({U32: "<I", I32: "<i", F32: "<f"}[t], v)
    return out


def gguf(kvs, tensors, align=32, version=3, magic=b"GGUF", n_kv=None, n_tensors=None):
    """tensors: (name, ne list, ggml type, data bytes); data laid out in order, aligned."""
    head = magic + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                               len(kvs) if n_kv is None else n_kv)
    head += b"".join(kvs)
    infos, data, off = b"", b"", 0
    for name, ne, t, blob in tensors:
        infos += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", t, off)
        pad = (-len(blob)) % align
        data += blob + b"\0" * pad
        off += len(blob) + pad
    body = head + infos
    body += b"\0" * ((-len(body)) % align)
    return body + data


def f32s(n, v=0.01):
    return struct.pack("<%df" % n, *([v] * n))


def llama_gguf(over=None, drop=(), layers=2, vocab=32, hidden=8, heads=2, kv_heads=2, ff=16):
    """A well-formed 2-layer llama GGUF with tiny F32 weights; `over` replaces KVs."""
    hd = hidden // heads
    meta = {
        "general.architecture": (STR, "llama"),
        "llama.block_count": (U32, layers),
        "llama.embedding_length": (U32, hidden),
        "llama.feed_forward_length": (U32, ff),
        "llama.attention.head_count": (U32, heads),
        "llama.attention.head_count_kv": (U32, kv_heads),
        "llama.context_length": (U32, 64),
        "llama.rope.freq_base": (F32, 10000.0),
        "llama.rope.dimension_count": (U32, hd),
        "llama.attention.layer_norm_rms_epsilon": (F32, 1e-5),
    }
    meta.update(over or {})
    kvs = [kv(k, t, v) for k, (t, v) in meta.items() if k not in drop]
    T = [("token_embd.weight", [hidden, vocab], 0, f32s(hidden * vocab))]
    for i in range(2):
        p = "blk.%d." % i
        T += [(p + "attn_norm.weight", [hidden], 0, f32s(hidden, 1.0)),
              (p + "attn_q.weight", [hidden, hidden], 0, f32s(hidden * hidden)),
              (p + "attn_k.weight", [hidden, kv_heads * hd], 0, f32s(hidden * kv_heads * hd)),
              (p + "attn_v.weight", [hidden, kv_heads * hd], 0, f32s(hidden * kv_heads * hd)),
              (p + "attn_output.weight", [hidden, hidden], 0, f32s(hidden * hidden)),
              (p + "ffn_norm.weight", [hidden], 0, f32s(hidden, 1.0)),
              (p + "ffn_gate.weight", [hidden, ff], 0, f32s(hidden * ff)),
              (p + "ffn_up.weight", [hidden, ff], 0, f32s(hidden * ff)),
              (p + "ffn_down.weight", [ff, hidden], 0, f32s(hidden * ff))]
    T += [("output_norm.weight", [hidden], 0, f32s(hidden, 1.0)),
          ("output.weight", [hidden, vocab], 0, f32s(hidden * vocab))]
    return gguf(kvs, T)


arch = [kv("general.architecture", STR, "llama")]
one = [("w", [4], 0, f32s(4))]
add("gguf_bad_magic.gguf", b"GGML" + b"\0" * 60, "format.unknown", "not GGUF (GGML magic)")
add("gguf_v1.gguf", gguf(arch, one, version=1), "gguf.unsupported_version", "version 1")
add("gguf_big_endian.gguf", gguf(arch, one, version=3 << 24), "gguf.big_endian", "byte-swapped version")
add("gguf_kv_count.gguf", gguf(arch, one, n_kv=2**40), "gguf.too_many_kvs", "2^40 KVs claimed")
add("gguf_array_too_long.gguf", gguf([gstr("a") + struct.pack("<IIQ", ARR, U32, 2**60)], []), "gguf.array_too_long",
    "2^60 elements")
add("gguf_string_too_long.gguf", gguf([gstr("a") + struct.pack("<IQ", STR, 2**62)], []), "gguf.string_too_long",
    "2^62-byte string")
add("gguf_duplicate_key.gguf", gguf(arch + arch, one), "gguf.duplicate_key", "one key twice")
add("gguf_duplicate_tensor.gguf", gguf(arch, one + one), "gguf.duplicate_tensor", "one tensor twice")
add("gguf_bad_type.gguf", gguf([gstr("a") + struct.pack("<I", 99)], []), "gguf.bad_value_type", "value type 99")
add("gguf_too_many_dims.gguf", gguf(arch, [("w", [1, 1, 1, 1, 4], 0, f32s(4))]), "gguf.too_many_dims", "5 dims")
add("gguf_unknown_type.gguf", gguf(arch, [("w", [4], 250, f32s(4))]), "gguf.unknown_type", "ggml type 250")
add("gguf_bad_alignment.gguf", gguf(arch + [kv("general.alignment", U32, 3)], one), "gguf.bad_alignment", "alignment 3")
nest = gstr("a") + struct.pack("<I", ARR) + struct.pack("<IQ", ARR, 1) * 40 + struct.pack("<IQ", U32, 0)
add("gguf_nested.gguf", gguf([nest], []), "gguf.nesting_too_deep", "arrays 40 deep")
good = llama_gguf()
add("gguf_control.gguf", good, "", "the well-formed model the gguf_* cases below change one thing of", exit_code=0)
add("gguf_tensor_out_of_file.gguf", good[:-100], "gguf.tensor_out_of_file", "data cut short")
# Inconsistent model metadata: each is a well-formed file that describes a model it is not.
add("gguf_kv_heads_zero.gguf", llama_gguf({"llama.attention.head_count_kv": (U32, 0)}), "model.bad_spec",
    "head_count_kv 0")
add("gguf_kv_heads_3.gguf", llama_gguf({"llama.attention.head_count_kv": (U32, 3)}), "model.bad_spec",
    "3 KV heads for 2 heads")
add("gguf_block_count_1.gguf", llama_gguf({"llama.block_count": (U32, 1)}), "model.bad_spec", "2 layers present")
add("gguf_rope_dim_1000.gguf", llama_gguf({"llama.rope.dimension_count": (U32, 1000)}), "model.bad_spec",
    "rope dims > head_dim 4")
add("gguf_vocab_too_big.gguf", llama_gguf({"llama.vocab_size": (U32, 1000)}), "model.bad_spec", "embedding has 32 rows")
add("gguf_freq_base_0.gguf", llama_gguf({"llama.rope.freq_base": (F32, 0.0)}), "model.bad_spec", "rope base 0")
add("gguf_eps_negative.gguf", llama_gguf({"llama.attention.layer_norm_rms_epsilon": (F32, -1e-5)}), "model.bad_spec",
    "negative epsilon")
add("gguf_context_0.gguf", llama_gguf({"llama.context_length": (U32, 0)}), "model.bad_spec", "context 0")
add("gguf_hidden_mismatch.gguf", llama_gguf({"llama.embedding_length": (U32, 16)}), "model.bad_spec",
    "embedding has 8 columns")


# ---- HF directories: config.json beside a safetensors file ---------------------------------

def hf_dir(config_over):
    hidden, vocab = 8, 32
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
           "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 16,
           "vocab_size": vocab, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "tie_word_embeddings": True}
    cfg.update(config_over)
    shapes = {"model.embed_tokens.weight": [vocab, hidden], "model.norm.weight": [hidden],
              "model.layers.0.input_layernorm.weight": [hidden],
              "model.layers.0.post_attention_layernorm.weight": [hidden],
              "model.layers.0.self_attn.q_proj.weight": [hidden, hidden],
              "model.layers.0.self_attn.k_proj.weight": [hidden, hidden],
              "model.layers.0.self_attn.v_proj.weight": [hidden, hidden],
              "model.layers.0.self_attn.o_proj.weight": [hidden, hidden],
              "model.layers.0.mlp.gate_proj.weight": [16, hidden],
              "model.layers.0.mlp.up_proj.weight": [16, hidden],
              "model.layers.0.mlp.down_proj.weight": [hidden, 16]}
    header, off = {}, 0
    for name in sorted(shapes):
        n = 4
        for d in shapes[name]:
            n *= d
        header[name] = entry("F32", shapes[name], off, off + n)
        off += n
    return {"config.json": json.dumps(cfg, indent=1).encode(), "model.safetensors": st_json(header, b"\0" * off)}


add("hf_control", hf_dir({}), "", "the well-formed model the hf_* cases change one thing of", exit_code=0)
add("hf_kv_heads_zero", hf_dir({"num_key_value_heads": 0}), "model.bad_spec", "num_key_value_heads 0")
add("hf_kv_heads_3", hf_dir({"num_key_value_heads": 3}), "model.bad_spec", "3 does not divide 2")
add("hf_hidden_zero", hf_dir({"hidden_size": 0}), "model.bad_spec", "hidden_size 0")
add("hf_rope_factor_negative", hf_dir({"rope_scaling": {"type": "linear", "factor": -2.0}}), "model.bad_spec",
    "negative rope factor")
add("hf_experts_per_tok", hf_dir({"num_local_experts": 2, "num_experts_per_tok": 3}), "model.bad_spec",
    "3 of 2 experts")


# ---- PyTorch zip / pickle --------------------------------------------------------------------

def zip_archive(entries, crc_override=None):
    """Stored entries as torch.save writes them; crc_override[name] replaces a CRC."""
    out, cdir = b"", b""
    for name, data in entries:
        nb = name.encode()
        crc = (crc_override or {}).get(name, zlib.crc32(data) & 0xFFFFFFFF)
        lho = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0, crc, len(data), len(data), len(nb), 0) + nb + data
        cdir += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0, crc, len(data), len(data), len(nb),
                            0, 0, 0, 0, 0, lho) + nb
    at = len(out)
    out += cdir + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(cdir), at, 0)
    return out


def u(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def tensor_pickle(numel=4):
    # {"w": torch._utils._rebuild_tensor_v2(("storage", FloatStorage, "0", "cpu", numel), 0, (numel,), (1,),
    #                                        False, OrderedDict())}
    j = lambda v: b"J" + struct.pack("<i", v)
    return (b"\x80\x02}(" + u("w") + b"ctorch._utils\n_rebuild_tensor_v2\n((" + u("storage") +
            b"ctorch\nFloatStorage\n" + u("0") + u("cpu") + j(numel) + b"tQ" + j(0) + b"(" + j(numel) + b"t(" +
            j(1) + b"t\x89ccollections\nOrderedDict\n)RtRu.")


floats = struct.pack("<4f", 1, 2, 3, 4)
pkl = tensor_pickle()
add("pt_duplicate_entry.pt", zip_archive([("top/data.pkl", pkl), ("top/data/0", floats), ("top/data/0", b"\xff" * 16)]),
    "pytorch.duplicate_entry", "data/0 twice with different contents")
add("pt_bad_crc.pt", zip_archive([("top/data.pkl", pkl), ("top/data/0", floats)], {"top/data/0": 0x12345678}), "",
    "wrong CRC-32: indexes, fails --verify", exit_code=0, verify_code="pytorch.bad_crc")
evil_pkl = b"\x80\x02}(" + u("w") + b"cos\nsystem\n" + u("touch /tmp/nunchaku-pwned") + b"\x85Ru."
add("pt_os_system.pt", zip_archive([("top/data.pkl", evil_pkl), ("top/data/0", floats)]), "pytorch.forbidden_global",
    "pickle calls os.system")
add("pt_not_zip.pt", b"\x89PNG\r\n\x1a\n" + b"\0" * 64, "format.unknown", "a PNG named .pt")
add("pt_deep.pt", zip_archive([("top/data.pkl", b"\x80\x02" + b"]" * 5000 + b"a" * 4999 + b".")]), "pickle.too_deep",
    "5000 nested lists")


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    for name, data, _ in entries:
        path = os.path.join(OUT, name)
        if isinstance(data, dict):
            os.makedirs(path)
            for rel, b in data.items():
                with open(os.path.join(path, rel), "wb") as f:
                    f.write(b)
        else:
            with open(path, "wb") as f:
                f.write(data)
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump([e for _, _, e in entries], f, indent=1)
        f.write("\n")
    print("%d hostile inputs in %s" % (len(entries), OUT))


if __name__ == "__main__":
    main()
