#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for SECONDS (default 60).
#   ./scripts/fuzz.sh 300      # 5 minutes per parser
#   ./scripts/fuzz.sh 300 fuzz_tokenizer fuzz_requests   # only these targets
#   ./scripts/fuzz.sh --total 1800   # a campaign: 30 minutes split evenly over the targets
#   ./scripts/fuzz.sh --build-only   # build (and report) every target, run none
# Builds and runs at nice 19, one target at a time (JOBS=2 compile jobs by default; PARALLEL=2
# runs two targets at once). The table: executions, seconds, corpus files, result per target.
# Targets: safetensors, gguf, pytorch, pickle, tokenizer, unicode_norm, requests, text
# (escaping), sampler, describe (GGUF -> model validation); and (issue 41) file (the
# file/mmap path), open (sniffing and open_checkpoint dispatch), index (index.json and shard
# merging), gguf_split (split-GGUF merging), config (config.json and its checks, then
# estimate/plan), estimate (estimate/plan arithmetic on hostile GGUF dimensions), plan_json
# (run --plan input), loader (load_checkpoint), json_names (tensor names through dump_json),
# hub (the Hub client's responses: headers, redirects, listing/index/manifest JSON, Range reads);
# trace (the trace JSON `nunchaku trace --svg` reads, drawn as SVG).
# A target with tests/fuzz/<target>.dict runs with that libFuzzer dictionary (-dict).
# Seeds come from testdata/ (and ../shared/testfiles when present); the corpus
# grows in fuzz-corpus/<target>/ (git-ignored). Crashes land in fuzz-corpus/crashes/.
# The table printed at the end is also written to fuzz-corpus/summary.txt (docs/hardening.md
# keeps the campaigns' numbers).
set -euo pipefail
cd "$(dirname "$0")/.."
TOTAL=""
BUILD_ONLY=0
if [[ "${1:-}" == "--total" ]]; then TOTAL=$2; shift 2
elif [[ "${1:-}" == "--build-only" ]]; then BUILD_ONLY=1; shift
fi
SECONDS_PER=60
if [[ -z $TOTAL && $BUILD_ONLY -eq 0 && $# -gt 0 ]]; then SECONDS_PER=$1; shift; fi
ONLY=("$@")
./scripts/setup.sh --fuzz
BUILD_DIR=build-fuzz
if [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
  CC=clang CXX=clang++ cmake -S . -B $BUILD_DIR -G Ninja -DNUNCHAKU_FUZZ=ON -DNUNCHAKU_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
TARGETS=(fuzz_text fuzz_unicode_norm fuzz_gguf fuzz_safetensors fuzz_pytorch fuzz_pickle fuzz_tokenizer
         fuzz_describe fuzz_sampler fuzz_requests fuzz_file fuzz_open fuzz_index fuzz_gguf_split fuzz_config
         fuzz_estimate fuzz_plan_json fuzz_loader fuzz_json_names fuzz_hub fuzz_trace)
if ((${#ONLY[@]})); then TARGETS=("${ONLY[@]}"); fi
# One target at a time: each links only the layer it fuzzes (CMakeLists.txt), so a target
# whose layer does not build with this clang is reported and the others still run.
BUILT=()
for t in "${TARGETS[@]}"; do
  if nice -n 19 cmake --build $BUILD_DIR -j "${JOBS:-2}" --target "$t" >"/tmp/nunchaku-fuzz-build-$t.log" 2>&1; then
    BUILT+=("$t")
  else
    echo "$t: build failed (see /tmp/nunchaku-fuzz-build-$t.log)" >&2
  fi
done
if ((BUILD_ONLY)); then
  echo "built ${#BUILT[@]} of ${#TARGETS[@]}: ${BUILT[*]}"
  exit $(( ${#BUILT[@]} == ${#TARGETS[@]} ? 0 : 1 ))
fi
((${#BUILT[@]})) || { echo "no target built" >&2; exit 1; }
if [[ -n $TOTAL ]]; then SECONDS_PER=$(( TOTAL / ${#BUILT[@]} )); fi
mkdir -p fuzz-corpus/crashes
seed() {  # seed <target> <glob...>: copy small matching files into the corpus
  local t=$1; shift
  mkdir -p "fuzz-corpus/$t"
  for f in "$@"; do
    [[ -f $f && $(stat -c %s "$f") -le 1048576 ]] && cp "$f" "fuzz-corpus/$t/" || true
  done
}
prefixed() {  # prefixed <target> <hex byte> <files...>: each file behind one leading byte (the target's knob)
  local t=$1 b=$2; shift 2
  mkdir -p "fuzz-corpus/$t"
  for f in "$@"; do
    [[ -f $f && $(stat -c %s "$f") -le 1048576 ]] || continue
    { printf "\\x$b"; cat "$f"; } > "fuzz-corpus/$t/$b-$(basename "$(dirname "$f")")-$(basename "$f")"
  done
}
shopt -s nullglob globstar
seed fuzz_safetensors testdata/**/*.safetensors ../shared/testfiles/safetensors/**/*.safetensors
seed fuzz_gguf testdata/**/*.gguf ../shared/testfiles/gguf/*.gguf
seed fuzz_pytorch testdata/**/*.pt testdata/**/*.bin ../shared/testfiles/pytorch/*.pt ../shared/testfiles/pytorch/*.tar
seed fuzz_pickle
seed fuzz_tokenizer testdata/tokenizers/*/tokenizer.json
seed fuzz_requests
seed fuzz_unicode_norm
seed fuzz_text
seed fuzz_sampler
seed fuzz_describe testdata/**/*.gguf tests/hostile/*.gguf ../shared/testfiles/gguf/*.gguf
seed fuzz_safetensors tests/hostile/*.safetensors
seed fuzz_pytorch tests/hostile/*.pt
seed fuzz_file testdata/gguf/*.gguf tests/hostile/st_*.safetensors
seed fuzz_loader testdata/engine/llama-small-gguf/*.gguf testdata/run/*/model.safetensors tests/hostile/gguf_control.gguf
seed fuzz_json_names testdata/**/*.gguf tests/hostile/*.gguf tests/hostile/*.safetensors
seed fuzz_plan_json testdata/plan/*.json testdata/plan/**/*.json
seed fuzz_index testdata/**/*.index.json
prefixed fuzz_open 00 testdata/gguf/*.gguf tests/hostile/gguf_control.gguf
prefixed fuzz_open 01 testdata/run/*/model.safetensors testdata/convert/*.safetensors
prefixed fuzz_open 02 testdata/models/llama-bin/*.bin
prefixed fuzz_open 83 testdata/models/llama-pt/*.pt
prefixed fuzz_estimate 00 tests/hostile/gguf_*.gguf testdata/engine/llama-small-gguf/*.gguf
prefixed fuzz_estimate 35 testdata/gguf/*.gguf
prefixed fuzz_config 00 testdata/models/*/config.json testdata/run/*/config.json
prefixed fuzz_config 35 testdata/models/*/config.json
printf '{"weight_map": {"x": "a.safetensors", "y": "a.safetensors", "z": "b.safetensors"}}' > fuzz-corpus/fuzz_index/seed.json
mkdir -p fuzz-corpus/fuzz_gguf_split
split=testdata/models/llama-gguf-split
if [[ -f $split/model-00001-of-00003.gguf ]]; then  # 3 parts: the count, two lengths, the parts
  python3 -c 'import struct, sys
parts = [open(f"{sys.argv[1]}/model-0000{k}-of-00003.gguf", "rb").read() for k in (1, 2, 3)]
open(sys.argv[2], "wb").write(bytes([2]) + struct.pack("<II", len(parts[0]), len(parts[1])) + b"".join(parts))' \
    "$split" fuzz-corpus/fuzz_gguf_split/seed3.bin
fi
{ printf '\x00'; cat tests/hostile/gguf_control.gguf; } > fuzz-corpus/fuzz_gguf_split/seed1.bin
# fuzz_hub: the first byte picks the part (tests/fuzz/fuzz_hub.cpp); the Range reads (04) get a
# flags byte, a size delta and 8 per-request actions before the file.
mkdir -p fuzz-corpus/fuzz_hub
python3 - fuzz-corpus/fuzz_hub testdata/gguf/quant_small.gguf testdata/convert/values.safetensors \
  testdata/models/llama-sharded/model.safetensors.index.json <<'PY'
import json, struct, sys
out, gguf, st, index = sys.argv[1:]
sha = "0123456789abcdef0123456789abcdef01234567"
def put(name, mode, body):
    open(f"{out}/{name}", "wb").write(bytes([mode]) + (body if isinstance(body, bytes) else body.encode()))
def status(code, flags=0):
    return struct.pack("<H", code - 100) + bytes([flags])
put("headers-302", 0, status(302) + b"HTTP/1.1 302 Found\r\nLocation: https://cdn-lfs.hf.co/x?sig=1\r\nContent-Length: 0\r\n")
put("headers-307", 0, status(307, 1) + b"HTTP/1.1 307\r\nlocation: /api/resolve-cache/models/org/name/x\r\n")
put("headers-gated", 0, status(401, 3) + b"HTTP/1.1 401\r\nX-Error-Code: GatedRepo\r\nX-Error-Message: Access to model is restricted\r\n")
put("headers-entry", 0, status(404, 2) + b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404\r\nX-Error-Code: EntryNotFound\r\n")
put("headers-429", 0, status(429) + b"HTTP/2 429\r\nretry-after: 10\r\n")
siblings = [{"rfilename": "config.json", "size": 600}, {"rfilename": "model-00001-of-00002.safetensors", "lfs": {"size": 5000}},
            {"rfilename": "model-00002-of-00002.safetensors", "size": 70}, {"rfilename": "model.safetensors.index.json"},
            {"rfilename": "gguf/m-Q4_K_M-00001-of-00002.gguf", "size": 9}, {"rfilename": "gguf/m-Q4_K_M-00002-of-00002.gguf"},
            {"rfilename": "mmproj-f16.gguf"}]
put("listing", 1, json.dumps({"sha": sha, "siblings": siblings, "id": "org/name"}))
put("index", 2, open(index, "rb").read())
manifest = {"format_version": 1, "repo": "org/name", "sha": sha, "entry": "model.safetensors.index.json", "index": True,
            "gguf": False, "config": True, "weights": [{"path": "model-00001-of-00002.safetensors", "size": 5000}]}
put("manifest", 3, json.dumps(manifest, indent=1))
for name, path, flags in (("gguf", gguf, 1), ("safetensors", st, 0)):
    data = open(path, "rb").read()
    put(f"ranges-{name}", 4, bytes([flags, 0]) + bytes(8) + data)
    put(f"ranges-{name}-ignored", 4, bytes([flags, 0, 4, 4]) + bytes(6) + data)
put("url", 5, "https://huggingface.co/org/name/resolve/main/model.safetensors\n/api/resolve-cache/x?a=%2F#f")
put("url-cdn", 5, "http://user@[::1]:8080/a/b?q\n//cdn.example:444/x")
put("ref-quant", 6, "org/name@main:Q4_K_M")
put("ref-hf", 6, "hf://org/name@refs%2Fpr%2F1/sub/model.gguf")
put("ref-url", 6, "https://huggingface.co/org/name/blob/v1.0/a/b.gguf?download=true")
put("bodies", 7, bytes([16]) + b"first line\nsecond\n" + b"x" * 60)
PY
mkdir -p fuzz-corpus/fuzz_trace
printf '%s' '{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "nunchaku"}},
 {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "reader 0"}},
 {"ph": "X", "name": "load", "pid": 1, "tid": 2, "ts": 0, "dur": 900}, {"ph": "X", "name": "read", "pid": 1, "tid": 2, "ts": 10, "dur": 300},
 {"ph": "C", "name": "host RSS", "pid": 1, "tid": 0, "ts": 5, "args": {"bytes": 1048576}},
 {"ph": "C", "name": "host RSS (predicted)", "pid": 1, "tid": 0, "ts": 5, "args": {"bytes": 2097152}}],
 "otherData": {"command": "load", "path": "m.gguf"}}' > fuzz-corpus/fuzz_trace/seed.json
printf 'evil\x1b[2J\nline\xff\xc0\xaf \xe2\x80\xae' > fuzz-corpus/fuzz_text/seed.txt
python3 -c "import struct,sys; sys.stdout.buffer.write(struct.pack('<ffffiQ', 0.7, 0.9, 0.05, 1.1, 3, 1) + struct.pack('<6f', 1, 2, float('nan'), float('inf'), -3, 0))" \
  > fuzz-corpus/fuzz_sampler/seed.bin
printf 'cafe\xcc\x81 \xe2\x84\xab\xe2\x84\xa6 \xef\xac\x81 \xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8 a\xcc\x81\xcc\xa3 \xef\xbd\xb6\xef\xbe\x9e' \
  > fuzz-corpus/fuzz_unicode_norm/seed.txt
printf '%s\n' 'plain prompt' '{"id": 1, "prompt": "x", "stop": ["a"], "seed": 3}' \
  '{"custom_id": "c", "body": {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "max_tokens": 4}}' \
  > fuzz-corpus/fuzz_requests/seed.jsonl
# Runs one target; its row of the table lands in fuzz-corpus/<target>.row.
run_one() {
  local t=$1 log=fuzz-corpus/$1.log rc execs start secs dict=()
  [[ -f tests/fuzz/$1.dict ]] && dict=(-dict="tests/fuzz/$1.dict")  # a target's tokens (keys, edge numbers)
  start=$(date +%s)
  set +e
  nice -n 19 "$BUILD_DIR/$t" "fuzz-corpus/$t" -max_total_time="$SECONDS_PER" -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="fuzz-corpus/crashes/$t-" -print_final_stats=1 "${dict[@]}" >"$log" 2>&1
  rc=$?
  set -e
  secs=$(( $(date +%s) - start ))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  printf "%-20s %12s %8s %8s %s\n" "$t" "$execs" "$secs" "$(find "fuzz-corpus/$t" -type f | wc -l)" \
    "$([[ $rc -eq 0 ]] && echo ok || echo "FINDING (see $log)")" > "fuzz-corpus/$t.row"
}
PARALLEL=${PARALLEL:-1}
echo "campaign $(date -u +%FT%TZ), $(clang --version | head -1), ${SECONDS_PER} s per target, $PARALLEL at a time" \
  | tee fuzz-corpus/summary.txt
for t in "${BUILT[@]}"; do
  rm -f "fuzz-corpus/$t.row"
  run_one "$t" &
  while (( $(jobs -rp | wc -l) >= PARALLEL )); do wait -n || true; done
done
wait
{
  printf "%-20s %12s %8s %8s %s\n" target executions seconds corpus result
  total=0
  for t in "${BUILT[@]}"; do
    cat "fuzz-corpus/$t.row"
    execs=$(awk '{print $2}' "fuzz-corpus/$t.row")
    if [[ $execs =~ ^[0-9]+$ ]]; then total=$((total + execs)); fi
  done
  printf "%-20s %12s\n" total "$total"
} | tee -a fuzz-corpus/summary.txt
