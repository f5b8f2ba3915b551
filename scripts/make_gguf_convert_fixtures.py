#!/usr/bin/env python3
"""References for `nunchaku convert` between GGUF and Hugging Face directories, made by the
two tools people use for it, into testdata/convert/gguf/:

1. llama.cpp's convert_hf_to_gguf.py (HF -> GGUF, --outtype f32) on testdata/run/llama-spm
   and testdata/run/qwen2-bpe: `<name>.gguf`, the tokenizer.ggml.* key-values that convert
   writes from tokenizer.json are compared with. Its pre-tokenizer detection hashes the ids of
   a test string against a list of known models, which a tokenizer trained for the fixtures
   is not on; the script names it ("qwen2", the regex its tokenizer.json splits with).
   Also `rope_freqs-llama3.safetensors`: the rope_freqs tensor convert_hf_to_gguf generates
   for testdata/engine/llama3-rope (llama3 rope scaling; that model has no tokenizer, so the
   vocabulary step is skipped there).
2. transformers' GGUF loading (`from_pretrained(dir, gguf_file=...)`, then save_pretrained)
   on those GGUF files (transformers 5.24 cannot read testdata/models/llama-gguf/model.gguf,
   whose metadata holds a nested array):
   `sidecars/<name>/{config.json,tokenizer.json,tokenizer_config.json}`, plus `ids.json`, the
   ids transformers' tokenizer gives for a set of strings (with and without special tokens).
   (stories260K.gguf of ../shared/testfiles is not used: transformers 5.24 fails on its
   padding_token_id 0xFFFFFFFF, llama.cpp's "no token".)
4. `../llama-sharded-tf5.index.json`: the index transformers 5.24's save_pretrained(
   max_shard_size="100KB") writes for testdata/models/llama (5.x fills shards in name order;
   testdata/models/llama-sharded is 4.57's, in state_dict order).
3. The real vocabularies of ../shared/testfiles/vocab (llama.cpp's ggml-vocab-*.gguf, when
   that folder exists): `shared/<name>/ids.json` and config.json (when transformers makes
   one) only; their tokenizer.json files are megabytes and the GGUFs are not ours to commit.
   Two things transformers 5.24 gets wrong for these files are corrected before the ids are
   written, so ids.json holds the model's own tokenization (see model_tokenizer_fixes):
   - tokenizer.ggml.pre "falcon" is not in transformers' table of splits, so it tokenizes
     with GPT-2's regex; falcon's own tokenizer.json splits digits in threes
     (Punctuation, ByteLevel, Digits, Split "[0-9][0-9][0-9]"), which is put back;
   - a control token spelled outside the byte-level alphabet (deepseek's
     "<｜begin▁of▁sentence｜>") is skipped as a "mislabel", so the BOS becomes a new token
     past the vocabulary (32257 of a 32256-token model); the BOS is the file's bos_token_id.
   The corrected tokenizer must reproduce llama.cpp's test vectors (<name>.gguf.inp/.out,
   made from the models' own tokenizers) where they exist, or the script stops.

Needs a llama.cpp source tree for convert_hf_to_gguf.py (and its gguf-py), e.g. from the
llama-cpp-python source package:
    pip download llama-cpp-python==0.3.36 --no-deps --no-binary :all: && tar xzf llama_cpp_python-0.3.36.tar.gz
    LLAMA_CPP=$PWD/llama_cpp_python-0.3.36/vendor/llama.cpp /work/venv-convert/bin/python scripts/make_gguf_convert_fixtures.py
Only part 3 (no llama.cpp tree needed): `... make_gguf_convert_fixtures.py shared`.
(checked with that tree, transformers 5.24, tokenizers 0.23, torch 2.15).
"""
import json
import os
import shutil
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(ROOT, "testdata", "convert", "gguf")

