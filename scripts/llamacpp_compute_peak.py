"""What llama.cpp's CPU compute buffer is made of, case by case (docs/measured_llamacpp.md,
"What the compute buffer is made of").

    PYTHONPATH=<llama.cpp>/gguf-py python scripts/llamacpp_compute_peak.py check [--dir /tmp/nunchaku-measure] [--golden testdata/golden/measured_llamacpp.json] [--out testdata/golden/llamacpp_compute_phases.json]
    PYTHONPATH=<llama.cpp>/gguf-py python scripts/llamacpp_compute_peak.py show "CASE NAME" [--at NODE,...] [--nodes]

For a case of the golden (scripts/measure_llamacpp.py), in a fresh process: load its GGUF in
llama.cpp's memory-fit mode (no_alloc: weights and caches have dummy buffers, so the graph
allocator skips them), make the context, and build the reserved graph again
(llama_graph_reserve: n_ubatch tokens, n_seq_max sequences, n_ubatch outputs, the whole
cache). Then replay that graph through this file's own re-implementation of ggml-alloc's
planner (ggml/src/ggml-alloc.c at llama-cpp-python 0.3.36: leafs and inputs first; each node
in order takes a parent's memory in place where the op allows it and the parent has no other
user, otherwise a best-fit free block, else the tail; a tensor is freed after its last user;
32-byte alignment). `check` prints, per case, the replayed size beside the logged one, the
peak reached before the output projection (the layers) and the offset the logits land at;
`--out` writes those phases for every case (the test
tests/test_estimate_measured_llamacpp.cpp reads them); `show` lists the tensors alive when the buffer reaches its size (--at: also after those
nodes, with the free blocks; --nodes: the whole graph).
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure_llamacpp as M  # noqa: E402

MiB = 1 << 20
ALIGN = 32  # the CPU buffer type's alignment (TENSOR_ALIGNMENT)
MAX_SRC = 10
FLAG_INPUT, FLAG_OUTPUT = 1, 2
KV_TYPES = {"f16": 1, "q8_0": 8, "q4_0": 2, "f32": 0}


class Tensor(ctypes.Structure):
    pass


# struct ggml_tensor (ggml.h): GGML_MAX_DIMS 4, GGML_MAX_OP_PARAMS 64, GGML_MAX_SRC 10, GGML_MAX_NAME 64
Tensor._fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4), ("nb", ctypes.c_size_t * 4),
                   ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16), ("flags", ctypes.c_int32),
                   ("src", ctypes.POINTER(Tensor) * MAX_SRC), ("view_src", ctypes.POINTER(Tensor)), ("view_offs", ctypes.c_size_t),
                   ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64), ("extra", ctypes.c_void_p), ("padding", ctypes.c_char * 8)]


class Graph(ctypes.Structure):  # struct ggml_cgraph's leading fields (ggml-impl.h)
    _fields_ = [("size", ctypes.c_int), ("n_nodes", ctypes.c_int), ("n_leafs", ctypes.c_int),
                ("nodes", ctypes.POINTER(ctypes.POINTER(Tensor))), ("grads", ctypes.c_void_p), ("grad_accs", ctypes.c_void_p),
                ("leafs", ctypes.POINTER(ctypes.POINTER(Tensor)))]


def padded(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


class FreeList:
    """Free blocks sorted by offset; the last one is the open tail. `top` is the high-water mark."""

    def __init__(self):
        self.blocks = [[0, 1 << 62]]
        self.top = 0

    def take(self, size):
        size = padded(size)
        fits = [i for i, b in enumerate(self.blocks[:-1]) if b[1] >= size]
        # the smallest block that fits (the later of equals), else the tail
        i = min(fits, key=lambda j: (self.blocks[j][1], -j)) if fits else len(self.blocks) - 1
        b = self.blocks[i]
        off = b[0]
        b[0] += size
        b[1] -= size
        if b[1] == 0:
            del self.blocks[i]
        self.top = max(self.top, off + size)
        return off

    def give(self, off, size):
        size = padded(size)
        for i, b in enumerate(self.blocks):
            if b[0] + b[1] == off:  # after this block: grow it, maybe into the next
                b[1] += size
                if i + 1 < len(self.blocks) and b[0] + b[1] == self.blocks[i + 1][0]:
                    b[1] += self.blocks.pop(i + 1)[1]
                return
            if off + size == b[0]:  # before it: grow it down, maybe into the previous
                b[0], b[1] = off, b[1] + size
                if i > 0 and self.blocks[i - 1][0] + self.blocks[i - 1][1] == b[0]:
                    self.blocks[i - 1][1] += self.blocks.pop(i)[1]
                return
        j = next((j for j, b in enumerate(self.blocks) if b[0] >= off), len(self.blocks))
        self.blocks.insert(j, [off, size])


class Planner:
    """The graph allocator's plan for one graph; `events` records (node index, what, tensor, offset, bytes)."""

    def __init__(self, ggml, nodes, leafs):
        self.ggml, self.nodes, self.leafs = ggml, nodes, leafs
        self.free = FreeList()
        self.state = {}
        self.events = []
        self.step = 0
        self.watch = {}

    def st(self, p):
        k = ctypes.addressof(p.contents)
        if k not in self.state:
            self.state[k] = dict(live=False, off=None, users=0, views=0)
        return self.state[k]

    def size(self, p):
        return self.ggml.ggml_nbytes(p)

    def name(self, p):
        return p.contents.name.decode()

    def same_layout(self, a, b):
        a, b = a.contents, b.contents
        return a.type == b.type and list(a.ne) == list(b.ne) and list(a.nb) == list(b.nb)

    def reuse(self, p, parent, owner):
        """p takes the memory of `parent` (owner: the tensor that holds it, the parent or its view source)."""
        s, o = self.st(p), self.st(owner)
        s["off"] = o["off"]
        self.st(parent)["live"] = False
        o["live"] = False
        self.events.append((self.step, "free", self.name(owner), o["off"], self.size(owner)))
        extra = padded(self.size(owner)) - padded(self.size(p))
        if extra > 0:
            self.free.give(o["off"] + padded(self.size(p)), extra)
        self.events.append((self.step, "alloc", self.name(p), s["off"], self.size(p)))

    def in_place(self, p):
        t = p.contents
        if not self.ggml.ggml_op_can_inplace(t.op):
            return False
        for j in range(MAX_SRC):
            par = t.src[j]
            if not par or not self.st(par)["live"]:  # external, freed or taken already
                continue
            pt = par.contents
            if pt.flags & FLAG_OUTPUT or (pt.view_src and pt.view_src.contents.flags & FLAG_OUTPUT):
                continue
            if not self.same_layout(p, par):
                continue
            ps = self.st(par)
            if ps["users"] != 1 or ps["views"] != 0:
                continue
            if not pt.view_src:
                self.reuse(p, par, par)
                return True
            vs = self.st(pt.view_src)
            if vs["views"] == 1 and vs["users"] == 0 and pt.view_src.contents.data == pt.data:
                self.reuse(p, par, pt.view_src)
                return True
        return False

    def allocate(self, p):
        s, t = self.st(p), p.contents
        if t.data or t.buffer or s["live"] or t.view_src:
            return
        s["live"] = True
        if self.in_place(p):
            return
        s["off"] = self.free.take(self.size(p))
        self.events.append((self.step, "alloc", self.name(p), s["off"], self.size(p)))

    def release(self, p):
        if p.contents.flags & FLAG_OUTPUT:
            return
        s = self.st(p)
        self.free.give(s["off"], self.size(p))
        s["live"] = False
        self.events.append((self.step, "free", self.name(p), s["off"], self.size(p)))

    def run(self, watch=()):
        for lf in self.leafs:
            self.allocate(lf)
        for nd in self.nodes:
            t = nd.contents
            if t.view_src and t.op != 0:
                self.st(t.view_src)["views"] += 1
            if t.flags & FLAG_INPUT:
                self.allocate(nd)
            for j in range(MAX_SRC):
                if t.src[j]:
                    self.st(t.src[j])["users"] += 1
                    if t.src[j].contents.flags & FLAG_INPUT:
                        self.allocate(t.src[j])
        for i, nd in enumerate(self.nodes):
            self.step = i
            t = nd.contents
            for j in range(MAX_SRC):
                if t.src[j]:
                    self.allocate(t.src[j])
            self.allocate(nd)
            for j in range(MAX_SRC):
                par = t.src[j]
                if not par:
                    continue
                ps = self.st(par)
                ps["users"] -= 1
                if ps["users"] or ps["views"]:
                    continue
                vsrc = par.contents.view_src
                if vsrc:
                    vs = self.st(vsrc)
                    vs["views"] -= 1
                    if vs["views"] == 0 and vs["users"] == 0 and vs["live"]:
                        self.release(vsrc)
                elif ps["live"]:
                    self.release(par)
            if i in watch:
                self.watch[i] = ([tuple(b) for b in self.free.blocks[:-1]], self.live_until(len(self.events)))

    def live_until(self, n_events):
        live = {}
        for (_, kind, nm, off, size) in self.events[:n_events]:
            if kind == "alloc":
                live[(nm, off)] = (off, size)
            else:
                live.pop((nm, off), None)
        return sorted(((off, size, nm) for (nm, _), (off, size) in live.items()))

    def at_peak(self):
        """The live tensors when the high-water mark is first reached, and the node that reached it."""
        top = 0
        for n, (step, kind, _, off, size) in enumerate(self.events):
            if kind == "alloc" and off + padded(size) > top:
                top = off + padded(size)
                if top == self.free.top:
                    return step, self.live_until(n + 1)
        return None, []

    def phases(self):
        """The layers' phase (before the output projection) and the output phase: each one's
        top (the high-water mark it reaches) and the bytes alive at that moment (the top less
        the holes below it), and the logits' offset."""
        top, live, at, n_top = 0, 0, None, 0
        alive = {}
        for n, (_, kind, nm, off, size) in enumerate(self.events):
            if nm == "result_output" and kind == "alloc":
                at = off
            if kind == "alloc":
                alive[(nm, off)] = padded(size)
            else:
                alive.pop((nm, off), None)
            if kind == "alloc" and off + padded(size) > top:
                top = off + padded(size)
                if at is None:
                    layers = (top, sum(alive.values()))
                else:
                    return {"layers_top": layers[0], "layers_live": layers[1], "logits_at": at,
                            "output_top": top, "output_live": sum(alive.values())}
        return {"layers_top": layers[0], "layers_live": layers[1], "logits_at": at, "output_top": None, "output_live": None}


