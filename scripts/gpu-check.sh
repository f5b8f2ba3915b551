#!/usr/bin/env bash
# ONE script for a machine with an NVIDIA GPU. In one run:
#   1. builds with CUDA (build-gpu/), 2. runs the CUDA tests ([cuda]: every backend op
#   against the CPU backend per weight type, the goldens and the CPU engine's greedy tokens;
#   NUNCHAKU_CUDA_SYNC=1 so a fault names its kernel; failures are printed; then the CLI's
#   greedy ids on cuda:0 against the CPU's for the MoE, Llama 4 and DeepSeek GGUF fixtures,
#   a mismatch naming the command and the family's worst op-table row), 3. `run` on a
#   random-weight Llama-shaped ~8 GB bf16 model made here (scripts/make_stream_model.py
#   --fast): resident decode at batch 1 and 32 against the HBM bound and transformers
#   generate, streamed offload with --vram at a third of the weights + 1 GiB at batch 1, 16 and 64
#   against the PCIe bound and accelerate's device_map="auto" (scripts/gpu_peers.py), GPU
#   memory predicted vs measured per run, 4. the pinned H2D peak (same run as our load), our
#   load GB/s to cuda:0 against that peak (target >= 0.9) and against
#   safetensors.torch.load_file(device="cuda") on the same file (target >= 5x; skipped
#   without torch), GPU memory by cudaMemGetInfo against the prediction, 5. estimate against
#   PyTorch's CUDA peaks; then prints one table last (steps in that order of priority).
#   ./scripts/gpu-check.sh [SIZE_GIB=4]      (TOK=32 tokens per request; SKIP_ENGINE=1 skips 3)
# BUDGET_S=N: every step ends by N seconds after the start (T_BUILD, T_STEP: each step's own
# limit) and a step that no longer fits is left out, named in the table, which is printed
# within N seconds; give it below the machine's per-call limit (e.g. BUDGET_S=420 in a
# 600 s call), else a killed run prints no table. LOGS=DIR: the test logs, the table and
# gpu-check-logs.tar.gz (build log, every run's stderr and --stats JSON, the peers) in DIR,
# 4 files. On a machine without fmt/spdlog/nlohmann_json/Catch2/PCRE2 (the lent GPU
# machines): run scripts/gpu-deps.sh first where apt works, and carry .deps/ along.
# GPU_CHECK_REHEARSAL=1: the same steps and table without a GPU, in a minute or two, to
# check this script: the CUDA code on the CPU emulator (build-emu/: nunchaku_cuda_emu_tests
# and nunchaku_emu, the CLI linked with the emulator), a 1 GiB file, a tiny model of the
# same shape family, TOK=4, the peers on the CPU (PYTHON=... for a python with torch and
# transformers), and with .deps/ present a fresh configure that must find every package in
# .deps/root. No number it prints is a GPU result (docs/engine.md, "gpu-check rehearsal").
set -euo pipefail
cd "$(dirname "$0")/.."
REHEARSAL=${GPU_CHECK_REHEARSAL:-0}
PY=${PYTHON:-python3}
START=$SECONDS
BUDGET_S=${BUDGET_S:-0}
T_BUILD=${T_BUILD:-900}
T_STEP=${T_STEP:-300}
if [[ $REHEARSAL == 1 ]]; then
  GIB=${1:-1}
  BUILD=${BUILD_DIR:-build-emu}
  CLI=$BUILD/nunchaku_emu
  CUDA_TESTS=$BUILD/nunchaku_cuda_emu_tests
  TOK=${TOK:-4}
  # layers hidden intermediate heads kv-heads: the real shape's family (GQA 4:1 as 32:8)
  SHAPE=(4 128 384 4 1)
  PEER_DEVICE=cpu
  export NUNCHAKU_CUDA_EMU_MEM_MIB=${NUNCHAKU_CUDA_EMU_MEM_MIB:-8192}
else
  GIB=${1:-4}
  BUILD=${BUILD_DIR:-build-gpu}
  CLI=$BUILD/nunchaku
  CUDA_TESTS=$BUILD/nunchaku_tests
  TOK=${TOK:-32}
  SHAPE=(18 4096 14336 32 8)  # ~8.4 GB bf16
  PEER_DEVICE=cuda
