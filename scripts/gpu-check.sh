#!/usr/bin/env bash
# ONE script for a machine with an NVIDIA GPU. In one run:
#   1. builds with CUDA (build-gpu/), 2. runs the CUDA tests ([cuda]: every backend op
#   against the CPU backend per weight type, the goldens and the CPU engine's greedy tokens;
#   NUNCHAKU_CUDA_SYNC=1 so a fault names its kernel; failures are printed),
#   3. measures the pinned H2D peak (same run as our load), 4. our load GB/s to cuda:0
#   against that peak (target >= 0.9) and against safetensors.torch.load_file(device="cuda")
#   on the same file (target >= 5x; skipped without torch), 5. GPU memory measured by
#   cudaMemGetInfo against the prediction, 6. `run` on a random-weight Llama-shaped ~8 GB
#   bf16 model made here (scripts/make_stream_model.py --fast): resident decode at batch 1
#   and 32 against the HBM bound and transformers generate, streamed offload with --vram at
#   a third of the weights at batch 1, 16 and 64 against the PCIe bound and accelerate's
#   device_map="auto" (scripts/gpu_peers.py), GPU memory predicted vs measured per run;
#   then prints one table last.
#   ./scripts/gpu-check.sh [SIZE_GIB=4]      (TOK=32 tokens per request; SKIP_ENGINE=1 skips 6)
# On a machine without fmt/nlohmann_json/Catch2/PCRE2 (the lent GPU machines): run
# scripts/gpu-deps.sh first where apt works, and carry .deps/ along. LOGS=DIR: copies of
# the test logs. The whole script takes well over 10 minutes (8 GB model, peers): with
# less time, SKIP_ENGINE=1 and a small SIZE_GIB keep build, tests and load rows.
set -euo pipefail
cd "$(dirname "$0")/.."
GIB=${1:-4}
BUILD=${BUILD_DIR:-build-gpu}
T_BUILD=${T_BUILD:-900}
T_STEP=${T_STEP:-300}
declare -A R=()   # results for the table
note() { printf '[gpu-check] %s\n' "$*" >&2; }

