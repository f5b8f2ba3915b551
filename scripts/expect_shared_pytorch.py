#!/usr/bin/env python3
"""Writes the PyTorch fixtures under testdata/pytorch/ and the expectations that
tests/test_pytorch.cpp compares against: for every file in ../shared/testfiles/pytorch
and every fixture, what torch.load reports (names, dtype, shape, stride,
storage_offset, which tensors share a storage, an FNV-1a 64 hash of each tensor's
elements in row-major order) plus the non-tensor leaves, flattened the way nunchaku
flattens them. The old tar files are not loadable by torch 2.x (they lack the
'tensors' entry it expects), so they are read here with tarfile + pickle directly.

Usage: python3 scripts/expect_shared_pytorch.py   (torch 2.x; rewrites the outputs)
"""
import collections
import io
import json
import os
import pickle
import struct
import sys
import tarfile

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "testfiles", "pytorch")
FIXTURES = os.path.join(ROOT, "testdata", "pytorch")
OUT = os.path.join(ROOT, "testdata", "expected", "shared_pytorch.json")

DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
          torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
          torch.bool: "BOOL", torch.complex64: "C64", torch.complex128: "C128"}


def fnv1a64(data: bytes) -> str:
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def is_scalar(v):
    return v is None or isinstance(v, (bool, int, float, str, bytes))


def scalar(v):
    if isinstance(v, bytes):
        return "<%d bytes>" % len(v)
    return v


def flatten(obj, name, tensors, meta):
    """Mirrors nunchaku's naming: dicts by key, sequences by index, a sequence
    of only scalars is one metadata array, empty dicts are kept as {}."""
    join = lambda k: k if not name else name + "." + k
    if isinstance(obj, torch.Tensor):
        tensors.append((name or "tensor", obj))
    elif isinstance(obj, dict):
        if not obj and name:
            meta[name] = {}
        for k, v in obj.items():
            flatten(v, join(str(k)), tensors, meta)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        items = list(obj)
        if all(is_scalar(x) for x in items):
            meta[name] = [scalar(x) for x in items]
        else:
            for i, v in enumerate(items):
                flatten(v, join(str(i)), tensors, meta)
    elif is_scalar(obj):
        meta[name] = scalar(obj)
    else:
        raise TypeError("unexpected %r at %s" % (type(obj), name))


def describe(obj):
    tensors, meta = [], {}
    flatten(obj, "", tensors, meta)
    out, groups = [], {}
    for i, (name, t) in enumerate(tensors):
        t = t.detach()
        ptr = t.untyped_storage().data_ptr()
        group = groups.setdefault(ptr, i) if t.numel() > 0 else -1
        raw = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        out.append({"name": name, "dtype": DTYPES[t.dtype], "shape": list(t.shape), "stride": list(t.stride()),
                    "contiguous": t.is_contiguous(), "storage_offset": t.storage_offset(),
                    "storage_group": group, "bytes": len(raw), "fnv1a": fnv1a64(raw)})
    return {"ok": True, "tensors": out, "metadata": meta}


def load_tar(path):
    """The pre-1.0 tar layout: 'storages' = count, then per storage a pickle
    (key, location, storage class), an int64 element count and the elements."""
    with tarfile.open(path) as tar:
        f = io.BytesIO(tar.extractfile("storages").read())
        storages = {}
        for _ in range(pickle.load(f)):
            key, _loc, cls = pickle.load(f)
            dtype = {"FloatStorage": torch.float32, "DoubleStorage": torch.float64, "LongStorage": torch.int64,
                     "IntStorage": torch.int32, "HalfStorage": torch.float16, "ByteStorage": torch.uint8}[cls.__name__]
            (numel,) = struct.unpack("<q", f.read(8))
            es = torch.empty(0, dtype=dtype).element_size()
            data = torch.frombuffer(bytearray(f.read(numel * es)), dtype=torch.uint8) if numel else torch.empty(0, dtype=torch.uint8)
            storages[key] = torch.storage.TypedStorage(wrap_storage=data.untyped_storage(), dtype=dtype, _internal=True)

        def storage(pid):
            assert pid[0] == "storage"
            return storages[pid[2]]

        # These files (written by burn's generator, not by torch) pass the
        # ('storage', class, key, location, numel) tuple itself instead of a
        # persistent id; accept both.
        def rebuild_v2(st, *args):
            return torch._utils._rebuild_tensor_v2(storage(st) if isinstance(st, tuple) else st, *args)

        class U(pickle.Unpickler):
            def persistent_load(self, pid):
                return storage(pid)

            def find_class(self, module, name):
                if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
                    return rebuild_v2
                return super().find_class(module, name)

        return U(tar.extractfile("pickle")).load()


# ---- fixtures -------------------------------------------------------------------

class FakeStorage:
    def __init__(self, key, numel, view=None):
        self.key, self.numel, self.view = key, numel, view


class FakeTensor:
    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, size, stride, False, collections.OrderedDict())

    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2, self.args)


class LegacyPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, FakeStorage):
            return ("storage", torch.FloatStorage, obj.key, "cpu", obj.numel, obj.view)
        return None