fi
REAL_SHAPE=(18 4096 14336 32 8)
# Not a GPU machine: say so now, not after a build of minutes (the NVIDIA driver's device
# nodes, else nvidia-smi's list; either is enough).
if [[ $REHEARSAL != 1 ]] && ! compgen -G '/dev/nvidia[0-9]*' > /dev/null && ! nvidia-smi -L > /dev/null 2>&1; then
  echo "gpu-check.sh: no NVIDIA GPU on this machine (no /dev/nvidia<N>, nvidia-smi -L failed); nothing was built or run." >&2
  echo "  GPU_CHECK_REHEARSAL=1 ./scripts/gpu-check.sh runs the same steps on the CPU emulator." >&2
  exit 2
fi
# What every --vram budget holds beside a share of the weights: the CUDA context (the
# planner charges 500 MiB), the stream slots and the batch's run state (at batch 64 and
# context 128 the 8 GB model needs 2.48 GiB with no layer resident: a third of the weights
# alone, 2.6 GiB, did not fit).
FIXED_GPU=$((1 << 30))
declare -A R=()   # results for the table
note() { printf '[gpu-check] %s\n' "$*" >&2; }
DIR=$(mktemp -d /tmp/nunchaku-gpu-check-XXXX)

# Seconds left of BUDGET_S, 15 kept for the table (a large number without a budget).
left() { if ((BUDGET_S > 0)); then echo $((BUDGET_S - (SECONDS - START) - 15)); else echo 1000000; fi; }
# The timeout of a step: its own limit (default T_STEP) or what is left, at least 1 s.
tmo() {
  local cap=${1:-$T_STEP} l
  l=$(left)
  ((l < cap)) || l=$cap
  ((l >= 1)) || l=1
  echo "$l"
}
# True when at least $1 seconds (default 20) are left; else notes that step $2 is left out.
have_time() {
  if (($(left) >= ${1:-20})); then return 0; fi
  note "out of BUDGET_S=$BUDGET_S: ${2:-a step} left out"
  return 1
}
OUT_OF_TIME="left out (BUDGET_S)"