# 0. C++ build dependencies the GPU machine's image lacks (fmt, nlohmann_json, Catch2, CLI11,
# PCRE2, pkg-config): .debs that scripts/gpu-deps.sh put into .deps/, unpacked into
# .deps/root (never into /) and found before the system's; their libraries come after the
# system's at run time.
if compgen -G ".deps/*.deb" >/dev/null; then
  DEPS=$PWD/.deps/root
  rm -rf "$DEPS" && mkdir -p "$DEPS"
  for f in .deps/*.deb; do dpkg-deb -x "$f" "$DEPS"; done
  LIBDIR=$DEPS/usr/lib/x86_64-linux-gnu
  sed -i "s|^prefix=/usr\$|prefix=$DEPS/usr|" "$LIBDIR"/pkgconfig/*.pc
  export CMAKE_PREFIX_PATH="$DEPS/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export PKG_CONFIG_PATH="$LIBDIR/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export PATH="$PATH:$DEPS/usr/bin"
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$LIBDIR"
  debs=(.deps/*.deb)
  note "build dependencies from .deps/: ${#debs[@]} packages"
fi

if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader || true; else note "nvidia-smi not found"; fi

# 1. build
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
ARCH=()
cmake --help-variable CMAKE_CUDA_ARCHITECTURES 2>/dev/null | grep -q native && ARCH=(-DCMAKE_CUDA_ARCHITECTURES=native)
timeout "$T_BUILD" cmake -S . -B "$BUILD" "${GEN[@]}" -DNUNCHAKU_CUDA=ON -DCMAKE_BUILD_TYPE=Release "${ARCH[@]}" >/dev/null
timeout "$T_BUILD" cmake --build "$BUILD" -j "$(nproc)" >"$BUILD/build.log" 2>&1 || { tail -40 "$BUILD/build.log"; exit 1; }
"$BUILD/nunchaku" --version || note "nunchaku --version failed"

# 2. CUDA tests (they WARN "skipped: no CUDA device" when there is none: fail loudly here)
set +e
NUNCHAKU_CUDA_SYNC=1 timeout "$T_STEP" "$BUILD/nunchaku_tests" "[cuda]" -r compact >"$BUILD/cuda-tests.log" 2>&1
rc=$?
set -e
# (Catch's summary is "Passed all ..." / "Failed ...": match case-insensitively, and never
# let a grep without a match end the script under set -e + pipefail.)
grep -iE "skipped: no CUDA|passed|failed" "$BUILD/cuda-tests.log" | tail -5 || true
# What failed, with the op, types, shapes and max error each case reports.
grep -E "failed|FAILED|error|with message" -A4 "$BUILD/cuda-tests.log" | head -120 || true
if grep -q "skipped: no CUDA" "$BUILD/cuda-tests.log"; then R[tests]="SKIPPED (no device)"; else R[tests]=$([[ $rc == 0 ]] && echo pass || echo "FAIL rc=$rc"); fi
timeout "$T_STEP" "$BUILD/nunchaku_tests" "[load]" >"$BUILD/load-tests.log" 2>&1 && R[load_tests]=pass || R[load_tests]="FAIL (see $BUILD/load-tests.log)"
# LOGS=DIR keeps the whole test logs (the machine that ran them may be gone by the time they are read).
if [[ -n "${LOGS:-}" ]] && ! { mkdir -p "$LOGS" && cp "$BUILD/cuda-tests.log" "$BUILD/load-tests.log" "$LOGS/"; }; then
  note "cannot copy the logs to $LOGS"
fi

# 3+4. one filled file, warm cache
DIR=$(mktemp -d /tmp/nunchaku-gpu-check-XXXX)
trap 'rm -rf "$DIR"' EXIT
FILE="$DIR/model.safetensors"
if timeout "$T_STEP" ./scripts/bench_load.sh --make-only "$FILE" "$GIB"; then
  cat "$FILE" >/dev/null; cat "$FILE" >/dev/null
  note "file $FILE: $(stat -c %s "$FILE") bytes"
else
  note "making $FILE failed: the load steps below fail too"
fi

jget() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {'d': d}))" "$@" 2>/dev/null ||
         sed -n "s/^  \"$3\": \([0-9.e+-]*\),*$/\1/p" "$1"; }
best=0; bestcfg=""
for cfg in "" "--threads 8 --staging-buffers 8" "--threads 8 --staging-buffers 8 --staging-size 256M" "--direct-io --threads 8 --staging-buffers 8"; do
  for _ in 1 2; do
    # shellcheck disable=SC2086
    if timeout "$T_STEP" "$BUILD/nunchaku" load "$FILE" --device cuda:0 --measure-h2d --verify $cfg --json >"$DIR/load.json" 2>"$DIR/load.err"; then
      g=$(jget "$DIR/load.json" "d['gb_per_s']" gb_per_s)
      if awk -v g="$g" -v b="$best" 'BEGIN{exit !(g>b)}'; then best=$g; bestcfg=${cfg:-default}; cp "$DIR/load.json" "$DIR/best.json"; fi
    else
      note "load $cfg failed: $(tail -2 "$DIR/load.err")"
    fi
  done
done
if [[ -f "$DIR/best.json" ]]; then
  R[h2d]=$(jget "$DIR/best.json" "round(d['h2d_peak_gb_per_s'],2)" h2d_peak_gb_per_s)
  R[ours]=$(printf '%.2f (%s)' "$best" "$bestcfg")
  R[ratio_h2d]=$(awk -v a="$best" -v b="${R[h2d]}" 'BEGIN{ if (b+0 > 0) printf "%.2f", a/b; else print "?" }')
  R[mem_pred]=$(jget "$DIR/best.json" "d['gpu_memory']['cuda:0']['predicted_bytes']" x)
  R[mem_meas]=$(jget "$DIR/best.json" "d['gpu_memory']['cuda:0']['measured_bytes']" x)
  R[mem_err]=$(jget "$DIR/best.json" "round(d['gpu_memory']['cuda:0']['error_percent'],1)" x)
  R[verified]=$(jget "$DIR/best.json" "d['num_verified_tensors']" num_verified_tensors)
fi
# the same with conversion on the GPU
if timeout "$T_STEP" "$BUILD/nunchaku" load "$FILE" --device cuda:0 --dtype bf16 --verify --json >"$DIR/conv.json" 2>"$DIR/conv.err"; then
  R[conv]=$(jget "$DIR/conv.json" "round(d['gb_per_s'],2)" gb_per_s)
else
  R[conv]="FAIL: $(tail -1 "$DIR/conv.err")"
fi

# safetensors.torch.load_file(device="cuda") on the same file
if python3 -c "import torch, safetensors; assert torch.cuda.is_available()" 2>/dev/null; then
  R[st]=$(timeout "$T_STEP" python3 - "$FILE" <<'PY' || echo "FAIL"
import sys, time, torch
from safetensors.torch import load_file
f = sys.argv[1]
torch.cuda.init(); torch.zeros(1, device="cuda")  # context outside the timing, as ours
best = 0.0
for _ in range(2):
    torch.cuda.synchronize(); t0 = time.perf_counter()
    d = load_file(f, device="cuda")
    torch.cuda.synchronize(); t = time.perf_counter() - t0
    n = sum(v.numel() * v.element_size() for v in d.values())
    best = max(best, n / t / 1e9)
    del d; torch.cuda.empty_cache()
print(f"{best:.2f}")
PY
)
  [[ "${R[st]}" != FAIL ]] && R[ratio_st]=$(awk -v a="$best" -v b="${R[st]}" 'BEGIN{ if (b+0 > 0) printf "%.1fx", a/b; else print "?" }')
else
  R[st]="skipped (no torch with CUDA)"
fi

# estimate against PyTorch on the GPU (torch.cuda.max_memory_allocated/reserved): the CUDA
# cases of scripts/bench_estimate_accuracy.sh; its table goes to $BUILD/estimate-accuracy.log
if python3 -c "import torch, transformers; assert torch.cuda.is_available()" 2>/dev/null; then
  if timeout "$T_STEP" env ONLY=cuda ./scripts/bench_estimate_accuracy.sh "$BUILD/nunchaku" >"$BUILD/estimate-accuracy.log" 2>&1; then
    R[est]=$(grep -E "^torch-cuda-(reserved|allocated): worst" "$BUILD/estimate-accuracy.log" | tr '\n' ' ')
  else
    R[est]="FAIL (see $BUILD/estimate-accuracy.log)"
  fi
else
  R[est]="skipped (no torch + transformers with CUDA)"
fi

# 6. run on the GPU: resident and streamed, with the peers on the same weights
jnum() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {'d': d}))" "$@" 2>/dev/null || echo "?"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a+0 > 0 && b+0 > 0) printf "%.2f", a/b; else print "?" }'; }
if [[ "${SKIP_ENGINE:-0}" != 1 ]]; then
  MODEL="$DIR/llama-8g"
  TOK=${TOK:-32}
  timeout "$T_STEP" python3 scripts/make_stream_model.py "$MODEL" --layers 18 --hidden 4096 --intermediate 14336 \
    --heads 32 --kv-heads 8 --max-pos 4096 --fast >&2 || note "making the model failed: the runs below fail too"
  # (a missing model must not end the script before the table: WB=3 keeps the sizes valid)
  WB=$(stat -c %s "$MODEL/model.safetensors" 2>/dev/null || echo 3)
  cat "$MODEL/model.safetensors" >/dev/null 2>&1 || true
  VRAM_STREAM="$((WB / 3 / 1048576))M"
  prompts() { for ((i = 0; i < $1; i++)); do echo "Once upon a time there was a little robot number $i"; done; }
  ours() {  # NAME BATCH [flags...]: one run, its summary in $DIR/NAME.json
    local name=$1 b=$2
    shift 2
    note "run $name: batch $b $*"
    prompts "$b" | timeout "$T_STEP" "$BUILD/nunchaku" run "$MODEL" --raw --batch-size "$b" --max-tokens "$TOK" \
      --stats "$DIR/$name.json" "$@" >/dev/null 2>"$DIR/$name.err" ||
      { note "run $name FAILED: nunchaku run $MODEL --raw --batch-size $b --max-tokens $TOK $*"; tail -5 "$DIR/$name.err" >&2; }
    grep -E "^gpu memory" "$DIR/$name.err" >&2 || true
  }
  ours res1 1 --device cuda:0
  ours res32 32 --device cuda:0
  ours str1 1 --vram "$VRAM_STREAM" --context 128
  ours str16 16 --vram "$VRAM_STREAM" --context 128
  ours str64 64 --vram "$VRAM_STREAM" --context 128
  ours str32c 32 --vram "$(((WB / 3 + (12 << 30)) / 1048576))M" --context 4096
  # --batch-size auto: every weight plus 3 GiB, context 4096 (~0.6 GB of f32 KV per sequence).
  note "run auto: --batch-size auto --vram weights+3G --context 4096"
  prompts 8 | timeout "$T_STEP" "$BUILD/nunchaku" run "$MODEL" --raw --batch-size auto --max-tokens 8 \
    --vram "$(((WB + (3 << 30)) / 1048576))M" --context 4096 --stats "$DIR/auto.json" >/dev/null 2>"$DIR/auto.err" ||
    { note "run auto FAILED"; tail -5 "$DIR/auto.err" >&2; }
  R[auto]=$(grep -o "batch size auto: [0-9]*" "$DIR/auto.err" || echo "?")
  if python3 -c "import torch, transformers; assert torch.cuda.is_available()" 2>/dev/null; then
    timeout "$T_STEP" python3 scripts/gpu_peers.py "$MODEL" --tokens "$TOK" --prompt-len 12 --batches 1,32 \
      --offload-batches 1,16 --offload-tokens 8 --gpu-bytes "$((WB / 3))" >"$DIR/peers.json" 2>"$DIR/peers.err" ||
      { note "peers failed"; tail -5 "$DIR/peers.err" >&2; }
  else
    note "no torch+transformers with CUDA: peers skipped"
  fi
  HBM=$(jnum "$DIR/peers.json" "round(d['hbm_gb_per_s'],1)")
  H2D=$(jnum "$DIR/peers.json" "round(d['h2d_gb_per_s'],1)")
  for r in res1 res32 str1 str16 str64 str32c auto; do
    R[tok_$r]=$(jnum "$DIR/$r.json" "round(d['completion_tokens_per_s'],1)")
    R[steps_$r]=$(jnum "$DIR/$r.json" "d['num_forward_calls']/d['wall_s']")
    R[str_$r]=$(jnum "$DIR/$r.json" "d['weights']['streamed_bytes_per_step']")
    R[mem_$r]=$(jnum "$DIR/$r.json" "(lambda g: '%d / %d B (%+.1f%%)' % (g['predicted_bytes'], g['measured_bytes'], g['error_percent']))(next(iter(d['gpu_memory'].values())))")
  done
  # Fractions of the bounds: forward passes per second x bytes each pass must move / the
  # bandwidth that moves them (HBM for resident weights, pinned PCIe for streamed ones).
  for r in res1 res32; do R[frac_$r]=$(awk -v s="${R[steps_$r]}" -v b="$WB" -v h="$HBM" 'BEGIN{ if (s+0>0 && h+0>0) printf "%.2f", s*b/(h*1e9); else print "?" }'); done
  for r in str1 str16 str64; do R[frac_$r]=$(awk -v s="${R[steps_$r]}" -v b="${R[str_$r]}" -v h="$H2D" 'BEGIN{ if (s+0>0 && h+0>0) printf "%.2f", s*b/(h*1e9); else print "?" }'); done
  HF1=$(jnum "$DIR/peers.json" "round(d['hf']['1'],1)"); HF32=$(jnum "$DIR/peers.json" "round(d['hf']['32'],1)")
  AC1=$(jnum "$DIR/peers.json" "round(d['accelerate']['1'],2)"); AC16=$(jnum "$DIR/peers.json" "round(d['accelerate']['16'],2)")
fi

printf '\n%-44s %s\n' "gpu-check ($GIB GiB safetensors, warm cache)" "result"
printf '%-44s %s\n' "CUDA tests [cuda]" "${R[tests]}"
printf '%-44s %s\n' "load tests [load]" "${R[load_tests]}"
printf '%-44s %s\n' "pinned H2D peak GB/s" "${R[h2d]:-?}"
printf '%-44s %s\n' "nunchaku load --device cuda:0 GB/s (best)" "${R[ours]:-FAIL}"
printf '%-44s %s\n' "  ratio to H2D peak (target >= 0.9)" "${R[ratio_h2d]:-?}"
printf '%-44s %s\n' "  with --dtype bf16 on the GPU, GB/s" "${R[conv]:-?}"
printf '%-44s %s\n' "safetensors load_file(device=cuda) GB/s" "${R[st]}"
printf '%-44s %s\n' "  ours vs safetensors (target >= 5x)" "${R[ratio_st]:-n/a}"
printf '%-44s %s\n' "GPU memory predicted / measured bytes" "${R[mem_pred]:-?} / ${R[mem_meas]:-?} (${R[mem_err]:-?}%)"
printf '%-44s %s\n' "tensors verified after landing" "${R[verified]:-?}"
printf '%-44s %s\n' "estimate vs PyTorch CUDA peaks" "${R[est]}"
if [[ "${SKIP_ENGINE:-0}" != 1 ]]; then
  printf '%-44s %s\n' "run model (random bf16 Llama, 18 x 4096)" "$((WB / 1000000)) MB weights, $TOK tokens/request"
  printf '%-44s %s\n' "HBM (D2D copy) / pinned H2D GB/s" "$HBM / $H2D"
  printf '%-44s %s\n' "resident b1 tok/s, HBM fraction (>= 0.8)" "${R[tok_res1]} (${R[frac_res1]})"
  printf '%-44s %s\n' "  vs transformers generate b1 (>= 2x)" "$HF1 tok/s: $(ratio "${R[tok_res1]}" "$HF1")x"
  printf '%-44s %s\n' "resident b32 tok/s, HBM fraction" "${R[tok_res32]} (${R[frac_res32]})"
  printf '%-44s %s\n' "  vs transformers generate b32 (>= 2x)" "$HF32 tok/s: $(ratio "${R[tok_res32]}" "$HF32")x"
  printf '%-44s %s\n' "streamed --vram $VRAM_STREAM b1 tok/s, PCIe fr." "${R[tok_str1]} (${R[frac_str1]})"
  printf '%-44s %s\n' "streamed b16 tok/s, PCIe fraction (>= 0.8)" "${R[tok_str16]} (${R[frac_str16]})"
  printf '%-44s %s\n' "streamed b64 tok/s, PCIe fraction (>= 0.8)" "${R[tok_str64]} (${R[frac_str64]})"
  printf '%-44s %s\n' "  vs accelerate device_map=auto b1 (>= 20x)" "$AC1 tok/s: $(ratio "${R[tok_str1]}" "$AC1")x"
  printf '%-44s %s\n' "  vs accelerate device_map=auto b16 (>= 20x)" "$AC16 tok/s: $(ratio "${R[tok_str16]}" "$AC16")x"
  printf '%-44s %s\n' "--batch-size auto (weights + 3 GiB, ctx 4096)" "${R[auto]}, ${R[tok_auto]} tok/s"
  for r in res1 res32 str1 str64 str32c auto; do
    printf '%-44s %s\n' "GPU memory pred/meas $r (|err| <= 5%)" "${R[mem_$r]}"
  done
fi
