#!/usr/bin/env python3
"""Writes the committed test fixtures under testdata/models/ with the real Python
libraries, reads every one back with the reference library and records what it
found in testdata/expected/fixtures.json. tests/test_fixtures.cpp compares
nunchaku's index against that file, so the expectations never come from our
own reader.

Needs torch, safetensors, gguf (gguf-py) and a transformers that can use the
installed torch (transformers 5 refuses torch < 2.6; with torch 2.5 use 4.57):

    python3 -m venv --system-site-packages .venv
    .venv/bin/pip install 'transformers==4.57.6'
    HF_HUB_OFFLINE=1 .venv/bin/python scripts/make_testdata.py

No hub access: every model is built from a config object with seeded random
weights. Re-running gives byte-identical files for the same library versions.
"""
from __future__ import annotations

import json
import os
import pickle
import random
import shutil
import struct
import sys
import zipfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import torch

import gguf
import safetensors
from safetensors import safe_open
import transformers
from transformers import (AutoConfig, GemmaConfig, GemmaForCausalLM, Gemma2Config, Gemma2ForCausalLM,
                          GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, MixtralConfig, MixtralForCausalLM, Phi3Config,
                          Phi3ForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

ROOT = Path(__file__).resolve().parent.parent
TESTDATA = ROOT / "testdata"
MODELS = TESTDATA / "models"
EXPECTED = TESTDATA / "expected" / "fixtures.json"
SEED = 1234
SIZE_CAP = 5 * 1024 * 1024  # the limit for everything under testdata/

# torch dtype -> safetensors spelling (the vocabulary of src/format/dtype.hpp)
TORCH_DTYPE = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
               torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
               torch.uint8: "U8", torch.bool: "BOOL"}


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Every parameter gets fresh seeded values, norms included: the default
    all-ones norm weights would make storages byte-identical, and the PyTorch
    expectations below find a tensor's storage record by its bytes."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            p.copy_((torch.randn(p.shape, generator=g, dtype=torch.float32) * 0.05).to(p.dtype))


# ---------------------------------------------------------------- the models

def small(**kw):
    """Shared tiny dimensions for the non-llama architectures (keeps testdata small)."""
    base = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=64, vocab_size=128, max_position_embeddings=128)
    base.update(kw)
    return base


def llama_config(tied: bool = False) -> LlamaConfig:
    return LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       intermediate_size=128, vocab_size=256, max_position_embeddings=256,
                       tie_word_embeddings=tied, rms_norm_eps=1e-5, rope_theta=10000.0)


HF_MODELS = {
    # name: (model class, config, dtype)
    "llama": (LlamaForCausalLM, lambda: llama_config(), torch.float32),
    "qwen2": (Qwen2ForCausalLM, lambda: Qwen2Config(**small(tie_word_embeddings=True)), torch.float32),
    "mixtral": (MixtralForCausalLM,
                lambda: MixtralConfig(**small(num_local_experts=4, num_experts_per_tok=2,
                                              tie_word_embeddings=False)), torch.float32),
    "gpt2": (GPT2LMHeadModel,
             lambda: GPT2Config(n_embd=64, n_layer=2, n_head=4, n_inner=128, vocab_size=128, n_positions=64),
             torch.float32),
    "mistral": (MistralForCausalLM, lambda: MistralConfig(**small(sliding_window=32, head_dim=8)), torch.float32),
    "qwen3": (Qwen3ForCausalLM, lambda: Qwen3Config(**small(head_dim=8, tie_word_embeddings=True)), torch.bfloat16),
    "gemma": (GemmaForCausalLM, lambda: GemmaConfig(**small(head_dim=8)), torch.float16),
    "gemma2": (Gemma2ForCausalLM, lambda: Gemma2Config(**small(head_dim=8, sliding_window=32)), torch.float32),
    "phi3": (Phi3ForCausalLM, lambda: Phi3Config(**small(pad_token_id=0, bos_token_id=1, eos_token_id=2)),
             torch.float32),
}


def build(name: str) -> torch.nn.Module:
    cls, make_config, dtype = HF_MODELS[name]
    seed_all(SEED)
    cfg = make_config()
    model = cls(cfg).eval()
    model = model.to(dtype)
    model.config.torch_dtype = dtype
    randomize(model, SEED + sum(map(ord, name)))
    return model