# 0. C++ build dependencies the GPU machine's image lacks (fmt, spdlog, nlohmann_json,
# Catch2, CLI11, PCRE2, pkg-config): .debs that scripts/gpu-deps.sh put into .deps/, unpacked
# into .deps/root (never into /) and found before the system's; their libraries come after
# the system's at run time.
DEPS=""
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
# Where a configured build dir found each package: "fmt=DIR ..." and the packages found
# outside .deps/root (a missing .deb there: the GPU machine has no system copy).
deps_found() {
  local cache=$1/CMakeCache.txt pkg d outside=""
  for pkg in fmt spdlog nlohmann_json CLI11 Catch2; do
    d=$(sed -n "s/^${pkg}_DIR:PATH=//p" "$cache")
    [[ $d == "$DEPS"/* ]] || outside+=" $pkg(${d:-not found})"
  done
  d=$(sed -n 's/^pkgcfg_lib_PCRE2_pcre2-8:FILEPATH=//p' "$cache")
  [[ $d == "$DEPS"/* ]] || outside+=" pcre2(${d:-not found})"
  if [[ -z $outside ]]; then echo "all from .deps/root"; else echo "NOT from .deps/root:$outside"; fi
}

# Tables and logs whatever way the script ends: LOGS gets at most 4 files (a device call
# returns few files), the full logs packed into one.
print_table() {
  {
    local title="gpu-check ($GIB GiB safetensors, warm cache)"
    [[ $REHEARSAL == 1 ]] && title="gpu-check REHEARSAL on the CPU emulator, not a GPU ($GIB GiB)"
    printf '\n%-44s %s\n' "$title" "result (after $((SECONDS - START)) s)"
    [[ -n ${R[deps]:-} ]] && printf '%-44s %s\n' "build dependencies (.deps)" "${R[deps]}"
    printf '%-44s %s\n' "build" "${R[build]:-?}"
    printf '%-44s %s\n' "CUDA tests [cuda]" "${R[tests]:-?}"
    printf '%-44s %s\n' "load tests [load]" "${R[load_tests]:-?}"
    printf '%-44s %s\n' "MoE run on cuda:0 = the CPU's ids (5 GGUFs)" "${R[moe]:-?}"
    printf '%-44s %s\n' "Llama 4 run on cuda:0 = the CPU's ids" "${R[llama4]:-?}"
    printf '%-44s %s\n' "DeepSeek (MLA) on cuda:0 = the CPU's ids (3)" "${R[deepseek]:-?}"
    printf '%-44s %s\n' "pinned H2D peak GB/s" "${R[h2d]:-?}"
    printf '%-44s %s\n' "nunchaku load --device cuda:0 GB/s (best)" "${R[ours]:-FAIL}"
    printf '%-44s %s\n' "  ratio to H2D peak (target >= 0.9)" "${R[ratio_h2d]:-?}"
    printf '%-44s %s\n' "  with --dtype bf16 on the GPU, GB/s" "${R[conv]:-?}"
    printf '%-44s %s\n' "safetensors load_file(device=cuda) GB/s" "${R[st]:-?}"
    printf '%-44s %s\n' "  ours vs safetensors (target >= 5x)" "${R[ratio_st]:-n/a}"
    printf '%-44s %s\n' "GPU memory predicted / measured bytes" "${R[mem_pred]:-?} / ${R[mem_meas]:-?} (${R[mem_err]:-?}%)"
    printf '%-44s %s\n' "tensors verified after landing" "${R[verified]:-?}"
    printf '%-44s %s\n' "estimate vs PyTorch CUDA peaks" "${R[est]:-?}"
    if [[ "${SKIP_ENGINE:-0}" != 1 ]]; then
      local r
      [[ -n ${R[budgets]:-} ]] && printf '%-44s %s\n' "real-shape --vram budgets (run's planner)" "${R[budgets]}"
      printf '%-44s %s\n' "run model (random bf16 Llama, ${SHAPE[0]} x ${SHAPE[1]})" "${R[model]:-?}, $TOK tokens/request"
      printf '%-44s %s\n' "HBM (D2D copy) / pinned H2D GB/s" "${R[hbm]:-?} / ${R[h2d_peer]:-?}"
      printf '%-44s %s\n' "resident b1 tok/s, HBM fraction (>= 0.8)" "${R[tok_res1]:-?} (${R[frac_res1]:-?})"
      printf '%-44s %s\n' "  vs transformers generate b1 (>= 2x)" "${R[hf1]:-?} tok/s: ${R[x_hf1]:-?}x"
      printf '%-44s %s\n' "resident b32 tok/s, HBM fraction" "${R[tok_res32]:-?} (${R[frac_res32]:-?})"
      printf '%-44s %s\n' "  vs transformers generate b32 (>= 2x)" "${R[hf32]:-?} tok/s: ${R[x_hf32]:-?}x"
      printf '%-44s %s\n' "streamed --vram ${R[vram_stream]:-?} b1 tok/s, PCIe fr." "${R[tok_str1]:-?} (${R[frac_str1]:-?})"
      printf '%-44s %s\n' "streamed b16 tok/s, PCIe fraction (>= 0.8)" "${R[tok_str16]:-?} (${R[frac_str16]:-?})"
      printf '%-44s %s\n' "streamed b64 tok/s, PCIe fraction (>= 0.8)" "${R[tok_str64]:-?} (${R[frac_str64]:-?})"
      printf '%-44s %s\n' "  vs accelerate device_map=auto b1 (>= 20x)" "${R[ac1]:-?} tok/s: ${R[x_ac1]:-?}x"
      printf '%-44s %s\n' "  vs accelerate device_map=auto b16 (>= 20x)" "${R[ac16]:-?} tok/s: ${R[x_ac16]:-?}x"
      printf '%-44s %s\n' "--batch-size auto (weights + 5 KV, ctx 4096)" "${R[auto]:-?}, ${R[tok_auto]:-?} tok/s"
      for r in res1 res32 str1 str64 str32c auto; do
        printf '%-44s %s\n' "GPU memory pred/meas $r (|err| <= 5%)" "${R[mem_$r]:-?}"
      done
    fi
  } | tee "$DIR/table.txt"
}
finish() {
  if [[ -n "${LOGS:-}" ]]; then
    if mkdir -p "$LOGS"; then
      for f in "$BUILD/cuda-tests.log" "$BUILD/load-tests.log" "$DIR/table.txt"; do
        [[ -f $f ]] && cp "$f" "$LOGS/gpu-check-$(basename "$f")"
      done
      local logs=()
      for f in "$BUILD"/{configure,build,cuda-tests,load-tests,estimate-accuracy,moe-run,llama4-ops,deepseek-ops}.log "$DIR"/*.json "$DIR"/*.err "$DIR"/*.log; do
        [[ -f $f ]] && logs+=("$f")
      done
      ((${#logs[@]} == 0)) || tar -czf "$LOGS/gpu-check-logs.tar.gz" --transform 's|.*/||' "${logs[@]}" 2>/dev/null ||
        note "cannot pack the logs into $LOGS"
    else
      note "cannot copy the logs to $LOGS"
    fi
  fi
  rm -rf "$DIR"
}
trap finish EXIT
trap 'note "terminated: the table so far"; print_table; exit 143' TERM INT

if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader || true; else note "nvidia-smi not found"; fi

# 1. build (the rehearsal: the emulator build's targets, its other settings as they are)
GEN=(); [[ -f "$BUILD/CMakeCache.txt" ]] || { command -v ninja >/dev/null && GEN=(-G Ninja); }
if [[ $REHEARSAL == 1 ]]; then
  CONF=(-DNUNCHAKU_CUDA_EMU=ON)
  TARGETS=(--target nunchaku nunchaku_tests nunchaku_cuda_emu_tests nunchaku_emu)
else
  ARCH=()
  cmake --help-variable CMAKE_CUDA_ARCHITECTURES 2>/dev/null | grep -q native && ARCH=(-DCMAKE_CUDA_ARCHITECTURES=native)
  # (the emulator's tests are for machines without a GPU: not built here)
  CONF=(-DNUNCHAKU_CUDA=ON -DNUNCHAKU_CUDA_EMU=OFF -DCMAKE_BUILD_TYPE=Release "${ARCH[@]}")
  TARGETS=()
fi
mkdir -p "$BUILD"
rm -f "$BUILD"/{configure,build,cuda-tests,load-tests,estimate-accuracy,moe-run,llama4-ops,deepseek-ops}.log  # none of an earlier run in LOGS
if ! timeout "$(tmo "$T_BUILD")" cmake -S . -B "$BUILD" "${GEN[@]}" "${CONF[@]}" >"$BUILD/configure.log" 2>&1; then
  tail -30 "$BUILD/configure.log"
  R[build]="FAIL: configure (see configure.log)"
  print_table
  exit 1
fi
[[ -n $DEPS && $REHEARSAL != 1 ]] && R[deps]=$(deps_found "$BUILD")
if ! timeout "$(tmo "$T_BUILD")" cmake --build "$BUILD" -j "$(nproc)" "${TARGETS[@]}" >"$BUILD/build.log" 2>&1; then
  tail -40 "$BUILD/build.log"
  R[build]="FAIL (see build.log)"
  print_table
  exit 1
fi
R[build]="ok ($(awk '/CMAKE_BUILD_TYPE:/{sub(/.*=/, ""); print}' "$BUILD/CMakeCache.txt"), $((SECONDS - START)) s)"
"$CLI" --version || note "nunchaku --version failed"
# The rehearsal's check of the .deps path: a fresh configure (no build) must find every
# package in .deps/root, as the GPU machine, which has none of them, will.
if [[ -n $DEPS && $REHEARSAL == 1 ]]; then
  if cmake -S . -B "$DIR/deps-configure" -DNUNCHAKU_CUDA=OFF >"$DIR/deps-configure.log" 2>&1; then
    R[deps]=$(deps_found "$DIR/deps-configure")
  else
    R[deps]="FAIL: configure with .deps (deps-configure.log)"
  fi
fi

# 2. CUDA tests (they WARN "skipped: no CUDA device" when there is none: fail loudly here)
set +e
NUNCHAKU_CUDA_SYNC=1 timeout "$(tmo)" "$CUDA_TESTS" "[cuda]" -r compact >"$BUILD/cuda-tests.log" 2>&1
rc=$?
set -e
# (Catch's summary is "Passed all ..." / "Failed ...": match case-insensitively, and never
# let a grep without a match end the script under set -e + pipefail.)
grep -iE "skipped: no CUDA|passed|failed" "$BUILD/cuda-tests.log" | tail -5 || true
# What failed, with the op, types, shapes and max error each case reports.
grep -E "failed|FAILED|error|with message" -A4 "$BUILD/cuda-tests.log" | head -120 || true
if grep -q "skipped: no CUDA" "$BUILD/cuda-tests.log"; then R[tests]="SKIPPED (no device)"
elif ((rc == 0)); then R[tests]="pass: $(grep -E "^Passed" "$BUILD/cuda-tests.log" | tail -1)"
elif ((rc == 124)); then R[tests]="FAIL: timed out (cuda-tests.log)"
else R[tests]="FAIL rc=$rc (cuda-tests.log)"; fi
if timeout "$(tmo)" "$BUILD/nunchaku_tests" "[load]" >"$BUILD/load-tests.log" 2>&1; then R[load_tests]=pass; else R[load_tests]="FAIL (load-tests.log)"; fi

# MoE on the GPU: the experts run on a CPU part beside it (docs/engine.md); the CLI's greedy
# ids on cuda:0 (--device, and a --vram plan) against the CPU's, per MoE GGUF fixture.
moe_ids() {  # FILE FLAGS... (IDS_PROMPT: another prompt)
  timeout "$(tmo)" "$CLI" run "$1" -p "${IDS_PROMPT:-the quick brown fox}" -n 16 --temp 0 "${@:2}" 2>>"$BUILD/moe-run.log" |
    "$PY" -c "import json,sys; print(json.load(sys.stdin)['token_ids'])" 2>>"$BUILD/moe-run.log"
}
: >"$BUILD/moe-run.log"
R[moe]=pass
for f in testdata/engine/moe-gguf/{mixtral,qwen2_moe,qwen3_moe,olmoe}.gguf testdata/engine/gpt_oss-gguf/gpt_oss.gguf; do
  want=$(moe_ids "$f" --device cpu)
  for how in "--device cuda:0" "--vram 600M"; do
    got=$(moe_ids "$f" $how)
    if [[ -z $want || $got != "$want" ]]; then
      R[moe]="FAIL: $(basename "$f") $how: ${got:-no ids} vs the CPU's ${want:-none} (moe-run.log)"
      break 2
    fi
  done
done

# Llama 4 (chunked attention, the NoPE layers' temperature, unit q/k norms) and DeepSeek (MLA:
# the latent cache, per-head absorbed products) on the GPU, their experts on the CPU part: the
# CLI's greedy ids on cuda:0 against the CPU's as above. A mismatch names the command and the
# ids, and reruns the family's op table ([ops][TAG]: every op against the CPU backend with its
# shapes and NMSE, NUNCHAKU_CUDA_SYNC=1 so a fault names its kernel) into KEY-ops.log, quoting
# its worst row. (The prompt: one none of these fixtures ends within 16 tokens.)
family_ids() {  # KEY TAG FILE...
  local key=$1 tag=$2 f how want got worst
  local -x IDS_PROMPT="hello world"
  shift 2
  R[$key]=pass
  for f in "$@"; do
    want=$(moe_ids "$f" --device cpu)
    for how in "--device cuda:0" "--vram 600M"; do
      # shellcheck disable=SC2086
      got=$(moe_ids "$f" $how)
      [[ -n $want && $got == "$want" ]] && continue
      NUNCHAKU_CUDA_SYNC=1 NUNCHAKU_OP_TABLE=1 timeout "$(tmo)" "$CUDA_TESTS" "[ops][$tag]" >"$BUILD/$key-ops.log" 2>&1 || true
      worst=$(awk 'NF >= 5 && $(NF-1) ~ /^[0-9.]+e[-+][0-9]+$/ {print $(NF-1) "\t" $0}' "$BUILD/$key-ops.log" |
              sort -g -r | head -1 | cut -f2- | tr -s ' ' || true)
      R[$key]="FAIL: $CLI run $f -p '$IDS_PROMPT' -n 16 --temp 0 $how: ${got:-no ids} vs the CPU's ${want:-none} (moe-run.log); op table $key-ops.log, worst row: ${worst:-none}"
      return 0
    done
  done
}
family_ids llama4 llama4 testdata/engine/llama4-gguf/llama4.gguf
family_ids deepseek mla testdata/engine/deepseek-gguf/{deepseek_v3,deepseek_v2_lite,deepseek_v2_lite_yarn}.gguf

jget() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {'d': d}))" "$@" 2>/dev/null ||
         sed -n "s/^  \"$3\": \([0-9.e+-]*\),*$/\1/p" "$1"; }