def reserved_graph(path, case):
    """llama.cpp's reserved graph for the case: (ggml library, nodes, leafs, logged compute lines)."""
    # the compute graph is the same with the weights repacked (a replayed repack case matches)
    L, logs, _keep, mp = M.llama_cpu(repack=False)
    mp.no_alloc = True
    mp.load_mode = 0
    model = L.llama_model_load_from_file(str(path).encode(), mp)
    if not model:
        sys.exit(f"llama.cpp could not load {path}")
    ctx_len, nseq, ub = case["context"], case["sequences"], case["ubatch"]
    cp = L.llama_context_default_params()
    cp.n_ctx = ctx_len * nseq
    cp.n_batch = max(ub, 2048)
    cp.n_ubatch = ub
    cp.n_seq_max = nseq
    cp.n_threads = cp.n_threads_batch = 2
    cp.flash_attn_type = 1 if case["flash_attention"] else 0
    cp.type_k = cp.type_v = KV_TYPES[case["kv_type"]]
    cp.swa_full = bool(case["swa_full"])
    c = L.llama_init_from_model(model, cp)
    if not c:
        sys.exit("llama.cpp could not create a context")
    reserve = getattr(L.llama_cpp._lib, "_Z19llama_graph_reserveP13llama_contextjjj")  # llama-ext.h, C++ linkage
    reserve.restype = ctypes.c_void_p
    reserve.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32]
    n_tokens = min(ub, ctx_len * nseq)
    g = Graph.from_address(reserve(c, n_tokens, nseq, n_tokens))
    ggml = ctypes.CDLL(str(Path(L.__file__).parent / "lib" / "libggml-base.so"))
    ggml.ggml_nbytes.restype = ctypes.c_size_t
    ggml.ggml_nbytes.argtypes = [ctypes.POINTER(Tensor)]
    ggml.ggml_op_desc.restype = ctypes.c_char_p
    ggml.ggml_op_desc.argtypes = [ctypes.POINTER(Tensor)]
    ggml.ggml_is_contiguous.restype = ctypes.c_bool
    ggml.ggml_is_contiguous.argtypes = [ctypes.POINTER(Tensor)]
    ggml.ggml_op_can_inplace.restype = ctypes.c_bool
    ggml.ggml_op_can_inplace.argtypes = [ctypes.c_int]
    logged = [l for l in "".join(logs).splitlines() if "compute buffer size" in l]
    return ggml, [g.nodes[i] for i in range(g.n_nodes)], [g.leafs[i] for i in range(g.n_leafs)], logged


