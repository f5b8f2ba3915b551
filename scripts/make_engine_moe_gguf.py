#!/usr/bin/env python3
"""GGUF twins of the engine's MoE fixtures, written by llama.cpp's convert_hf_to_gguf.py
(stacked ffn_*_exps experts, ffn_gate_inp, the qwen2moe shared expert), and llama.cpp's own
greedy ids for them (llama-cpp-python), into testdata/engine/moe-gguf/ (+ moe-gguf.json):

    LLAMA_CPP=/path/to/llama.cpp /work/venv/bin/python scripts/make_engine_moe_gguf.py

LLAMA_CPP is a llama.cpp tree with convert_hf_to_gguf.py and gguf-py (the llama-cpp-python
0.3.36 sdist's vendor/llama.cpp; default /tmp/engine-llamacpp). llama.cpp's qwen2moe and
qwen3moe graphs put experts on every layer, so those two are written from all-sparse
variants of the configs in scripts/make_engine_moe.py (same seeds); mixtral and olmoe are
the committed HF fixtures themselves. The fixtures have no tokenizer: the GGUFs get a byte
vocabulary (GPT-2's byte characters of bytes 0..vocab-2, then "xy" with the one merge "x y":
llama.cpp refuses a BPE vocabulary without merges) so both tools load them as text models;
llama.cpp is fed ids. Each golden: the prompt of moe.json's family, 32 greedy ids of llama.cpp
(f32, one thread), and the logits of the last prompt position by llama.cpp and by transformers
(llama.cpp's own approximations of exp/SiLU move its logits by ~1e-3 of their scale).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_engine_families as fam  # noqa: E402
import make_engine_moe as moe  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "engine" / "moe-gguf"
LLAMA_CPP = os.environ.get("LLAMA_CPP", "/tmp/engine-llamacpp")
GGUF_ARCH = {"mixtral": "llama", "qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe", "olmoe": "olmoe"}


def byte_vocab(self):
    n = self.hparams["vocab_size"]
    chars = bytes_to_unicode()
    self.gguf_writer.add_tokenizer_model("gpt2")
    self.gguf_writer.add_tokenizer_pre("gpt-2")
    self.gguf_writer.add_token_list([chars[b] for b in range(n - 1)] + [chars[120] + chars[121]])  # "xy": the merge's
    self.gguf_writer.add_token_types([1] * n)
    self.gguf_writer.add_token_merges([chars[120] + " " + chars[121]])  # llama.cpp wants one
    self.gguf_writer.add_bos_token_id(1)
    self.gguf_writer.add_eos_token_id(2)


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def convert(src, dst):
    sys.path[:0] = [os.path.join(LLAMA_CPP, "gguf-py"), LLAMA_CPP]
    import importlib
    import pkgutil
    import convert_hf_to_gguf as c
    import conversion
    import conversion.base as base
    for m in pkgutil.iter_modules(conversion.__path__):
        importlib.import_module("conversion." + m.name)
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("conversion."):
            for obj in list(vars(mod).values()):
                if isinstance(obj, type) and issubclass(obj, base.TextModel):
                    obj.set_vocab = byte_vocab
    saved = sys.argv
    sys.argv = ["convert_hf_to_gguf", str(src), "--outfile", str(dst), "--outtype", "f32"]
    try:
        c.main()
    finally:
        sys.argv = saved


def sparse_variant(name, kw):
    """The first seed of the all-sparse config with a varied path and clear routing (as make_engine_moe.py)."""
    for attempt in range(60):
        model = fam.make_model(name, kw, attempt)
        ref = fam.reference(name, model, model.config.vocab_size)
        gap = moe.routing_gap(model, ref["prompt"] + ref["ids"], kw["num_experts_per_tok"])
        if len(set(ref["ids"])) >= 6 and ref["min_greedy_margin"] > 1e-3 and gap > 1e-3:
            return model, ref
    raise SystemExit(f"{name}: no all-sparse seed gives a varied greedy path with clear routing")


def llama_cpp_greedy(path, prompt, n):
    import llama_cpp
    llm = llama_cpp.Llama(str(path), n_ctx=64, n_batch=64, n_threads=1, logits_all=True, verbose=False)
    llm.eval(prompt)
    last = np.array(llm.scores[len(prompt) - 1], dtype=np.float32)
    ids = []
    for _ in range(n):
        nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        ids.append(nxt)
        llm.eval([nxt])
    return ids, [float(v) for v in last]


def main():
    goldens = json.load(open(fam.OUT / "moe.json"))
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    refs = {}
    for name, kw in moe.FAMILIES.items():
        with tempfile.TemporaryDirectory() as tmp:
            src = fam.OUT / name
            hf_ids, hf_last = goldens[name]["ids"], goldens[name]["prompt_logits"][-1]
            if name in ("qwen2_moe", "qwen3_moe"):  # every layer sparse, as llama.cpp's graph
                model, ref = sparse_variant(name, dict(kw, mlp_only_layers=[]))
                hf_ids, hf_last = ref["ids"], ref["prompt_logits"][-1]
                src = Path(tmp) / name
                model.save_pretrained(src, safe_serialization=True)
            dst = OUT / f"{name}.gguf"
            convert(src, dst)
        prompt = goldens[name]["prompt"]  # reference() draws it from the name: the variants' too
        ids, logits = llama_cpp_greedy(dst, prompt, fam.NEW_TOKENS)
        refs[name] = {"arch": GGUF_ARCH[name], "prompt": prompt, "ids": ids, "last_prompt_logits": logits,
                      "transformers_ids": hf_ids, "transformers_last_prompt_logits": hf_last, "sparse_variant": name in ("qwen2_moe", "qwen3_moe")}
        print(name, ids[:8], "llama.cpp == transformers" if ids == hf_ids else "llama.cpp != transformers")
    with open(OUT.parent / "moe-gguf.json", "w") as f:
        json.dump(refs, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    sys.path[:0] = [os.path.join(LLAMA_CPP, "gguf-py"), LLAMA_CPP]
    main()