jnum() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {'d': d}))" "$@" 2>/dev/null || echo "?"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a+0 > 0 && b+0 > 0) printf "%.2f", a/b; else print "?" }'; }

# 3. run on the GPU: resident and streamed, with the peers on the same weights
# make_model DIR SPARSE(0|1) LAYERS HIDDEN INTERMEDIATE HEADS KV_HEADS: the random bf16 model.
make_model() {
  local out=$1 how=--fast
  [[ $2 == 0 ]] || how=--sparse
  timeout "$(tmo)" "$PY" scripts/make_stream_model.py "$out" --layers "$3" --hidden "$4" --intermediate "$5" \
    --heads "$6" --kv-heads "$7" --max-pos 4096 "$how" >&2
}
# f32 KV cache of one sequence at context 4096 (K and V, every layer) of SHAPE (5 numbers).
kv_seq() { echo $(($1 * 2 * ($2 * $5 / $4) * 4 * 4096)); }
# The runs, one a line: NAME BATCH FLAGS..., for weights of WB bytes and a KV cache of KVSEQ
# bytes per sequence at context 4096, plus FIXED bytes in every budget (FIXED_GPU).
# The context-4096 budgets add the KV cache of their sequences (19 GB for 32 on the 8 GB
# model) and a sixth of the weights for activations.
run_configs() {
  local WB=$1 KVSEQ=$2 FIXED=$3
  local S="$(((WB / 3 + FIXED) / 1048576))M"
  echo "res1 1 --device cuda:0"
  echo "res32 32 --device cuda:0"
  echo "str1 1 --vram $S --context 128"
  echo "str16 16 --vram $S --context 128"
  echo "str64 64 --vram $S --context 128"
  echo "str32c 32 --vram $(((WB / 3 + 32 * KVSEQ + WB / 6 + FIXED) / 1048576))M --context 4096"
  # --batch-size auto: every weight, five sequences' KV cache: it picks about 5 of 8 prompts
  echo "auto auto --vram $(((WB + 5 * KVSEQ + WB / 6 + FIXED) / 1048576))M --context 4096"
}
# The rehearsal's check of the real run's budgets: run's own planner on a sparse model of
# the real shape, with this build's plain CLI, which has no GPU here: a run whose budget
# fits stops at the device check (exit 2), one that does not is plan.does_not_fit (exit 3).
real_budgets() {
  local sp="$DIR/real-shape" wb name b flags rc bad="" ok=0
  make_model "$sp" 1 "${REAL_SHAPE[@]}" || { R[budgets]="FAIL: making the sparse model"; return 0; }
  wb=$(stat -c %s "$sp/model.safetensors")
  while read -r name b flags; do
    [[ $flags == *--vram* ]] || continue
    set +e
    # shellcheck disable=SC2086
    "$BUILD/nunchaku" run "$sp" --raw --batch-size "$b" --max-tokens "$TOK" $flags </dev/null >/dev/null 2>"$DIR/budget-$name.err"
    rc=$?
    set -e
    if ((rc == 2)) && grep -qiE "not available|no NVIDIA|CUDA" "$DIR/budget-$name.err"; then ok=$((ok + 1))
    else bad+=" $name(rc $rc: $(tail -1 "$DIR/budget-$name.err" | cut -c1-120))"; fi
  done < <(run_configs "$wb" "$(kv_seq "${REAL_SHAPE[@]}")" "$FIXED_GPU")
  if [[ -z $bad ]]; then R[budgets]="all $ok --vram runs fit at ${REAL_SHAPE[0]} x ${REAL_SHAPE[1]}"
  else R[budgets]="FAIL:$bad"; fi
  rm -rf "$sp"
}
engine_runs() {
  local MODEL="$DIR/model" WB KVSEQ r name b flags
  make_model "$MODEL" 0 "${SHAPE[@]}" || note "making the model failed: the runs below fail too"
  # (a missing model must not end the script before the table: WB=3 keeps the sizes valid)
  WB=$(stat -c %s "$MODEL/model.safetensors" 2>/dev/null || echo 3)
  cat "$MODEL/model.safetensors" >/dev/null 2>&1 || true
  R[model]="$((WB / 1000000)) MB weights"
  KVSEQ=$(kv_seq "${SHAPE[@]}")
  R[vram_stream]="$(((WB / 3 + FIXED_GPU) / 1048576))M"
  prompts() { for ((i = 0; i < $1; i++)); do echo "Once upon a time there was a little robot number $i"; done; }
  ours() {  # NAME BATCH [flags...]: one run of BATCH prompts (auto: 8), its summary in $DIR/NAME.json
    local name=$1 b=$2 n=$2
    shift 2
    [[ $b != auto ]] || n=8
    have_time 20 "run $name" || return 0
    note "run $name: batch $b $*"
    prompts "$n" | timeout "$(tmo)" "$CLI" run "$MODEL" --raw --batch-size "$b" --max-tokens "$TOK" \
      --stats "$DIR/$name.json" "$@" >/dev/null 2>"$DIR/$name.err" ||
      { note "run $name FAILED: nunchaku run $MODEL --raw --batch-size $b --max-tokens $TOK $*"; tail -5 "$DIR/$name.err" >&2; }
    grep -E "^(gpu memory|batch size auto)" "$DIR/$name.err" >&2 || true
  }
  local configs=()
  mapfile -t configs < <(run_configs "$WB" "$KVSEQ" "$FIXED_GPU")
  for r in "${configs[@]}"; do
    read -r name b flags <<<"$r"
    # shellcheck disable=SC2086
    ours "$name" "$b" $flags
  done
  R[auto]=$(grep -o "batch size auto: [0-9]*" "$DIR/auto.err" 2>/dev/null || echo "?")
  if have_time 60 "the peers" && "$PY" -c "import torch, transformers; assert '$PEER_DEVICE' == 'cpu' or torch.cuda.is_available()" 2>/dev/null; then
    timeout "$(tmo)" "$PY" scripts/gpu_peers.py "$MODEL" --tokens "$TOK" --prompt-len 12 --batches 1,32 \
      --offload-batches 1,16 --offload-tokens 8 --gpu-bytes "$((WB / 3))" --device "$PEER_DEVICE" >"$DIR/peers.json" 2>"$DIR/peers.err" ||
      { note "peers failed"; tail -5 "$DIR/peers.err" >&2; }
    if [[ -s "$DIR/peers.json" ]]; then
      local ae
      ae=$(jnum "$DIR/peers.json" "d.get('accelerate_error') or ''")
      [[ -z $ae ]] || note "accelerate failed: ${ae:0:300}"
    fi
  else
    note "no $PY with torch+transformers (and CUDA): peers skipped"
  fi
  local HBM H2D
  HBM=$(jnum "$DIR/peers.json" "round(d['hbm_gb_per_s'],1)")
  H2D=$(jnum "$DIR/peers.json" "round(d['h2d_gb_per_s'],1)")
  R[hbm]=$HBM R[h2d_peer]=$H2D
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
  R[hf1]=$(jnum "$DIR/peers.json" "round(d['hf']['1'],1)"); R[hf32]=$(jnum "$DIR/peers.json" "round(d['hf']['32'],1)")
  R[ac1]=$(jnum "$DIR/peers.json" "round(d['accelerate']['1'],2)"); R[ac16]=$(jnum "$DIR/peers.json" "round(d['accelerate']['16'],2)")
  R[x_hf1]=$(ratio "${R[tok_res1]}" "${R[hf1]}"); R[x_hf32]=$(ratio "${R[tok_res32]}" "${R[hf32]}")
  R[x_ac1]=$(ratio "${R[tok_str1]}" "${R[ac1]}"); R[x_ac16]=$(ratio "${R[tok_str16]}" "${R[ac16]}")
  rm -rf "$MODEL"  # its disk space, before the load file is written
}
if [[ "${SKIP_ENGINE:-0}" != 1 ]]; then
  [[ $REHEARSAL != 1 ]] || real_budgets
  if have_time 60 "the engine runs"; then engine_runs; else R[model]=$OUT_OF_TIME; fi