STRINGS = [
    "Once upon a time",
    "Hello world",
    " leading space and  two spaces",
    "The quick brown fox jumps over the lazy dog.",
    "numbers 1234567 and symbols !?#",
    "line one\nline two\n\nend",
    "caf\u00e9 na\u00efve \u4f60\u597d \U0001F600",
    "<s>bos inside</s>",
    "<|im_start|>user\nhi<|im_end|>",
    "",
]


def convert_hf_to_gguf(llama_cpp, src, dst, pre=None, no_vocab=False):
    sys.path[:0] = [os.path.join(llama_cpp, "gguf-py"), llama_cpp]
    import convert_hf_to_gguf as c
    import conversion.base as base
    if pre is not None:
        base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
    import conversion.llama as llama
    if no_vocab:
        llama.LlamaModel.set_vocab = lambda self: None
    saved = sys.argv
    sys.argv = ["convert_hf_to_gguf", src, "--outfile", dst, "--outtype", "f32"]
    try:
        c.main()
    finally:
        sys.argv = saved


def rope_freqs(llama_cpp):
    import gguf
    from safetensors.numpy import save_file
    with tempfile.TemporaryDirectory() as d:
        g = os.path.join(d, "llama3.gguf")
        convert_hf_to_gguf(llama_cpp, os.path.join(ROOT, "testdata", "engine", "llama3-rope"), g, no_vocab=True)
        r = gguf.GGUFReader(g)
        t = next(t for t in r.tensors if t.name == "rope_freqs.weight")
        save_file({"rope_freqs.weight": t.data.copy()}, os.path.join(OUT, "rope_freqs-llama3.safetensors"))


SHARED_VOCABS = ["gpt-2", "llama-spm", "phi-3", "falcon", "deepseek-llm", "deepseek-coder", "starcoder",
                 "refact", "mpt", "gpt-neox", "baichuan"]


def shared_vocabs():
    from transformers import AutoConfig, AutoTokenizer
    vocab = os.path.normpath(os.path.join(ROOT, "..", "shared", "testfiles", "vocab"))
    for name in SHARED_VOCABS:
        f = f"ggml-vocab-{name}.gguf"
        if not os.path.exists(os.path.join(vocab, f)):
            continue
        dst = os.path.join(OUT, "shared", name)
        shutil.rmtree(dst, ignore_errors=True)
        try:
            tok = AutoTokenizer.from_pretrained(vocab, gguf_file=f)
        except Exception as e:  # an architecture transformers has no GGUF tokenizer for
            print(f"skipped {name}: {e}")
            continue
        os.makedirs(dst)
        try:
            AutoConfig.from_pretrained(vocab, gguf_file=f).save_pretrained(dst)
        except Exception as e:
            print(f"{name}: no config ({e})")
        fixed, bos = model_tokenizer_fixes(tok, os.path.join(vocab, f))
        check_test_vectors(tok, os.path.join(vocab, f), fixed)
        write_ids(dst, "shared:vocab/" + f, tok, bos)


def model_tokenizer_fixes(tok, path):
    """Corrects what transformers 5.24 gets wrong for this GGUF (see the docstring); returns
    whether the pre-tokenizer was replaced, and the BOS id to put before ids_special (None:
    transformers' own)."""
    import gguf
    from tokenizers import Regex, pre_tokenizers
    fields = gguf.GGUFReader(path).fields

    def value(key):
        f = fields.get(key)
        return None if f is None else f.contents()

    fixed = value("tokenizer.ggml.pre") == "falcon"
    if fixed:
        # tiiuae/falcon-7b's tokenizer.json pre_tokenizer.
        tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Punctuation("contiguous"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
            pre_tokenizers.Digits(individual_digits=False),
            pre_tokenizers.Split(Regex("[0-9][0-9][0-9]"), behavior="isolated"),
        ])
    n_vocab = len(value("tokenizer.ggml.tokens"))
    bos = value("tokenizer.ggml.bos_token_id")
    with_bos = tok.encode("a", add_special_tokens=True)
    plain = tok.encode("a", add_special_tokens=False)
    if bos is not None and value("tokenizer.ggml.add_bos_token") and with_bos[1:] == plain and with_bos[0] >= n_vocab:
        print(f"{os.path.basename(path)}: transformers' BOS {with_bos[0]} is past the vocabulary ({n_vocab}); using the file's {bos}")
        return fixed, bos
    return fixed, None


