#!/usr/bin/env python3
"""Checks with transformers itself what `nunchaku convert` writes between GGUF and HF (the
C++ tests compare against committed references; this loads the outputs in the real library):

1. testdata/run/<name> -> GGUF with --names gguf: transformers' own GGUF loader
   (AutoTokenizer.from_pretrained(dir, gguf_file=...)) reads the tokenizer convert wrote and
   gives the prompt ids of testdata/run/<name>/expected.json.
2. That GGUF -> HF with --names hf: AutoTokenizer / AutoModelForCausalLM.from_pretrained on
   the directory (derived config.json, tokenizer.json, tokenizer_config.json) give the
   expected prompt ids and greedy continuation.
3. testdata/convert/gguf/qwen2-bpe.gguf (llama.cpp's convert_hf_to_gguf) -> HF: the same.

Usage: /work/venv-convert/bin/python scripts/check_convert_transformers.py [BUILD_DIR]
Prints one line per check and exits 1 if any fails.
"""
import json
import os
import subprocess
import sys
import tempfile

from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BIN = os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build", "nunchaku")


def convert(src, dst, names):
    subprocess.run([BIN, "convert", src, dst, "--names", names, "-q"], check=True)


def raw_cases(name):
    exp = json.load(open(os.path.join(ROOT, "testdata", "run", name, "expected.json")))
    return exp["max_tokens"], [c for c in exp["cases"] if c["mode"] == "raw"]


def check_dir(label, d, name):
    n, cases = raw_cases(name)
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForCausalLM.from_pretrained(d)
    ok = True
    for c in cases:
        ids = tok(c["prompt"], return_tensors="pt").input_ids
        out = model.generate(ids, max_new_tokens=n, do_sample=False)[0, ids.shape[1]:].tolist()
        ok &= ids[0].tolist() == c["prompt_ids"] and out == c["completion_ids"]
    print(f"{'ok  ' if ok else 'FAIL'} {label}: transformers loads it, prompt ids and greedy tokens as expected.json")
    return ok


def main():
    ok = True
    with tempfile.TemporaryDirectory() as t:
        for name in ("qwen2-bpe", "llama-spm"):
            g = os.path.join(t, name + ".gguf")
            convert(os.path.join(ROOT, "testdata", "run", name), g, "gguf")
            tok = AutoTokenizer.from_pretrained(t, gguf_file=name + ".gguf")
            _, cases = raw_cases(name)
            same = all(tok(c["prompt"]).input_ids == c["prompt_ids"] for c in cases)
            print(f"{'ok  ' if same else 'FAIL'} {name} -> GGUF: transformers' GGUF tokenizer gives the prompt ids")
            ok &= same
            back = os.path.join(t, name + "-hf")
            convert(g, back, "hf")
            ok &= check_dir(f"{name} -> GGUF -> HF", back, name)
        d = os.path.join(t, "cpp-qwen2-hf")
        convert(os.path.join(ROOT, "testdata", "convert", "gguf", "qwen2-bpe.gguf"), d, "hf")
        ok &= check_dir("convert_hf_to_gguf's qwen2-bpe.gguf -> HF", d, "qwen2-bpe")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
