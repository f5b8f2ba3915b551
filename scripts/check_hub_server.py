#!/usr/bin/env python3
"""huggingface_hub's own client against nunchaku's Hub look-alike (tests/hub/hub_server.hpp),
so the server the [hub] tests run against stays faithful to the Hub:

  hf_hub_download (small file: 200; weight file: HEAD 302 + GET from the file store),
  get_safetensors_metadata (Range reads of each shard), model_info(files_metadata=True),
  list_repo_tree(recursive=True), the errors (GatedRepoError, RepositoryNotFoundError,
  RevisionNotFoundError, EntryNotFoundError), snapshot_download into a fresh HF cache, and
  then `nunchaku estimate ORG/NAME` on that cache with HF_HUB_OFFLINE=1 and no server.

  --write-fixture  also (re)writes testdata/hf-cache: the cache huggingface_hub's
                   snapshot_download makes of testdata/run/llama-spm (test_hub.cpp reads it).

Needs build/nunchaku and build/nunchaku_hub_server (cmake --build build) and the venv's
huggingface_hub:  /work/venv/bin/python scripts/check_hub_server.py [--write-fixture]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"
FIXTURE_REPO = "nunchaku-test/llama-spm"


def start_server(repos):
    args = [str(BUILD / "nunchaku_hub_server")] + [f"{rid}={spec}" for rid, spec in repos]
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    endpoint = proc.stdout.readline().strip()
    if not endpoint.startswith("http://"):
        sys.exit(f"check_hub_server: the server did not start ({endpoint!r})")
    return proc, endpoint


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        check.failed += 1


check.failed = 0


def nunchaku(args, env):
    r = subprocess.run([str(BUILD / "nunchaku")] + args, env=env, capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--write-fixture", action="store_true")
    opts = ap.parse_args()
    sharded = ROOT / "testdata/models/llama-sharded"
    spm = ROOT / "testdata/run/llama-spm"
    work = Path(tempfile.mkdtemp(prefix="nunchaku-hubcheck-"))
    proc, endpoint = start_server([("org/sharded", sharded), ("org/gated", f"{sharded}:gated"), (FIXTURE_REPO, spm)])
    # huggingface_hub reads these when imported.
    os.environ.update({"HF_ENDPOINT": endpoint, "HF_HOME": str(work / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1",
                       "HF_HUB_DISABLE_PROGRESS_BARS": "1"})
    os.environ.pop("HF_TOKEN", None)
    import huggingface_hub as hh
    from huggingface_hub.errors import (EntryNotFoundError, GatedRepoError, RepositoryNotFoundError,
                                        RevisionNotFoundError)
    try:
        cfg = hh.hf_hub_download("org/sharded", "config.json")
        check(Path(cfg).read_bytes() == (sharded / "config.json").read_bytes(), "hf_hub_download config.json (200)")
        shard = "model-00002-of-00005.safetensors"
        got = hh.hf_hub_download("org/sharded", shard)
        check(Path(got).read_bytes() == (sharded / shard).read_bytes(), f"hf_hub_download {shard} (302 to the file store)")
        check(Path(got).is_symlink() and "blobs" in os.readlink(got), "the cache links snapshots/ into blobs/")

        meta = hh.get_safetensors_metadata("org/sharded")
        count = sum(sum(m.parameter_count.values()) for m in meta.files_metadata.values())
        rc, out, _ = nunchaku(["inspect", str(sharded), "--json"], os.environ.copy())
        check(meta.sharded and len(meta.files_metadata) == 5, "get_safetensors_metadata: 5 shards")
        check(rc == 0 and count == json.loads(out)["num_parameters"], f"get_safetensors_metadata: {count} parameters")

        info = hh.model_info("org/sharded", files_metadata=True)
        sizes = {s.rfilename: s.size for s in info.siblings}
        check(sizes == {p.name: p.stat().st_size for p in sharded.iterdir()}, "model_info(files_metadata=True) sizes")
        tree = {f.path for f in hh.list_repo_tree("org/sharded", recursive=True)}
        check(tree == {p.name for p in sharded.iterdir()}, "list_repo_tree(recursive=True)")

        for name, call, err in [
            ("gated repo without a token", lambda: hh.hf_hub_download("org/gated", "config.json"), GatedRepoError),
            ("gated repo, token without access", lambda: hh.hf_hub_download("org/gated", "config.json", token="hf_other"), GatedRepoError),
            ("unknown repo", lambda: hh.hf_hub_download("org/absent", "config.json"), RepositoryNotFoundError),
            ("unknown revision", lambda: hh.hf_hub_download("org/sharded", "config.json", revision="v9"), RevisionNotFoundError),
            ("unknown file", lambda: hh.hf_hub_download("org/sharded", "absent.json"), EntryNotFoundError),
        ]:
            try:
                call()
                check(False, f"{name}: {err.__name__}")
            except err:
                check(True, f"{name}: {err.__name__}")
        got = hh.hf_hub_download("org/gated", "config.json", token="hf_granted")
        check(Path(got).exists(), "gated repo with a granted token")

        cache = work / "cache"
        hh.snapshot_download("org/sharded", cache_dir=str(cache))
        if opts.write_fixture:
            fixture = ROOT / "testdata/hf-cache"
            shutil.rmtree(fixture, ignore_errors=True)
            hh.snapshot_download(FIXTURE_REPO, cache_dir=str(fixture))
            shutil.rmtree(fixture / ".locks", ignore_errors=True)
            print(f"wrote {fixture.relative_to(ROOT)}")
    finally:
        proc.stdin.close()
        proc.wait()
    # The server is gone: the cache huggingface_hub wrote must be enough.
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update({"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": endpoint, "XDG_CACHE_HOME": str(work / "xdg")})
    rc, out, err = nunchaku(["estimate", "org/sharded", "--json"], env)
    check(rc == 0 and json.loads(out)["num_parameters"] == count,
          "nunchaku estimate org/sharded from huggingface_hub's cache, HF_HUB_OFFLINE=1, no server" + ("" if rc == 0 else ": " + err))
    shutil.rmtree(work, ignore_errors=True)
    print("check_hub_server: " + ("all ok" if not check.failed else f"{check.failed} FAILED"))
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
