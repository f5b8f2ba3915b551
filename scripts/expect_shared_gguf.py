#!/usr/bin/env python3
"""Expectations for the GGUF reader tests, produced by gguf-py (the reference
implementation that ships with llama.cpp), never by nunchaku itself.

1. Writes testdata/gguf/quant_small.gguf with gguf-py's GGUFWriter: every
   metadata value type (nested arrays included), general.alignment = 64, and
   tensors of plain and block-quantized ggml types (Q8_0/Q4_0/Q5_1/TQ1_0/MXFP4/BF16
   through gguf.quants.quantize, the rest as raw bytes of the right size). Reads it
   back with GGUFReader into testdata/gguf/quant_small.json.
2. When ../shared/testfiles exists, reads gguf/stories260K.gguf and every
   vocab/*.gguf with GGUFReader into testdata/expected/shared_gguf.json.

Shapes are written in PyTorch order (GGUFReader reports ggml's ne order, reversed
here); offsets are absolute (GGUFReader's data_offset). gguf-py 0.19 puts Q8_1 at
40 bytes per block while ggml's block_q8_1 is 36, so the fixture has no Q8_1.

Usage: python3 scripts/expect_shared_gguf.py   (from the repo root)
"""
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "testfiles")

TYPE_NAMES = {
    gguf.GGUFValueType.UINT8: "uint8", gguf.GGUFValueType.INT8: "int8",
    gguf.GGUFValueType.UINT16: "uint16", gguf.GGUFValueType.INT16: "int16",
    gguf.GGUFValueType.UINT32: "uint32", gguf.GGUFValueType.INT32: "int32",
    gguf.GGUFValueType.FLOAT32: "float32", gguf.GGUFValueType.BOOL: "bool",
    gguf.GGUFValueType.STRING: "string", gguf.GGUFValueType.ARRAY: "array",
    gguf.GGUFValueType.UINT64: "uint64", gguf.GGUFValueType.INT64: "int64",
    gguf.GGUFValueType.FLOAT64: "float64",
}

# Nested arrays are written by GGUFWriter but GGUFReader.contents() cannot read
# them back, so the fixture's expectations for these come from what was written.
NESTED = {
    "test.nested_ints": [[1, 2, 3], [4, 5]],
    "test.nested_strings": [["a", "bc"], ["def"]],
}


def plain(v):
    if isinstance(v, (np.floating, float)):
        return float(v)
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, (np.integer, int)):
        return int(v)
    return v


def describe(path):
    r = gguf.GGUFReader(path)
    out = {
        "file_size": os.path.getsize(path),
        "version": int(r.fields["GGUF.version"].contents()),
        "alignment": int(r.alignment),
        "data_offset": int(r.data_offset),
        "tensors": [],
        "kvs": {},
    }
    for t in r.tensors:
        out["tensors"].append({
            "name": t.name,
            "type": t.tensor_type.name,
            "shape": [int(d) for d in reversed(t.shape.tolist())],
            "offset": int(t.data_offset),
            "n_bytes": int(t.n_bytes),
        })
    for key, f in r.fields.items():
        if key.startswith("GGUF."):
            continue  # header fields GGUFReader exposes as pseudo-KVs
        main = f.types[0]
        entry = {"type": TYPE_NAMES[main]}
        if main == gguf.GGUFValueType.ARRAY:
            entry["elem"] = TYPE_NAMES[f.types[1]]
            entry["length"] = len(f.data)
            if key in NESTED:  # GGUFReader flattens nested arrays: its length is wrong here
                entry["length"] = len(NESTED[key])
                entry["values"] = NESTED[key]
            else:
                vals = [plain(x) for x in f.contents()]
                if len(vals) <= 16:
                    entry["values"] = vals
                else:
                    entry["head"] = vals[:4]
                    entry["last"] = vals[-1]
        else:
            entry["value"] = plain(f.contents())
        out["kvs"][key] = entry
    return out


def write_fixture(path):
    w = gguf.GGUFWriter(path, "nunchaku-test")
    w.add_custom_alignment(64)
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 1e-5)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo")
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**62))
    w.add_float64("test.f64", 0.1)
    w.add_array("test.arr_i32", [1, -2, 3])
    w.add_array("test.arr_f32", [0.5, -1.25])
    w.add_array("test.arr_str", ["x", "yz", ""])
    w.add_array("test.arr_bool", [True, False, True])
    w.add_key_value("test.arr_u8", [1, 2, 255], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.UINT8)
    w.add_key_value("test.arr_f64", [1.5, 2.5], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.FLOAT64)
    w.add_key_value("test.big_u32", list(range(2000)), gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.UINT32)
    for k, v in NESTED.items():
        w.add_array(k, v)

    rng = np.random.default_rng(0)
    w.add_tensor("plain.f32", rng.standard_normal((3, 5)).astype(np.float32))
    w.add_tensor("plain.f16", rng.standard_normal((2, 8)).astype(np.float16))
    w.add_tensor("plain.norm", np.ones(7, dtype=np.float32))
    w.add_tensor("plain.3d", np.zeros((2, 3, 4), dtype=np.float32))
    w.add_tensor("plain.4d", np.zeros((2, 1, 3, 2), dtype=np.float16))
    # Quantized through gguf-py's own numpy quantizers.
    for qt, shape in ((Q.Q8_0, (4, 64)), (Q.Q4_0, (2, 32)), (Q.Q5_1, (2, 64)), (Q.TQ1_0, (1, 256)),
                      (Q.MXFP4, (3, 32)), (Q.BF16, (3, 4))):
        data = gguf.quants.quantize(rng.standard_normal(shape).astype(np.float32), qt)
        w.add_tensor(f"quant.{qt.name.lower()}", data, raw_dtype=qt)
    # Types without a numpy quantizer: raw bytes of the size GGML_QUANT_SIZES gives.
    for qt, shape in ((Q.Q4_K, (2, 256)), (Q.Q6_K, (1, 512)), (Q.Q2_K, (1, 256)), (Q.IQ2_XXS, (1, 256)),
                      (Q.IQ4_XS, (2, 256)), (Q.IQ4_NL, (1, 64)), (Q.IQ1_M, (1, 256)), (Q.NVFP4, (1, 128)),
                      (Q.Q1_0, (1, 128))):
        block, nbytes = gguf.GGML_QUANT_SIZES[qt]
        rows, cols = shape
        raw = rng.integers(0, 256, size=(rows, cols // block * nbytes), dtype=np.uint8)
        w.add_tensor(f"raw.{qt.name.lower()}", raw, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    fixture = os.path.join(ROOT, "testdata", "gguf", "quant_small.gguf")
    os.makedirs(os.path.dirname(fixture), exist_ok=True)
    write_fixture(fixture)
    with open(fixture[:-5] + ".json", "w") as f:
        json.dump(describe(fixture), f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("wrote", fixture, os.path.getsize(fixture), "bytes")

    if not os.path.isdir(SHARED):
        print("no ../shared/testfiles: shared expectations not regenerated", file=sys.stderr)
        return
    files = ["gguf/stories260K.gguf"] + sorted(
        "vocab/" + n for n in os.listdir(os.path.join(SHARED, "vocab")) if n.endswith(".gguf"))
    out = {"generator": f"gguf-py {getattr(gguf, '__version__', '0.19')} GGUFReader", "files": {}}
    for rel in files:
        out["files"][rel] = describe(os.path.join(SHARED, rel))
    dst = os.path.join(ROOT, "testdata", "expected", "shared_gguf.json")
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(dst, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("wrote", dst, len(files), "files")


if __name__ == "__main__":
    main()