def gguf_for(case, d):
    s = M.MODELS[case["model"]]
    path = Path(d) / case["file"]
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        M.write_gguf(tmp, case["model"], s, case["layers"], case["weights"])
        tmp.rename(path)
    return path


def replay(case, d, watch=(), nodes_too=False):
    ggml, nodes, leafs, logged = reserved_graph(gguf_for(case, d), case)
    p = Planner(ggml, nodes, leafs)
    p.run(watch)
    ph = {k: None if v is None else round(v / MiB, 3) for k, v in p.phases().items()}
    step, live = p.at_peak()
    out = {"name": case["name"], "replayed_mib": round(p.free.top / MiB, 2), "logged": logged, "phases_mib": ph,
           "peak_node": nodes[step].contents.name.decode() if step is not None else None,
           "at_peak": [[round(o / MiB, 3), round(z / MiB, 3), nm] for o, z, nm in live]}
    if watch:
        out["watch"] = {str(i): {"node": nodes[i].contents.name.decode(),
                                 "free": [[round(o / MiB, 3), round(z / MiB, 3)] for o, z in blocks],
                                 "live": [[round(o / MiB, 3), round(z / MiB, 3), nm] for o, z, nm in live_i]}
                        for i, (blocks, live_i) in p.watch.items()}
    if nodes_too:
        def flags(t):
            f = t.contents.flags
            return ("in " if f & FLAG_INPUT else "") + ("out " if f & FLAG_OUTPUT else "") + \
                ("ext " if t.contents.buffer or t.contents.data else "") + \
                (f"view:{t.contents.view_src.contents.name.decode()} " if t.contents.view_src else "") + \
                ("" if ggml.ggml_is_contiguous(t) else "strided ")
        out["nodes"] = [f"#{i} {ggml.ggml_op_desc(n).decode()} {n.contents.name.decode()} {list(n.contents.ne)} "
                        f"t{n.contents.type} {ggml.ggml_nbytes(n) / MiB:.3f} {flags(n)}<- "
                        f"{[n.contents.src[j].contents.name.decode() for j in range(MAX_SRC) if n.contents.src[j]]}"
                        for i, n in enumerate(nodes)]
        out["leafs"] = [f"{lf.contents.name.decode()} {list(lf.contents.ne)} t{lf.contents.type} {flags(lf)}" for lf in leafs]
    return out


