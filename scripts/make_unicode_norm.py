#!/usr/bin/env python3
"""Writes src/tokenizer/unicode_norm_tables.cpp: the Unicode data that
src/tokenizer/unicode_norm.cpp needs for NFC/NFD/NFKC/NFKD, from Python's unicodedata.

    python3 scripts/make_unicode_norm.py            # aligned to HF tokenizers (needs `tokenizers`)
    python3 scripts/make_unicode_norm.py --no-align # plain unicodedata tables

Tables (see src/tokenizer/unicode_norm_tables.hpp for the layout):
  - per code point (two-stage table, 64-code-point blocks): canonical combining class and
    quick-check flags per form (Yes, or "safe": a boundary where text can be cut and the
    pieces normalized separately), and whether it can be the second of a composition pair;
  - single-level decomposition mappings (canonical, or compatibility-tagged), expanded
    recursively at run time; Hangul syllables are algorithmic and not in the tables;
  - primary composites: canonical pairs that NFC composes (composition exclusions,
    singletons and non-starter decompositions left out, as unicodedata's NFC leaves them).

Alignment: HF `tokenizers` normalizes with the Rust crate unicode-normalization-alignments,
whose data is older than Python's (Unicode 9.0: it has no combining class or decomposition
for characters that got one later). The point of this module is to give HF's token ids, so
by default every code point where `tokenizers` disagrees with unicodedata (probed one by
one) gets what `tokenizers` does: combining class 0 and no decomposition. The generated
file lists those code points.
"""
from __future__ import annotations

import argparse
import sys
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "src" / "tokenizer" / "unicode_norm_tables.cpp"

FORMS = ["NFC", "NFD", "NFKC", "NFKD"]  # order = nunchaku::NormForm
BLOCK = 64
LIMIT = 0x30000  # every code point with a combining class or decomposition is below this
S_BASE, L_BASE, V_BASE, T_BASE = 0xAC00, 0x1100, 0x1161, 0x11A7
L_COUNT, V_COUNT, T_COUNT = 19, 21, 28
S_COUNT = L_COUNT * V_COUNT * T_COUNT


def is_hangul_syllable(c: int) -> bool:
    return S_BASE <= c < S_BASE + S_COUNT