fi

# 4. load: one filled file, warm cache
load_rows() {
  local FILE="$DIR/load.safetensors" best=0 bestcfg="" cfg g
  if timeout "$(tmo)" ./scripts/bench_load.sh --make-only "$FILE" "$GIB"; then
    cat "$FILE" >/dev/null; cat "$FILE" >/dev/null
    note "file $FILE: $(stat -c %s "$FILE") bytes"
  else
    note "making $FILE failed: the load steps below fail too"
  fi
  for cfg in "" "--threads 8 --staging-buffers 8" "--threads 8 --staging-buffers 8 --staging-size 256M" "--direct-io --threads 8 --staging-buffers 8"; do
    for _ in 1 2; do
      have_time 15 "load $cfg" || break 2
      # shellcheck disable=SC2086
      if timeout "$(tmo)" "$CLI" load "$FILE" --device cuda:0 --measure-h2d --verify $cfg --json >"$DIR/load.json" 2>"$DIR/load.err"; then
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
  if ! have_time 15 "load --dtype bf16"; then
    R[conv]=$OUT_OF_TIME
  elif timeout "$(tmo)" "$CLI" load "$FILE" --device cuda:0 --dtype bf16 --verify --json >"$DIR/conv.json" 2>"$DIR/conv.err"; then
    R[conv]=$(jget "$DIR/conv.json" "round(d['gb_per_s'],2)" gb_per_s)
  else
    R[conv]="FAIL: $(tail -1 "$DIR/conv.err")"
  fi
  # safetensors.torch.load_file(device="cuda") on the same file (rehearsal: device="cpu")
  if ! have_time 30 "safetensors load_file"; then
    R[st]=$OUT_OF_TIME
  elif "$PY" -c "import torch, safetensors; assert '$PEER_DEVICE' == 'cpu' or torch.cuda.is_available()" 2>/dev/null; then
    R[st]=$(timeout "$(tmo)" "$PY" - "$FILE" "$PEER_DEVICE" 2>"$DIR/safetensors.err" <<'PY' || echo "FAIL"
import sys, time, torch
from safetensors.torch import load_file
f, dev = sys.argv[1], sys.argv[2]
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
if dev == "cuda":
    torch.cuda.init(); torch.zeros(1, device="cuda")  # context outside the timing, as ours
best = 0.0
for _ in range(2):
    sync(); t0 = time.perf_counter()
    d = load_file(f, device=dev)
    sync(); t = time.perf_counter() - t0
    n = sum(v.numel() * v.element_size() for v in d.values())
    best = max(best, n / t / 1e9)
    del d
    if dev == "cuda":
        torch.cuda.empty_cache()
print(f"{best:.2f}")
PY
)
    [[ "${R[st]}" != *FAIL ]] && R[ratio_st]=$(awk -v a="$best" -v b="${R[st]}" 'BEGIN{ if (b+0 > 0) printf "%.1fx", a/b; else print "?" }')
  else
    R[st]="skipped (no torch with CUDA)"
  fi
  rm -f "$FILE"
}
if have_time 60 "the load rows"; then load_rows; else R[ours]=$OUT_OF_TIME; fi

# 5. estimate against PyTorch on the GPU (torch.cuda.max_memory_allocated/reserved): the CUDA
# cases of scripts/bench_estimate_accuracy.sh; its table goes to $BUILD/estimate-accuracy.log
if ! have_time 60 "estimate vs PyTorch"; then
  R[est]=$OUT_OF_TIME
elif "$PY" -c "import torch, transformers; assert torch.cuda.is_available()" 2>/dev/null; then
  if timeout "$(tmo)" env ONLY=cuda ./scripts/bench_estimate_accuracy.sh "$BUILD/nunchaku" >"$BUILD/estimate-accuracy.log" 2>&1; then
    R[est]=$(grep -E "^torch-cuda-(reserved|allocated): worst" "$BUILD/estimate-accuracy.log" | tr '\n' ' ')
  else
    R[est]="FAIL (estimate-accuracy.log)"
  fi
else
  R[est]="skipped (no torch + transformers with CUDA)"
fi

print_table