def check_test_vectors(tok, path, fixed):
    """llama.cpp's test vectors for the file (made from the model's own tokenizer): a
    replaced pre-tokenizer must give all of them; otherwise how many differ is printed
    (transformers' SentencePiece handling of leading spaces differs from llama.cpp's)."""
    if not os.path.exists(path + ".inp"):
        return
    with open(path + ".inp", encoding="utf-8") as fh:
        texts = fh.read().split("\n__ggml_vocab_test__\n")
    with open(path + ".out", encoding="utf-8") as fh:
        want = [[int(x) for x in line.split()] for line in fh.read().split("\n")]
    differ = 0
    for text, ids in zip(texts, want):
        got = tok.encode(text, add_special_tokens=False)
        if got != ids and fixed:
            sys.exit(f"{path}: {text!r} gives {got}, llama.cpp's test vector says {ids}")
        differ += got != ids
    print(f"{os.path.basename(path)}: {len(texts) - differ} of {len(texts)} of llama.cpp's test vectors equal")


def write_ids(dst, source, tok, bos=None):
    def special(s):
        return [bos] + tok.encode(s, add_special_tokens=False) if bos is not None else tok.encode(s, add_special_tokens=True)

    ids = [{"text": s,
            "ids": tok.encode(s, add_special_tokens=False),
            "ids_special": special(s)} for s in STRINGS]
    with open(os.path.join(dst, "ids.json"), "w") as fh:
        json.dump({"gguf": source, "cases": ids}, fh, indent=1, ensure_ascii=False)
        fh.write("\n")


def transformers_sidecars(gguf_path, name):
    from transformers import AutoConfig, AutoTokenizer
    d, f = os.path.split(gguf_path)
    dst = os.path.join(OUT, "sidecars", name)
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    AutoConfig.from_pretrained(d, gguf_file=f).save_pretrained(dst)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    tok.save_pretrained(dst)
    for extra in ("special_tokens_map.json",):  # keep the files compared
        p = os.path.join(dst, extra)
        if os.path.exists(p):
            os.remove(p)
    write_ids(dst, os.path.relpath(gguf_path, ROOT), tok)


def shard_index_tf5():
    from transformers import AutoModelForCausalLM
    with tempfile.TemporaryDirectory() as d:
        AutoModelForCausalLM.from_pretrained(os.path.join(ROOT, "testdata", "models", "llama")).save_pretrained(
            d, max_shard_size="100KB")
        shutil.copy(os.path.join(d, "model.safetensors.index.json"),
                    os.path.join(ROOT, "testdata", "convert", "llama-sharded-tf5.index.json"))


def main():
    if sys.argv[1:] == ["shared"]:
        shared_vocabs()
        return
    llama_cpp = os.environ.get("LLAMA_CPP")
    if not llama_cpp:
        sys.exit("set LLAMA_CPP to a llama.cpp source tree (see the docstring)")
    os.makedirs(OUT, exist_ok=True)
    convert_hf_to_gguf(llama_cpp, os.path.join(ROOT, "testdata", "run", "qwen2-bpe"),
                       os.path.join(OUT, "qwen2-bpe.gguf"), pre="qwen2")
    convert_hf_to_gguf(llama_cpp, os.path.join(ROOT, "testdata", "run", "llama-spm"),
                       os.path.join(OUT, "llama-spm.gguf"))
    rope_freqs(llama_cpp)
    transformers_sidecars(os.path.join(OUT, "qwen2-bpe.gguf"), "qwen2-bpe")
    transformers_sidecars(os.path.join(OUT, "llama-spm.gguf"), "llama-spm")
    shared_vocabs()
    shard_index_tf5()


if __name__ == "__main__":
    main()