def legacy_with_storage_views():
    """torch < 0.4 wrote storage views as view metadata in the persistent id;
    torch 2.x still reads them but no longer writes them, so build one by hand."""
    root = FakeStorage("root", 12)
    view = FakeStorage("root", 12, ("v1", 2, 6))  # elements 2..7 of root
    obj = {"in_view": FakeTensor(view, 1, (2, 2), (2, 1)),   # root elements 3, 4, 5, 6
           "strided": FakeTensor(root, 0, (3,), (4,))}       # root elements 0, 4, 8
    f = io.BytesIO()
    for header in (0x1950a86a20f9469cfc6c, 1001,
                   {"protocol_version": 1001, "little_endian": True, "type_sizes": {"short": 2, "int": 4, "long": 4}}):
        pickle.dump(header, f, protocol=2)
    LegacyPickler(f, protocol=2).dump(obj)
    pickle.dump(["root"], f, protocol=2)
    f.write(struct.pack("<q", 12))
    f.write(torch.arange(12, dtype=torch.float32).numpy().tobytes())
    return f.getvalue()


def fixture_object():
    g = torch.Generator().manual_seed(0)
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    emb = torch.nn.Parameter(torch.randn(5, 3, generator=g))
    return {
        "model": {
            "base": base,
            "flat": base.view(24),            # same storage, another tensor object
            "transposed": base.t(),           # strides (1, 6)
            "rows": base[1:3],                # storage offset 6, contiguous
            "column": base[:, 2],             # storage offset 2, stride (6,)
            "expanded": torch.arange(3, dtype=torch.float16).reshape(1, 3).expand(4, 3),  # stride (0, 1)
            "embed.weight": emb,
            "lm_head.weight": emb,            # tied: the same Parameter twice
            "bf16": torch.randn(2, 3, generator=g).to(torch.bfloat16),
            "steps": torch.tensor(7),
        },
        "layers": [{"w": torch.ones(2, dtype=torch.int32)}, {"w": torch.tensor([-1, 2], dtype=torch.int8)}],
        "step": 3, "name": "fixture", "lr": 0.5, "betas": (0.9, 0.999), "nothing": None, "flag": True, "empty": {},
    }


# nunchaku reports a legacy storage view as its root storage: storage key = the
# root's, storage_offset counted from the root's first element, so that tensors
# aliasing the same bytes share a key. torch reports offsets within the view.
ROOT_RELATIVE = {"testdata/legacy_storage_views.pt": {"in_view": {"storage_offset": 3, "storage_group": 0},
                                                        "strided": {"storage_group": 0}}}


def write_fixtures():
    os.makedirs(FIXTURES, exist_ok=True)
    buf = io.BytesIO()  # a BytesIO target names the zip's top folder "archive"
    torch.save(fixture_object(), buf)
    open(os.path.join(FIXTURES, "zip_views.pt"), "wb").write(buf.getvalue())
    torch.save(fixture_object(), os.path.join(FIXTURES, "legacy_views.pt"), _use_new_zipfile_serialization=False)
    open(os.path.join(FIXTURES, "legacy_storage_views.pt"), "wb").write(legacy_with_storage_views())
    # The same tensors through torch.save and safetensors, for the cross-format
    # byte-equality test (the shared mnist.pt / mnist.safetensors are two
    # different training runs: same names and shapes, different values).
    from safetensors.torch import save_file
    g = torch.Generator().manual_seed(1)
    cross = {"embed.weight": torch.randn(8, 4, generator=g), "layers.0.w": torch.randn(4, 4, generator=g).to(torch.bfloat16),
             "layers.0.b": torch.arange(4, dtype=torch.int64), "steps": torch.tensor(3)}
    torch.save(cross, os.path.join(FIXTURES, "cross.pt"))
    save_file(cross, os.path.join(FIXTURES, "cross.safetensors"))


def main():
    write_fixtures()
    files = {}
    for prefix, folder in (("shared", SHARED), ("testdata", FIXTURES)):
        if not os.path.isdir(folder):
            print("skipping absent", folder, file=sys.stderr)
            continue
        for fn in sorted(os.listdir(folder)):
            if fn.endswith(".safetensors"):
                continue
            path = os.path.join(folder, fn)
            try:
                obj = load_tar(path) if fn.endswith(".tar") else torch.load(path, map_location="cpu", weights_only=True)
                d = files[prefix + "/" + fn] = describe(obj)
                for t in d["tensors"]:
                    if t["name"] in (fix := ROOT_RELATIVE.get(prefix + "/" + fn, {})):
                        t.update(fix[t["name"]])
                        t["note"] = "root-relative: torch reports the view storage, nunchaku its root"
            except Exception as e:  # broken.pt
                files[prefix + "/" + fn] = {"ok": False, "error": type(e).__name__}
    with open(OUT, "w") as f:
        json.dump({"generator": "scripts/expect_shared_pytorch.py", "torch": torch.__version__, "files": files}, f, indent=1)
        f.write("\n")
    print("wrote", OUT, len(files), "files")


if __name__ == "__main__":
    main()
