#!/usr/bin/env python3
"""Writes testdata/run/openai_schemas.json: the JSON schemas of the `openai` package's
ChatCompletion and Completion types (what a /v1/chat/completions or /v1/completions
response body is), for tests/test_run_unix.cpp to check `nunchaku run`'s OpenAI batch
output against. With a path argument it also validates that JSONL (nunchaku run output
for OpenAI batch input) with the package's own types.

  pip install openai && python3 scripts/make_openai_schema.py [out.jsonl]
"""
import json
import os
import sys

import openai
from openai.types import Completion
from openai.types.chat import ChatCompletion

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    out = {
        "openai_version": openai.__version__,
        "chat.completion": ChatCompletion.model_json_schema(),
        "text_completion": Completion.model_json_schema(),
    }
    path = os.path.join(ROOT, "testdata", "run", "openai_schemas.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    print("wrote", path)
    for p in sys.argv[1:]:
        with open(p) as f:
            for n, line in enumerate(f, 1):
                o = json.loads(line)
                assert set(o) >= {"id", "custom_id", "response", "error"}, (n, o.keys())
                r = o["response"]
                if r["status_code"] != 200:
                    continue
                body = r["body"]
                t = ChatCompletion if body["object"] == "chat.completion" else Completion
                t.model_validate(body, strict=True)
        print("validated", p)


if __name__ == "__main__":
    main()