def one(args):
    """In this (fresh) process: one case's replay as JSON on stdout."""
    g = json.loads(Path(args.golden).read_text())
    case = next(c for c in g["cases"] if c["name"] == args.case)
    watch = [int(x) for x in args.at.split(",")] if args.at else []
    print(json.dumps(replay(case, args.dir, watch, args.nodes)))


def run_one(name, args, extra=()):
    r = subprocess.run([sys.executable, __file__, "_one", name, "--dir", args.dir, "--golden", args.golden, *extra],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(r.stderr[-3000:] + f"\nreplay failed: {name}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def phases(r):
    p = r["phases_mib"]
    return (f"layers top {p['layers_top']} (alive {p['layers_live']}), output top {p['output_top']} (alive {p['output_live']}, "
            f"logits at {p['logits_at']})")


def check(args):
    g = json.loads(Path(args.golden).read_text())
    bad = 0
    rows = []
    for c in g["cases"]:
        r = run_one(c["name"], args)
        rows.append({"name": c["name"], "replayed_mib": r["replayed_mib"], **r["phases_mib"]})
        ok = abs(r["replayed_mib"] - c["measured_mib"]["compute"]) < 0.006
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {c['name']}: logged {c['measured_mib']['compute']:.2f} replayed {r['replayed_mib']:.2f} MiB; "
              f"{phases(r)}, peak at {r['peak_node']}")
    print(f"{len(g['cases']) - bad} of {len(g['cases'])} cases replayed to llama.cpp's logged size")
    if args.out and not bad:
        doc = {"source": "scripts/llamacpp_compute_peak.py check: each case of " + Path(args.golden).name + " replayed (MiB)",
               "fields": {"layers_top": "the buffer's high-water mark before the output projection",
                          "layers_live": "the bytes alive when the layers reached it (the rest: holes)",
                          "logits_at": "the offset the logits are placed at",
                          "output_top": "the high-water mark the output projection raises it to (null: it does not)",
                          "output_live": "the bytes alive then"},
               "cases": rows}
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.out}")
    sys.exit(1 if bad else 0)


