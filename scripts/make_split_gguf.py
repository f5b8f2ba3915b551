#!/usr/bin/env python3
"""Writes testdata/models/llama-gguf-split/: testdata/models/llama-gguf/model.gguf split
into 3 parts by gguf-py's own splitter (GGUFWriter(split_max_tensors=8), the code
convert_hf_to_gguf.py --split-max-tensors uses; the same layout as llama.cpp's
gguf-split: model-0000K-of-00003.gguf, all key-values in part 1, split.no /
split.count / split.tensors.count in every part), and expected.json with what
gguf.GGUFReader reads back from each part (split keys, tensor names, absolute data
offsets, byte sizes). tests/test_gguf_split.cpp checks nunchaku's merged index
against it and every tensor's bytes against the unsplit file.

    /work/venv-convert/bin/python scripts/make_split_gguf.py      # gguf 0.19
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import gguf

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "testdata/models/llama-gguf/model.gguf"
OUT = ROOT / "testdata/models/llama-gguf-split"


def decode(parts, i: int, vtype):
    """One value from a ReaderField's raw parts (contents() flattens nested arrays)."""
    if vtype == gguf.GGUFValueType.STRING:
        return bytes(parts[i + 1]).decode("utf-8"), i + 2
    if vtype == gguf.GGUFValueType.ARRAY:
        itype, n, i = gguf.GGUFValueType(int(parts[i][0])), int(parts[i + 1][0]), i + 2
        out = []
        for _ in range(n):
            v, i = decode(parts, i, itype)
            out.append(v)
        return out, i
    return parts[i][0].item(), i + 1


def copy_kvs(reader: gguf.GGUFReader, writer: gguf.GGUFWriter) -> None:
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue  # the writer writes the header and the architecture itself
        vtype = field.types[0]
        value, _ = decode(field.parts, 3, vtype)  # parts 0..2: key length, key, value type
        sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, value, vtype, sub)


def main() -> None:
    reader = gguf.GGUFReader(SRC)
    arch = reader.fields["general.architecture"].contents()
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    writer = gguf.GGUFWriter(OUT / "model.gguf", arch, split_max_tensors=8)
    copy_kvs(reader, writer)
    for t in reader.tensors:
        quantized = t.tensor_type not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16)
        writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type if quantized else None)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    parts = sorted(OUT.glob("model-*-of-*.gguf"))
    expected = {"source": "models/llama-gguf/model.gguf", "parts": []}
    for p in parts:
        r = gguf.GGUFReader(p)
        expected["parts"].append({
            "file": p.name,
            "kv_count": len([k for k in r.fields if not k.startswith("GGUF.")]),
            "split.no": int(r.fields["split.no"].contents()),
            "split.count": int(r.fields["split.count"].contents()),
            "split.tensors.count": int(r.fields["split.tensors.count"].contents()),
            "tensors": [{"name": t.name, "offset": int(t.data_offset), "nbytes": int(t.n_bytes)} for t in r.tensors],
        })
    (OUT / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(f"wrote {len(parts)} parts to {OUT}")


if __name__ == "__main__":
    main()
