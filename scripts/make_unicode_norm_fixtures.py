#!/usr/bin/env python3
"""Writes testdata/tokenizers/unicode_norm.json: expected NFC/NFD/NFKC/NFKD of test strings,
from HF `tokenizers` (normalizers.NFC() etc., the reference nunchaku must match), and
token ids of non-normalized text through tokenizer.json fixtures whose normalizer is a
Sequence with a Unicode form. tests/test_unicode_norm.cpp reads it.

    python3 scripts/make_unicode_norm_fixtures.py      # tokenizers 0.23

Python's unicodedata (newer Unicode data than tokenizers' Rust crate) is computed too;
where it disagrees, the case keeps tokenizers' value as expected and lists unicodedata's
under "unicodedata" (the count is printed). Re-running gives the same file (seeded).
"""
from __future__ import annotations

import json
import random
import sys
import unicodedata
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer, normalizers

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "tokenizers" / "unicode_norm.json"
FORMS = ["NFC", "NFD", "NFKC", "NFKD"]
REF = {f: getattr(normalizers, f)() for f in FORMS}

GROUPS = {
    "ascii": ["", "Hello, world!", " \t\n spaces\r\n", "don't 123 $%&"],
    "decomposed latin": ["e\u0301", "cafe\u0301", "A\u030a", "o\u0308\u0304", "Ze\u0301lie na\u0131\u0308ve",
                         "\u00e9\u00c5\u00f1", "n\u0303o", "E\u0300\u0301", "u\u0308\u0301 U\u0308\u030c"],
    "hangul": ["\u1100\u1161", "\u1100\u1161\u11a8", "\uac00\u11a8", "\ud55c\uad6d\uc5b4",
               "\u1112\u1161\u11ab\u1100\u116e\u11a8\u110b\u1165", "\u1100 \u1161 \u11a8", "\u11a8\u1161\u1100",
               "\uac01\u11a8", "\u1100\u1100\u1161\u1161", "\u3131\u314f", "\uffa1\uffc2", "\u1100\u0301\u1161",
               "\ud7a3\u11c2", "\u1113\u1161"],
    "reordering": ["a\u0301\u0323", "a\u0323\u0301", "a\u0301\u0316\u0323\u0300", "q\u0307\u0323",
                   "\u05d0\u05b8\u05b7\u05bc", "a\u0345\u0301", "a\u0301\u0301", "e\u0328\u0306",
                   "o\u031b\u0323\u0302", "x\u0315\u0300\u05ae\u0300", "\u0301a", "\u0301\u0323\u0300",
                   "\u0e40\u0e48\u0e38", "a" + "\u0301\u0323\u0345\u031b\u0300\u0316\u0334" * 4],
    "composition exclusions": ["\u0958", "\u0915\u093c", "\u2adc", "\u2add\u0338", "\u0f43", "\ufb1d",
                               "\u0344", "\u0f73", "\u0f75\u0f81", "\U0001d15e", "\u0340\u0341",
                               "\u09dc\u09dd\u09df", "\ufb2a\ufb4e"],
    "singletons": ["\u212b", "\u2126", "\u212a", "\u1fef", "\u037e", "\u0387", "\u2000\u2001",
                   "\u212bngstro\u0308m", "A\u030angstro\u0308m"],
    "compatibility": ["\ufb01", "\ufb03le", "\uff46\uff55\uff4c\uff4c\u3000\uff57\uff49\uff44\uff54\uff48", "x\u00b2",
                      "\u2075\u2079\u2080", "\u2460\u2461\u2473", "\uff76\uff9e\uff8a\uff9f\uff73\uff9e",
                      "\uff76\u3099", "\u2163\u217b", "\u00bd\u2153", "\u3392\u33ff", "\u2122\u2120",
                      "\u00a0nbsp\u00a0", "\U0001d400\U0001d4ea\U0001d7d8", "\u01c4\u01c5\u01c6\u0132",
                      "\u2026\u2025", "\u00b5\u00aa\u00ba", "\u1e9b\u0323", "\u03d3\u03d4", "\ufdfa",
                      "\u3300\u337f", "\u2f00\u2fd5", "\u00a8\u00af\u00b4", "\ufe59\ufe5a"],
    "cjk compatibility": ["\uf900", "\uf91d\ufa10", "\U0002f800\U0002fa1d", "\ufa0e\ufa0f", "\u8c48\uf900"],
    "unicode version": ["\u32ff", "a\u0898\u0323", "\U0001fbf0", "\ua7f2\ua7f3", "\u0d15\u0d3b\u0d4d",
                        "\U00011935\U00011930", "\U00011938", "a\u1df6\u0316", "\U0001f16c"],
    "mixed": ["Hello, cafe\u0301! \u212b\u2126 \ufb01le \uff21\uff22 \u1100\u1161\u11a8 x\u00b2 \u2460 ok",
              "na\u0131\u0308ve \u0958 \uf900 \uff76\uff9e \u00bd of it",
              "\u6211\u60f3\u5728apple\u5de5\u4f5c \U0001f999 e\u0301\u0323 \u1e0b\u0323 \u0393\u0301",
              "<|im_start|>cafe\u0301<|im_end|>"],
}


def assigned(c: int) -> bool:
    return unicodedata.category(chr(c)) not in ("Cn", "Cs")