def show(args):
    extra = (["--at", args.at] if args.at else []) + (["--nodes"] if args.nodes else [])
    r = run_one(args.case, args, extra)
    print(f"{r['name']}: replayed {r['replayed_mib']:.2f} MiB ({'; '.join(r['logged'])}); {phases(r)}")
    print(f"alive when the buffer reaches its size (at {r['peak_node']}): offset .. end MiB, size MiB, tensor")
    for o, z, nm in r["at_peak"]:
        print(f"  {o:10.3f} .. {o + z:10.3f}  {z:9.3f}  {nm}")
    for i, w in r.get("watch", {}).items():
        print(f"after node {i} ({w['node']}): free blocks {w['free']}")
        for o, z, nm in w["live"]:
            print(f"  {o:10.3f} .. {o + z:10.3f}  {z:9.3f}  {nm}")
    for line in r.get("leafs", []):
        print("leaf", line)
    for line in r.get("nodes", []):
        print(line)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("check", "show", "_one"):
        a = sub.add_parser(name)
        if name != "check":
            a.add_argument("case", help="a case name of the golden, as scripts/measure_llamacpp.py table prints it")
            a.add_argument("--at", default="", help="node indices to list the live tensors and free blocks after")
            a.add_argument("--nodes", action="store_true", help="print the whole graph")
        a.add_argument("--dir", default=os.environ.get("MEASURE_DIR", "/tmp/nunchaku-measure"))
        a.add_argument("--golden", default="testdata/golden/measured_llamacpp.json")
        if name == "check":
            a.add_argument("--out", default="", help="write the phases of every case (testdata/golden/llamacpp_compute_phases.json)")
    args = ap.parse_args()
    {"check": check, "show": show, "_one": one}[args.cmd](args)


if __name__ == "__main__":
    main()