def hangul_decompose(c: int) -> list[int]:
    i = c - S_BASE
    out = [L_BASE + i // (V_COUNT * T_COUNT), V_BASE + (i % (V_COUNT * T_COUNT)) // T_COUNT]
    if i % T_COUNT:
        out.append(T_BASE + i % T_COUNT)
    return out


def read_unicodedata() -> tuple[list[int], dict[int, tuple[bool, list[int]]]]:
    """Combining classes and single-level mappings: cp -> (compat, [cps])."""
    ccc = [0] * 0x110000
    mapping: dict[int, tuple[bool, list[int]]] = {}
    for c in range(0x110000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        ch = chr(c)
        ccc[c] = unicodedata.combining(ch)
        d = unicodedata.decomposition(ch)
        if d:
            parts = d.split()
            compat = parts[0].startswith("<")
            mapping[c] = (compat, [int(x, 16) for x in (parts[1:] if compat else parts)])
    return ccc, mapping


def align_to_tokenizers(ccc: list[int], mapping: dict) -> list[tuple[int, str]]:
    """Gives every code point where HF tokenizers disagrees with unicodedata what tokenizers does."""
    from tokenizers import normalizers
    nfd, nfkd = normalizers.NFD(), normalizers.NFKD()
    changed = []
    for c in sorted(mapping):
        ch = chr(c)
        got = (nfd.normalize_str(ch), nfkd.normalize_str(ch))
        if got == (unicodedata.normalize("NFD", ch), unicodedata.normalize("NFKD", ch)):
            continue
        if got != (ch, ch):
            sys.exit(f"U+{c:04X}: tokenizers decomposes it to {got!r}, neither unicodedata's nor itself")
        del mapping[c]
        changed.append((c, "no decomposition"))
    # Combining class: 'a' U+0345 (ccc 240) X reorders when 0 < ccc(X) < 240, and
    # 'a' X U+0334 (ccc 1) when ccc(X) > 1; tokenizers must agree or see X as a starter.
    for c in range(0x110000):
        if not ccc[c]:
            continue
        ch = chr(c)
        probes = ["a\u0345" + ch, "a" + ch + "\u0334"]
        if all(nfd.normalize_str(p) == unicodedata.normalize("NFD", p) for p in probes):
            continue
        if any(nfd.normalize_str(p) != "a" + "".join(nfd.normalize_str(x) for x in p[1:]) for p in probes):
            sys.exit(f"U+{c:04X}: tokenizers orders it neither with combining class {ccc[c]} nor as a starter")
        changed.append((c, f"combining class 0 (unicodedata: {ccc[c]})"))
        ccc[c] = 0
    return sorted(changed)


def full_decomposition(c: int, compat: bool, mapping: dict) -> list[int]:
    if is_hangul_syllable(c):
        return hangul_decompose(c)
    m = mapping.get(c)
    if m is None or (m[0] and not compat):
        return [c]
    return [x for d in m[1] for x in full_decomposition(d, compat, mapping)]


def canonical_order(cps: list[int], ccc: list[int]) -> list[int]:
    out = list(cps)
    for i in range(1, len(out)):  # stable insertion sort of each run of non-starters
        j = i
        while j > 0 and ccc[out[j]] and ccc[out[j - 1]] > ccc[out[j]]:
            out[j - 1], out[j] = out[j], out[j - 1]
            j -= 1
    return out


def verify_against_tokenizers(ccc: list[int], mapping: dict, cp_flags) -> None:
    """Every code point: our full decompositions equal tokenizers' NFD/NFKD, and a code point
    whose quick check says Yes for NFC/NFKC is left alone by tokenizers."""
    from tokenizers import normalizers
    ref = {f: getattr(normalizers, f)() for f in FORMS}
    text = lambda cps: "".join(map(chr, cps))
    for c in range(0x110000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        ch = chr(c)
        for k, form in enumerate(FORMS):
            if form in ("NFD", "NFKD"):
                ours = text(canonical_order(full_decomposition(c, form == "NFKD", mapping), ccc))
                if ours != ref[form].normalize_str(ch):
                    sys.exit(f"U+{c:04X} {form}: tables give {ours!r}, tokenizers {ref[form].normalize_str(ch)!r}")
            if cp_flags(c) & (1 << k) and ref[form].normalize_str(ch) != ch:
                sys.exit(f"U+{c:04X} {form}: quick check Yes, but tokenizers changes it")


def build(ccc: list[int], mapping: dict):
    # Primary composites: canonical two-code-point mappings that NFC keeps composed (this
    # leaves out the composition exclusions, singletons and non-starter decompositions).
    pairs = {}
    for c, (compat, m) in mapping.items():
        if not compat and len(m) == 2 and unicodedata.normalize("NFC", chr(c)) == chr(c):
            assert ccc[c] == 0 and ccc[m[0]] == 0, hex(c)
            pairs[(m[0], m[1])] = c
    second = {b for (_, b) in pairs}
    second |= set(range(V_BASE, V_BASE + V_COUNT)) | set(range(T_BASE + 1, T_BASE + T_COUNT))
    composes = {}  # cp -> composite it is the decomposition of (NFC keeps it)
    for (a, b), c in pairs.items():
        composes[c] = (a, b)

    props_index: dict[tuple[int, int], int] = {(0, 0x1FF & ~0x100): 0}
    cp_props = []
    first_not_plain = [LIMIT] * 4
    for c in range(LIMIT):
        nfd = full_decomposition(c, False, mapping)
        nfkd = full_decomposition(c, True, mapping)
        excluded = c in mapping and not mapping[c][0] and c not in composes  # NFC_QC = No
        yes = {
            "NFD": nfd == [c],
            "NFKD": nfkd == [c],
            "NFC": not excluded and c not in second,
            "NFKC": not excluded and nfkd == nfd and c not in second,
        }
        flags = 0
        for k, form in enumerate(FORMS):
            first = (nfd if form in ("NFC", "NFD") else nfkd)[0]
            # Safe: text can be cut before it (its decomposition starts with a starter that
            # does not compose with what precedes) and it is unchanged by the form.
            safe = yes[form] and ccc[c] == 0 and ccc[first] == 0 and (form in ("NFD", "NFKD") or first not in second)
            if yes[form]:
                flags |= 1 << k
            if safe:
                flags |= 16 << k
            else:
                first_not_plain[k] = min(first_not_plain[k], c)
        if c in second:
            flags |= 0x100
        key = (ccc[c], flags)
        cp_props.append(props_index.setdefault(key, len(props_index)))
    assert len(props_index) <= 256
    blocks: dict[tuple, int] = {}
    stage1 = []
    for b in range(0, LIMIT, BLOCK):
        stage1.append(blocks.setdefault(tuple(cp_props[b:b + BLOCK]), len(blocks)))
    assert len(blocks) <= 256
    decomps, pool = [], []
    at: dict[tuple, int] = {}  # identical mappings share their place in the pool
    for c in sorted(mapping):
        compat, m = mapping[c]
        if tuple(m) not in at:
            at[tuple(m)] = len(pool)
            pool += m
        assert len(m) < 32
        decomps.append(((c << 6) | (len(m) << 1) | int(compat), at[tuple(m)]))
    assert len(pool) < 65536
    comps = sorted(((a << 21) | b, c) for (a, b), c in pairs.items())
    return props_index, stage1, blocks, decomps, pool, comps, first_not_plain


def c_array(values, per_line: int, fmt=str) -> str:
    vals = [fmt(v) for v in values]
    return "\n".join("    " + ",".join(vals[i:i + per_line]) + "," for i in range(0, len(vals), per_line))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-align", action="store_true", help="plain unicodedata tables, not aligned to HF tokenizers")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()

    ccc, mapping = read_unicodedata()
    changed = []
    aligned_to = "not aligned (--no-align)"
    if not args.no_align:
        import tokenizers
        changed = align_to_tokenizers(ccc, mapping)
        aligned_to = f"aligned to HF tokenizers {tokenizers.__version__}"
    props, stage1, blocks, decomps, pool, comps, first_not_plain = build(ccc, mapping)
    if not args.no_align:
        flags_of = {i: fl for (_, fl), i in props.items()}
        block_list = sorted(blocks, key=blocks.get)
        cp_flags = lambda c: flags_of[block_list[stage1[c // BLOCK]][c % BLOCK]] if c < LIMIT else 0xFF
        verify_against_tokenizers(ccc, mapping, cp_flags)

    hexa = lambda v: f"0x{v:X}"
    runs: list[list] = []  # [first, last, what] for consecutive code points with the same change
    for c, what in changed:
        if runs and runs[-1][1] == c - 1 and runs[-1][2] == what:
            runs[-1][1] = c
        else:
            runs.append([c, c, what])
    changed_lines = "\n".join(f"//   U+{a:04X}{f'..U+{b:04X}' if b > a else ''}: {what}" for a, b, what in runs) or "//   (none)"
    block_values = [v for blk in sorted(blocks, key=blocks.get) for v in blk]
    py = sys.version.split()[0]
    text = f"""// Generated by scripts/make_unicode_norm.py -- do not edit.
// Source: Python {py} unicodedata, Unicode {unicodedata.unidata_version}; {aligned_to}.
// Code points where HF tokenizers (Unicode 9.0 data) disagrees with unicodedata, given
// what tokenizers does ({len(changed)}):
{changed_lines}
#include "tokenizer/unicode_norm_tables.hpp"

namespace nunchaku::unorm {{

const char kUnicodeVersion[] = "{unicodedata.unidata_version}";
const char kTablesSource[] = "Python {py} unicodedata (Unicode {unicodedata.unidata_version}), {aligned_to}";

// First code point that is not plain (ccc 0, Yes, safe) per form NFC, NFD, NFKC, NFKD.
const uint32_t kFirstNotPlain[4] = {{{", ".join(hexa(v) for v in first_not_plain)}}};

namespace {{
constexpr Props props[] = {{
{c_array([f"{{{ccc_},0x{fl:X}}}" for (ccc_, fl) in sorted(props, key=props.get)], 8)}
}};
constexpr uint8_t stage1[] = {{
{c_array(stage1, 32)}
}};
constexpr uint8_t stage2[] = {{
{c_array(block_values, 32)}
}};
constexpr uint32_t decomposition_keys[] = {{
{c_array([k for k, _ in decomps], 12)}
}};
constexpr uint16_t decomposition_offsets[] = {{
{c_array([o for _, o in decomps], 16)}
}};
constexpr uint32_t decomposition_pool[] = {{
{c_array(pool, 16)}
}};
constexpr uint64_t composition_keys[] = {{
{c_array([k for k, _ in comps], 8)}
}};
constexpr uint32_t compositions[] = {{
{c_array([c for _, c in comps], 16)}
}};
static_assert(sizeof(stage1) == kTableLimit / kBlockSize);
static_assert(sizeof(composition_keys) / 8 == sizeof(compositions) / 4);
static_assert(sizeof(decomposition_keys) / 4 == sizeof(decomposition_offsets) / 2);
}}  // namespace

constinit const std::span<const Props> kProps(props);
constinit const std::span<const uint8_t> kStage1(stage1);
constinit const std::span<const uint8_t> kStage2(stage2);
constinit const std::span<const uint32_t> kDecompositionKeys(decomposition_keys);
constinit const std::span<const uint16_t> kDecompositionOffsets(decomposition_offsets);
constinit const std::span<const uint32_t> kDecompositionPool(decomposition_pool);
constinit const std::span<const uint64_t> kCompositionKeys(composition_keys);
constinit const std::span<const uint32_t> kCompositions(compositions);

}}  // namespace nunchaku::unorm
"""
    Path(args.out).write_text(text)
    print(f"{args.out}: {len(props)} property sets, {len(blocks)} blocks, {len(decomps)} decompositions "
          f"({len(pool)} code points), {len(comps)} compositions, {len(changed)} aligned code points, "
          f"{len(text)} bytes")


if __name__ == "__main__":
    main()