def write_hf_models() -> LlamaForCausalLM:
    llama = None
    for name in HF_MODELS:
        model = build(name)
        model.save_pretrained(MODELS / name, safe_serialization=True)
        drop_extras(MODELS / name)
        if name == "llama":
            llama = model
    # Same llama weights, sharded: several model-0000i-of-0000N.safetensors + index.
    llama.save_pretrained(MODELS / "llama-sharded", max_shard_size="100KB", safe_serialization=True)
    drop_extras(MODELS / "llama-sharded")
    # ... and as sharded PyTorch .bin (zip-format torch.save per shard) + pytorch_model.bin.index.json.
    llama.save_pretrained(MODELS / "llama-bin", max_shard_size="100KB", safe_serialization=False)
    drop_extras(MODELS / "llama-bin")
    if not (MODELS / "llama-bin" / "pytorch_model.bin.index.json").exists():
        sys.exit("transformers did not write a sharded .bin checkpoint; see the docstring for versions")
    return llama


def drop_extras(d: Path) -> None:
    """generation_config.json is irrelevant to the index; keep the fixtures minimal."""
    (d / "generation_config.json").unlink(missing_ok=True)


# ---------------------------------------------------------------- GGUF

def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF -> llama.cpp rotary layout for q/k rows, as convert_hf_to_gguf.py does."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def write_gguf(llama: LlamaForCausalLM) -> None:
    cfg = llama.config
    sd = {k: v.detach().float().numpy() for k, v in llama.state_dict().items()}
    path = MODELS / "llama-gguf" / "model.gguf"
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_name("nunchaku tiny llama")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    # A byte-level vocabulary: exercises string, float and int arrays.
    w.add_tokenizer_model("llama")
    w.add_token_list([f"<0x{i:02X}>" for i in range(cfg.vocab_size)])
    w.add_token_scores([float(-i) for i in range(cfg.vocab_size)])
    w.add_token_types([int(gguf.TokenType.BYTE)] * cfg.vocab_size)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_array("nunchaku.test.nested", [[1, 2, 3], [4, 5]])  # nested arrays are legal GGUF

    nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    F16, F32 = gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.F32

    def add(name: str, arr: np.ndarray, qtype) -> None:
        arr = np.ascontiguousarray(arr)
        if qtype == F32:
            w.add_tensor(name, arr.astype(np.float32))
        elif qtype == F16:
            w.add_tensor(name, arr.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(arr.astype(np.float32), qtype), raw_dtype=qtype)

    add("token_embd.weight", sd["model.embed_tokens.weight"], F16)
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        mat = F16 if i == 0 else F32  # both plain float widths in one file
        add(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"], F32)
        add(f"blk.{i}.attn_q.weight", permute_qk(sd[p + "self_attn.q_proj.weight"], nh), mat)
        add(f"blk.{i}.attn_k.weight", permute_qk(sd[p + "self_attn.k_proj.weight"], nkv), mat)
        add(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"], mat)
        add(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"], mat)
        add(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"], F32)
        add(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"], mat)
        add(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"], mat)
        add(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"], mat)
    add("output_norm.weight", sd["model.norm.weight"], F32)
    add("output.weight", sd["lm_head.weight"], gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---------------------------------------------------------------- torch.save

def write_torch_files() -> None:
    # The llama model with tied embeddings: lm_head.weight and embed_tokens.weight share one storage.
    seed_all(SEED)
    model = LlamaForCausalLM(llama_config(tied=True)).eval()
    randomize(model, SEED + 7)
    sd = model.state_dict()
    assert sd["lm_head.weight"].data_ptr() == sd["model.embed_tokens.weight"].data_ptr()
    d = MODELS / "llama-pt"
    d.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(d)
    torch.save(sd, d / "model_zip.pt")
    torch.save(sd, d / "model_legacy.pt", _use_new_zipfile_serialization=False)

    # A training-style checkpoint: nested dicts, non-tensor leaves, a tied pair,
    # a transposed view (non-contiguous strides), a row slice (storage offset)
    # and several dtypes.
    g = torch.Generator().manual_seed(SEED + 99)
    emb = torch.randn(16, 8, generator=g)
    proj = torch.randn(12, 8, generator=g)
    ckpt = {
        "model_state_dict": {
            "embed.weight": emb,
            "proj.weight": proj,
            "proj.bias": torch.randn(12, generator=g).to(torch.float16),
            "head.weight": emb,  # tied
            "scale": torch.randn(4, generator=g).to(torch.bfloat16),
            "steps": torch.arange(5, dtype=torch.int64) * 1000 + 17,
        },
        "views": {"proj_t": proj.t(), "embed_tail": emb[3:]},
        "epoch": 3,
        "lr": 0.001,
        "name": "tiny",
    }
    d = MODELS / "pt-nested"
    d.mkdir(parents=True, exist_ok=True)
    torch.save(ckpt, d / "checkpoint.pt")


# ---------------------------------------------------------------- read back

def files_entry(paths) -> list:
    return [{"name": p.name, "bytes": p.stat().st_size} for p in paths]


def expect_safetensors(files: list[Path]) -> dict:
    tensors = {}
    for f in files:
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(n))
        data_start = 8 + n
        with safe_open(str(f), framework="pt") as so:
            for name in so.keys():
                sl = so.get_slice(name)
                h = header[name]
                assert sl.get_dtype() == h["dtype"] and list(sl.get_shape()) == h["shape"]
                b, e = h["data_offsets"]
                tensors[name] = {"dtype": sl.get_dtype(), "shape": list(sl.get_shape()),
                                 "offset": data_start + b, "nbytes": e - b, "file": f.name}
    return tensors


def expect_gguf(path: Path) -> tuple[dict, dict]:
    r = gguf.GGUFReader(str(path))
    tensors = {}
    for t in r.tensors:
        tensors[t.name] = {"dtype": t.tensor_type.name, "shape": [int(x) for x in reversed(t.shape.tolist())],
                           "offset": int(t.data_offset), "nbytes": int(t.n_bytes), "file": path.name}

    def kv(key):
        f = r.fields[key]
        return f.contents() if hasattr(f, "contents") else f.parts[f.data[0]].tolist()[0]

    arch = kv("general.architecture")
    n_embd, n_head = int(kv(f"{arch}.embedding_length")), int(kv(f"{arch}.attention.head_count"))
    config = {"architecture": arch, "hidden_size": n_embd, "num_hidden_layers": int(kv(f"{arch}.block_count")),
              "num_attention_heads": n_head, "num_key_value_heads": int(kv(f"{arch}.attention.head_count_kv")),
              "head_dim": n_embd // n_head, "intermediate_size": int(kv(f"{arch}.feed_forward_length")),
              "vocab_size": int(kv(f"{arch}.vocab_size")), "max_position_embeddings": int(kv(f"{arch}.context_length")),
              # no output.weight would mean tied; this file has one
              "tie_word_embeddings": "output.weight" not in tensors,
              "alignment": int(kv("general.alignment")) if "general.alignment" in r.fields else 32,
              "gguf_version": int(r.fields["GGUF.version"].parts[-1][0]),
              "kv_count": len([k for k in r.fields if not k.startswith("GGUF.")]),
              "nested": kv("nunchaku.test.nested")}
    return tensors, config


class _StorageLister(pickle.Unpickler):
    """Lists the persistent storage ids of a torch pickle (key -> dtype, numel)
    without rebuilding anything; classes become inert name strings."""

    def __init__(self, f):
        super().__init__(f)
        self.storages = {}

    class _Dict(dict):
        def __setstate__(self, state):  # OrderedDict's _metadata attribute; irrelevant here
            pass

    def find_class(self, module, name):
        if name == "OrderedDict":
            return _StorageLister._Dict
        if module == "torch._utils":
            return lambda *a, **k: None
        return f"{module}.{name}"

    def persistent_load(self, pid):
        if isinstance(pid, tuple) and pid and pid[0] == "storage":
            _, stype, key, _loc, numel = pid[:5]
            self.storages[str(key)] = (stype, int(numel))
        return None


STORAGE_ITEMSIZE = {"torch.FloatStorage": 4, "torch.HalfStorage": 2, "torch.BFloat16Storage": 2,
                    "torch.DoubleStorage": 8, "torch.LongStorage": 8, "torch.IntStorage": 4,
                    "torch.ShortStorage": 2, "torch.CharStorage": 1, "torch.ByteStorage": 1,
                    "torch.BoolStorage": 1, "torch.UntypedStorage": 1}


def storage_records(path: Path) -> dict:
    """key -> (absolute data offset, nbytes) of each storage's raw bytes in the file."""
    out = {}
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z, open(path, "rb") as fh:
            for info in z.infolist():
                parts = info.filename.split("/")
                if len(parts) == 3 and parts[1] == "data":
                    fh.seek(info.header_offset)
                    local = fh.read(30)
                    assert local[:4] == b"PK\x03\x04" and info.compress_type == zipfile.ZIP_STORED
                    name_len, extra_len = struct.unpack("<HH", local[26:30])
                    out[parts[2]] = (info.header_offset + 30 + name_len + extra_len, info.file_size)
        return out
    with open(path, "rb") as fh:  # legacy: magic, protocol, sys_info, main pickle, keys, raw storages
        for _ in range(3):
            pickle.load(fh)
        lister = _StorageLister(fh)
        lister.load()
        keys = pickle.load(fh)
        for key in keys:
            stype, numel = lister.storages[str(key)]
            (count,) = struct.unpack("<q", fh.read(8))
            nbytes = count * STORAGE_ITEMSIZE[stype]
            out[str(key)] = (fh.tell(), nbytes)
            fh.seek(nbytes, 1)
        assert fh.read(1) == b"", "trailing bytes after the last storage"
    return out


def flatten(obj, prefix="", out=None, meta=None):
    out = {} if out is None else out
    meta = {} if meta is None else meta
    if isinstance(obj, dict):
        for k, v in obj.items():
            flatten(v, f"{prefix}{k}.", out, meta)
    elif isinstance(obj, torch.Tensor):
        out[prefix[:-1]] = obj
    else:
        meta[prefix[:-1]] = obj
    return out, meta


def expect_pytorch(files: list[Path]) -> tuple[dict, dict]:
    tensors, metadata = {}, {}
    for f in files:
        records = storage_records(f)
        raw = f.read_bytes()
        loaded = torch.load(f, map_location="cpu", weights_only=True)
        flat, meta = flatten(loaded)
        metadata.update(meta)
        for name, t in flat.items():
            st = t.untyped_storage()
            blob = bytes(st) if st.nbytes() else b""
            # Which record holds this storage: the one whose bytes are identical (values are unique).
            hits = [k for k, (off, n) in records.items() if n == len(blob) and raw[off:off + n] == blob]
            assert len(hits) == 1, (f, name, hits)
            key = hits[0]
            item = t.element_size()
            contiguous = t.is_contiguous()
            tensors[name] = {"dtype": TORCH_DTYPE[t.dtype], "shape": list(t.shape),
                             "offset": records[key][0] + t.storage_offset() * item,
                             "nbytes": t.numel() * item, "file": f.name,
                             "storage": key, "storage_offset": t.storage_offset(),
                             "strides": [] if contiguous else list(t.stride())}
    return tensors, metadata


def hf_config(d: Path) -> dict | None:
    if not (d / "config.json").exists():
        return None
    c = AutoConfig.from_pretrained(d)
    heads = c.num_attention_heads
    kv = getattr(c, "num_key_value_heads", None) or heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    inter = getattr(c, "intermediate_size", None)
    if inter is None:  # gpt2: n_inner, default 4 * n_embd
        inter = c.n_inner or 4 * c.hidden_size
    return {"architecture": c.architectures[0] if c.architectures else c.model_type,
            "model_type": c.model_type, "hidden_size": c.hidden_size, "num_hidden_layers": c.num_hidden_layers,
            "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": head_dim,
            "intermediate_size": inter, "vocab_size": c.vocab_size,
            "max_position_embeddings": c.max_position_embeddings,
            "tie_word_embeddings": bool(c.tie_word_embeddings),
            "torch_dtype": str(getattr(c, "torch_dtype", None) or "").replace("torch.", ""),
            "num_local_experts": getattr(c, "num_local_experts", None),
            "sliding_window": getattr(c, "sliding_window", None)}


def summarize(fmt: str, files: list[Path], tensors: dict, config, **extra) -> dict:
    params = 0
    for t in tensors.values():
        n = 1
        for s in t["shape"]:
            n *= s
        params += n
    entry = {"format": fmt, "files": files_entry(files), "tensor_count": len(tensors),
             "parameter_count": params, "total_bytes": sum(t["nbytes"] for t in tensors.values()),
             "config": config, "tensors": dict(sorted(tensors.items()))}
    entry.update(extra)
    return entry


def shards_of(index: Path) -> list[Path]:
    weight_map = json.loads(index.read_text())["weight_map"]
    return [index.parent / n for n in sorted(set(weight_map.values()))]


def read_back() -> dict:
    fx = {}
    for name in HF_MODELS:
        d = MODELS / name
        files = [d / "model.safetensors"]
        fx[f"models/{name}"] = summarize("safetensors", files, expect_safetensors(files), hf_config(d))
    d = MODELS / "llama-sharded"
    files = shards_of(d / "model.safetensors.index.json")
    assert len(files) > 1
    sharded = summarize("safetensors", files, expect_safetensors(files), hf_config(d),
                        index="model.safetensors.index.json")
    fx["models/llama-sharded"] = sharded
    fx["models/llama-sharded/model.safetensors.index.json"] = sharded  # explicit index path, same index
    d = MODELS / "llama-bin"
    files = shards_of(d / "pytorch_model.bin.index.json")
    assert len(files) > 1
    tensors, meta = expect_pytorch(files)
    fx["models/llama-bin"] = summarize("pytorch", files, tensors, hf_config(d), index="pytorch_model.bin.index.json")
    p = MODELS / "llama-gguf" / "model.gguf"
    tensors, config = expect_gguf(p)
    fx["models/llama-gguf/model.gguf"] = summarize("gguf", [p], tensors, config)
    for fname in ("model_zip.pt", "model_legacy.pt"):
        p = MODELS / "llama-pt" / fname
        tensors, meta = expect_pytorch([p])
        fx[f"models/llama-pt/{fname}"] = summarize("pytorch", [p], tensors, hf_config(p.parent),
                                                   zip=zipfile.is_zipfile(p), metadata=meta)
    p = MODELS / "pt-nested" / "checkpoint.pt"
    tensors, meta = expect_pytorch([p])
    fx["models/pt-nested/checkpoint.pt"] = summarize("pytorch", [p], tensors, None, zip=True, metadata=meta)
    return fx


def main() -> None:
    if not transformers.is_torch_available():
        sys.exit(f"transformers {transformers.__version__} cannot use torch {torch.__version__}; "
                 "see the docstring for a matching pair")
    # Remove only what this script writes: other fixtures live beside these in models/.
    owned = list(HF_MODELS) + ["llama-sharded", "llama-bin", "llama-gguf", "llama-pt", "pt-nested"]
    for d in owned:
        shutil.rmtree(MODELS / d, ignore_errors=True)
    MODELS.mkdir(parents=True, exist_ok=True)
    llama = write_hf_models()
    write_gguf(llama)
    write_torch_files()
    fixtures = read_back()
    doc = {"generator": {"script": "scripts/make_testdata.py", "seed": SEED, "torch": torch.__version__.split("+")[0],
                         "transformers": transformers.__version__, "safetensors": safetensors.__version__,
                         "gguf": getattr(gguf, "__version__", "0.19"), "numpy": np.__version__},
           "fixtures": fixtures}
    EXPECTED.parent.mkdir(parents=True, exist_ok=True)
    EXPECTED.write_text(json.dumps(doc, indent=1) + "\n")
    total = sum(f.stat().st_size for f in TESTDATA.rglob("*") if f.is_file())
    print(f"wrote {len(fixtures)} fixtures; testdata/ is {total} bytes")
    if total > SIZE_CAP:
        sys.exit(f"testdata/ is {total} bytes, over the {SIZE_CAP} cap")


if __name__ == "__main__":
    main()
