#!/usr/bin/env python3
"""Cross-checks docs/schema/*.json with Python's jsonschema (Draft 2020-12), independently of
the C++ checker the tests use (tests/json_schema_check.hpp): each schema must be a valid
2020-12 schema, and the real output of each command on the fixtures must validate.

Not needed by the tests. Usage: scripts/check_json_schemas.py [build/nunchaku]
Needs: pip install jsonschema (4.x).
"""
import json
import os
import subprocess
import sys
import tempfile

import jsonschema

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "nunchaku")
T = lambda rel: os.path.join(ROOT, "testdata", rel)  # noqa: E731


def schema(name):
    with open(os.path.join(ROOT, "docs", "schema", name + ".json")) as f:
        s = json.load(f)
    jsonschema.Draft202012Validator.check_schema(s)
    return jsonschema.Draft202012Validator(s)


def run(args, stdin="", codes=(0,)):
    p = subprocess.run([BIN] + args, input=stdin, capture_output=True, text=True)
    if p.returncode not in codes:
        sys.exit(f"nunchaku {' '.join(args)}: exit {p.returncode}: {p.stderr}")
    return p.stdout


def main():
    tmp = tempfile.mkdtemp(prefix="nk-schema-")
    m = T("models/llama")
    docs = {
        "inspect": [run(["inspect", T(p), "--json"]) for p in
                    ("models/llama", "models/llama-gguf/model.gguf", "models/llama-pt/model_zip.pt", "models/module-tree",
                     "gguf/quant_small.gguf")] + [run(["inspect", m, "--json", "--verify"])],
        "estimate": [run(["estimate", m, "--json"]), run(["estimate", m, "--json", "--vram", "560M", "--batch", "512"], codes=(3,)),
                     run(["estimate", m, "--json", "--vram", "1G", "--runtime", "all"]),
                     run(["estimate", m, "--json", "--mode", "lora"]), run(["estimate", T("models/module-tree"), "--json"])],
        "plan": [run(["plan", m, "--json", "--vram", "600M", "--cpu-ram", "1G"]),
                 run(["plan", m, "--json", "--vram", "600K", "--cpu-ram", "100K"], codes=(3,)),
                 run(["plan", m, "--json", "--vram", "600K", "--cpu-ram", "1.1M", "--disk"], codes=(0, 3))],
        "load": [run(["load", m, "--json", "--verify"]), run(["load", m, "--json", "--plan", T("plan/llama-format1.json")])],
        "convert": [run(["convert", m, os.path.join(tmp, "q8.gguf"), "--dtype", "q8_0", "--json", "--verify"]),
                    run(["convert", m, os.path.join(tmp, "st"), "--shard-size", "100KB", "--json"])],
        "version": [run(["--version", "--json"])],
    }
    stats = os.path.join(tmp, "stats.json")
    lines = run(["run", T("run/llama-spm"), "--max-tokens", "3", "-q", "--stats", stats],
                'Once upon a time\n{"id": "a", "prompt": "x", "temperature": -1}\n'
                '{"id": "lp", "prompt": "x", "logprobs": 2}\n')
    docs["run-stats"] = [open(stats).read()]
    trace_run, trace_load = os.path.join(tmp, "run-trace.json"), os.path.join(tmp, "load-trace.json")
    run(["run", T("run/llama-spm"), "--max-tokens", "3", "-q", "--trace", trace_run], "Once upon a time\n")
    run(["load", m, "--copy", "--trace", trace_load])
    docs["trace"] = [open(trace_run).read(), open(trace_load).read()]
    docs["run-result"] = lines.splitlines()
    docs["tokenize"] = run(["tokenize", T("run/llama-spm"), "--json"], '{"id": "q1", "prompt": "hi"}\n{"id": 4, "prompt": "x"}\nplain\n').splitlines()
    bench = ["bench", T("run/llama-spm"), "-p", "8", "-n", "4", "-r", "2", "-b", "1,2", "-q"]
    docs["bench"] = [run(bench + ["--json"])] + run(bench + ["-o", "jsonl"]).splitlines()
    failed = 0
    for name, texts in docs.items():
        v = schema(name)
        for t in texts:
            for e in v.iter_errors(json.loads(t)):
                failed += 1
                print(f"{name}: /{'/'.join(map(str, e.absolute_path))}: {e.message}")
        print(f"{name}: {len(texts)} document(s) checked")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
