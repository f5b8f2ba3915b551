#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for SECONDS (default 60).
#   ./scripts/fuzz.sh 300      # 5 minutes per parser
#   ./scripts/fuzz.sh 300 fuzz_tokenizer fuzz_requests   # only these targets
# Builds and runs at nice 19, one target at a time (JOBS=2 compile jobs by default).
# Targets: safetensors, gguf, pytorch, pickle, tokenizer, unicode_norm, requests, text
# (escaping), sampler, describe (GGUF -> model validation).
# Seeds come from testdata/ (and ../shared/testfiles when present); the corpus
# grows in fuzz-corpus/<target>/ (git-ignored). Crashes land in fuzz-corpus/crashes/.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER=${1:-60}
shift || true
ONLY=("$@")
./scripts/setup.sh --fuzz
BUILD_DIR=build-fuzz
if [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
  CC=clang CXX=clang++ cmake -S . -B $BUILD_DIR -G Ninja -DNUNCHAKU_FUZZ=ON -DNUNCHAKU_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
TARGETS=(fuzz_text fuzz_unicode_norm fuzz_gguf fuzz_safetensors fuzz_pytorch fuzz_pickle fuzz_tokenizer
         fuzz_describe fuzz_sampler fuzz_requests)
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
mkdir -p fuzz-corpus/crashes
seed() {  # seed <target> <glob...>: copy small matching files into the corpus
  local t=$1; shift
  mkdir -p "fuzz-corpus/$t"
  for f in "$@"; do
    [[ -f $f && $(stat -c %s "$f") -le 1048576 ]] && cp "$f" "fuzz-corpus/$t/" || true
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
printf 'evil\x1b[2J\nline\xff\xc0\xaf \xe2\x80\xae' > fuzz-corpus/fuzz_text/seed.txt
python3 -c "import struct,sys; sys.stdout.buffer.write(struct.pack('<ffffiQ', 0.7, 0.9, 0.05, 1.1, 3, 1) + struct.pack('<6f', 1, 2, float('nan'), float('inf'), -3, 0))" \
  > fuzz-corpus/fuzz_sampler/seed.bin
printf 'cafe\xcc\x81 \xe2\x84\xab\xe2\x84\xa6 \xef\xac\x81 \xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8 a\xcc\x81\xcc\xa3 \xef\xbd\xb6\xef\xbe\x9e' \
  > fuzz-corpus/fuzz_unicode_norm/seed.txt
printf '%s\n' 'plain prompt' '{"id": 1, "prompt": "x", "stop": ["a"], "seed": 3}' \
  '{"custom_id": "c", "body": {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "max_tokens": 4}}' \
  > fuzz-corpus/fuzz_requests/seed.jsonl
printf "%-20s %12s %10s %s\n" target executions seconds result
total=0
for t in "${BUILT[@]}"; do
  bin=$BUILD_DIR/$t
  log=fuzz-corpus/$t.log
  set +e
  nice -n 19 "$bin" "fuzz-corpus/$t" -max_total_time="$SECONDS_PER" -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix=fuzz-corpus/crashes/ -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  printf "%-20s %12s %10s %s\n" "$t" "$execs" "$SECONDS_PER" "$([[ $rc -eq 0 ]] && echo ok || echo "FINDING (see $log)")"
  if [[ $execs =~ ^[0-9]+$ ]]; then total=$((total + execs)); fi
done
printf "%-20s %12s\n" total "$total"
