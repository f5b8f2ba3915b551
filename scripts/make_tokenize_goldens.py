#!/usr/bin/env python3
"""Writes testdata/tokenize/expected.json: what the reference libraries say `nunchaku tokenize`
must print for the run fixtures (testdata/run/<name>, HF directories) and their GGUF copies
(testdata/convert/gguf/<name>.gguf, written by llama.cpp's convert_hf_to_gguf):

  - ids: transformers' AutoTokenizer on the HF directory: `tok(text)` (BOS as the tokenizer
    adds it), `add_special_tokens=False` (--no-bos), `split_special_tokens=True`
    (--split-special), and `apply_chat_template(..., add_generation_prompt=True)` for chat
    requests (--chat; `system` prepended as a system turn, as run's --system does);
  - tokens: the vocabulary strings of those ids: `convert_ids_to_tokens` for the directory,
    `tokenizer.ggml.tokens` read by gguf-py for the GGUF (the same ids: the GGUF holds the
    same vocabulary);
  - piece_hex: the bytes each token stands for, from its vocabulary string by the family's
    byte rule (byte-level BPE: GPT-2's bytes_to_unicode table; SentencePiece-style: U+2581 is
    a space and <0xNN> is byte NN), special tokens as their text;
  - pieces: those bytes as text, invalid UTF-8 replaced by U+FFFD (Python's errors="replace",
    the substitution of maximal subparts).

    python scripts/make_tokenize_goldens.py   # transformers 4.57.6, tokenizers 0.22.2, gguf 0.19 (no torch needed)

transformers 5 loads the SentencePiece fixture with its own Llama normalizer, which drops a
space that the tokenizer.json, the `tokenizers` library and llama.cpp keep; the other
fixtures in testdata/ were made with 4.57 too.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import gguf
import transformers
from transformers import AutoTokenizer

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "tokenize" / "expected.json"

# Plain prompts: ASCII, spaces and a newline, multi-byte characters (byte fallback in the
# SentencePiece fixture: pieces that are not UTF-8 alone), special-token text.
TEXTS = {
    "llama-spm": ["Once upon a time", "  Hello,  world!\nBye", "héllo 🦙 世界", "<s>hi</s> there"],
    "qwen2-bpe": ["Once upon a time", "  Hello,  world!\nBye", "héllo 🦙 世界", "<|im_start|>user hi<|im_end|>"],
}
CHATS = [
    {"messages": [{"role": "user", "content": "What is two plus two?"}]},
    {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour."}]},
    {"messages": [{"role": "user", "content": "héllo 🦙"}], "system": "Be kind."},
]


def bytes_to_unicode() -> dict[int, str]:
    # GPT-2's table (openai/gpt-2 encoder.py, also transformers' models/gpt2): printable bytes
    # map to themselves, the rest to U+0100 onwards.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_DECODER = {c: b for b, c in bytes_to_unicode().items()}


def piece_bytes(token: str, byte_level: bool, special: bool) -> bytes:
    if special:
        return token.encode()
    if byte_level:
        return bytes(BYTE_DECODER[c] for c in token)
    if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
        return bytes([int(token[3:5], 16)])
    return token.replace("\u2581", " ").encode()


def gguf_tokens(path: Path) -> list[str]:
    r = gguf.GGUFReader(path)
    f = r.fields["tokenizer.ggml.tokens"]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def entry(tok, ids: list[int], tokens: list[str], byte_level: bool) -> dict:
    special = set(tok.all_special_ids) | {i for i, t in tok.added_tokens_decoder.items() if t.special}
    raw = [piece_bytes(t, byte_level, i in special) for i, t in zip(ids, tokens)]
    return {
        "ids": ids,
        "tokens": tokens,
        "piece_hex": [b.hex() for b in raw],
        "pieces": [b.decode("utf-8", errors="replace") for b in raw],
        "special": [i in special for i in ids],
    }


def cases_for(name: str) -> dict:
    d = ROOT / "testdata" / "run" / name
    tok = AutoTokenizer.from_pretrained(d)
    byte_level = json.loads((d / "tokenizer.json").read_text())["decoder"]["type"] == "ByteLevel"
    g_tokens = gguf_tokens(ROOT / "testdata" / "convert" / "gguf" / f"{name}.gguf")
    out = {"hf_dir": f"run/{name}", "gguf": f"convert/gguf/{name}.gguf", "cases": []}
    for text in TEXTS[name]:
        for flags, kw in (([], {}), (["--no-bos"], {"add_special_tokens": False}),
                          (["--split-special"], {"split_special_tokens": True})):
            if kw.get("split_special_tokens"):
                # transformers reads split_special_tokens at load time (the call argument is
                # not honoured by every version): a tokenizer loaded with it set.
                ids = AutoTokenizer.from_pretrained(d, split_special_tokens=True)(text)["input_ids"]
            else:
                ids = tok(text, **kw)["input_ids"]
            c = {"prompt": text, "flags": flags, **entry(tok, ids, tok.convert_ids_to_tokens(ids), byte_level)}
            c["gguf_tokens"] = [g_tokens[i] for i in ids]
            out["cases"].append(c)
    for chat in CHATS:
        msgs = chat["messages"]
        if "system" in chat and msgs[0]["role"] != "system":
            msgs = [{"role": "system", "content": chat["system"]}] + msgs
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        ids = tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True, return_dict=False)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        flags = ["--chat"] + (["--system", chat["system"]] if "system" in chat else [])
        c = {"messages": chat["messages"], "flags": flags, "rendered": text,
             **entry(tok, list(ids), tok.convert_ids_to_tokens(list(ids)), byte_level)}
        c["gguf_tokens"] = [g_tokens[i] for i in ids]
        out["cases"].append(c)
    return out


def main() -> None:
    doc = {
        "generator": f"scripts/make_tokenize_goldens.py (transformers {transformers.__version__}, gguf-py "
                     f"{getattr(gguf, '__version__', '0.19')})",
        "models": {name: cases_for(name) for name in TEXTS},
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