def random_strings(n: int) -> list[str]:
    rng = random.Random(20240611)
    all_cps = [c for c in range(0x110000) if assigned(c)]
    interesting = [c for c in all_cps if unicodedata.combining(chr(c)) or unicodedata.decomposition(chr(c))]
    jamo = list(range(0x1100, 0x1113)) + list(range(0x1161, 0x1176)) + list(range(0x11a8, 0x11c3))
    out = []
    for _ in range(n):
        chars = []
        for _ in range(rng.randint(1, 8)):
            r = rng.random()
            if r < 0.35:
                c = rng.choice(interesting)
                # also the decomposed spelling, with its marks shuffled
                chars += rng.choice([[chr(c)], list(unicodedata.normalize("NFD", chr(c)))])
            elif r < 0.5:
                chars.append(chr(rng.randrange(0x20, 0x7f)))
            elif r < 0.65:
                chars.append(chr(rng.choice(jamo + list(range(0xac00, 0xac00 + 11172, 97)))))
            else:
                chars.append(chr(rng.choice(all_cps)))
        if rng.random() < 0.3:
            rng.shuffle(chars)
        out.append("".join(chars))
    return out


def case(group: str, text: str) -> dict:
    c = {"group": group, "text": text}
    differs = {}
    for f in FORMS:
        c[f] = REF[f].normalize_str(text)
        ud = unicodedata.normalize(f, text)
        if ud != c[f]:
            differs[f] = ud
    if differs:
        c["unicodedata"] = differs
    return c


SPM = "llama2-spm"    # SentencePiece-shaped BPE with byte fallback: every character has ids
BYTE = "qwen2-bpe"   # byte-level BPE with a regex pre-tokenizer and added tokens
META = "\u2581"
PREPEND = {"type": "Prepend", "prepend": META}
SPACES = {"type": "Replace", "pattern": {"String": " "}, "content": META}


def seq(*steps) -> dict:
    return {"type": "Sequence", "normalizers": list(steps)}


NORMALIZERS = [
    (SPM, seq({"type": "NFC"}, PREPEND, SPACES)),
    (SPM, seq({"type": "NFKC"}, PREPEND, SPACES)),
    (SPM, seq(PREPEND, SPACES, {"type": "NFKC"})),  # U+3000 becomes " " after the Replace: stays a space
    (SPM, seq({"type": "NFD"}, PREPEND, SPACES)),
    (SPM, seq({"type": "NFKD"}, PREPEND, SPACES)),
    (SPM, seq({"type": "Replace", "pattern": {"String": "\u00e9"}, "content": "E"}, {"type": "NFC"}, PREPEND, SPACES)),
    (SPM, seq({"type": "NFC"}, {"type": "Replace", "pattern": {"String": "\u00e9"}, "content": "E"}, PREPEND, SPACES)),
    (BYTE, {"type": "NFC"}),
    (BYTE, {"type": "NFKC"}),
    (BYTE, seq({"type": "NFD"}, {"type": "NFC"})),
    (BYTE, {"type": "NFKD"}),
]
TOKENIZER_TEXTS = [
    "cafe\u0301 au lait, caf\u00e9 noir",
    "\ufb01ne \uff46\uff55\uff4c\uff4c\u3000\uff57\uff49\uff44\uff54\uff48 text",
    "\u212b\u2126 x\u00b2 \u2460\u2461 \u00bd",
    "\u1100\u1161\u11a8 \ud55c\uad6d\uc5b4 \uac00\u11a8",
    "a\u0323\u0301 q\u0307\u0323 \u1e0b\u0323",
    "\uff76\uff9e\uff8a\uff9f \u0958 \uf900",
    "plain ascii text",
    "<|im_start|>user\ncafe\u0301 \u212b<|im_end|>\n<s>e\u0301</s>",
]


def tokenizer_cases() -> list[dict]:
    out = []
    for fixture, norm in NORMALIZERS:
        tj = json.loads((ROOT / "testdata" / "tokenizers" / fixture / "tokenizer.json").read_text())
        tj["normalizer"] = norm
        tok = Tokenizer.from_str(json.dumps(tj))
        for text in TOKENIZER_TEXTS:
            out.append({"fixture": fixture, "normalizer": norm, "text": text,
                        "ids": tok.encode(text, add_special_tokens=False).ids})
    return out


def main() -> None:
    cases = [case(g, t) for g, texts in GROUPS.items() for t in texts]
    cases += [case("random", t) for t in random_strings(300)]
    disagree = [c for c in cases if "unicodedata" in c]
    doc = {
        "generator": f"scripts/make_unicode_norm_fixtures.py (tokenizers {tokenizers.__version__}, "
                     f"Python {sys.version.split()[0]} unicodedata {unicodedata.unidata_version})",
        "note": "expected forms are HF tokenizers'; 'unicodedata' holds Python's where it differs (newer Unicode data)",
        "cases": cases,
        "tokenizer_cases": tokenizer_cases(),
    }
    dump = lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":"))
    lines = [f" {dump(k)}:" + (("[\n" + ",\n".join("  " + dump(x) for x in v) + "]") if isinstance(v, list) else dump(v))
             for k, v in doc.items()]
    OUT.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    print(f"{OUT}: {len(cases)} strings ({len(disagree)} where unicodedata disagrees), "
          f"{len(doc['tokenizer_cases'])} tokenizer encodes")


if __name__ == "__main__":
    main()
