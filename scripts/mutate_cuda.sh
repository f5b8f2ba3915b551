#!/usr/bin/env bash
# Planted-bug (mutation) check of the CUDA code: does a wrong kernel fail the emulator tests?
#
#   scripts/mutate_cuda.sh [--list] [--only ID,ID,...]
#   MUTATE_REV=<commit> scripts/mutate_cuda.sh    (that commit's files instead of the worktree)
#
# Each mutation below is one realistic bug (an off-by-one, a dropped barrier, a wrong shuffle,
# a truncating conversion, a missing event wait, ...) written as a literal edit of one file
# under cuda/. The script copies the working tree (git's tracked and unignored files) to a
# scratch tree, $MUTATE_DIR/tree (default build-mutate/tree, ignored by git), builds
# nunchaku_cuda_emu_tests there (the emulator's objects only; ccache makes the first build
# cheap),
# then for each mutation: edits the scratch copy, rebuilds, runs every test of the binary
# (stopping at the first failure) and restores the file. The worktree's own files are never
# edited, and the scratch file is restored on exit or Ctrl-C as well.
#
# Prints one table last: mutation, file:line, caught/SURVIVED, the first failing test and its
# message ("build failed" means the mutation itself is broken: fix its text). Exit status 0
# when every mutation is caught, 1 when some survived, 2 on a usage or setup error.
# Each test run is limited to $MUTATE_TIMEOUT seconds (default 600; a hang counts as caught).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${MUTATE_DIR:-$ROOT/build-mutate}
TREE=$WORK/tree
BUILD=$TREE/build-emu
TIMEOUT=${MUTATE_TIMEOUT:-600}
JOBS=${MUTATE_JOBS:-2}

# ---- the mutations: id | file | description | text to find (exactly once) | replacement ----
IDS=() FILES=() DESCS=() OLDS=() NEWS=()
m() { IDS+=("$1"); FILES+=("$2"); DESCS+=("$3"); OLDS+=("$4"); NEWS+=("$5"); }

E=cuda/engine_ops.cu
m sync-blocksum $E "block_sum: no __syncthreads between writing part[] and reading it" \
  $'  if (lane == 0) part[warp] = v;\n  __syncthreads();\n' \
  $'  if (lane == 0) part[warp] = v;\n'
m shfl-down $E "warp_sum(float): __shfl_down_sync for __shfl_xor_sync (only lane 0 gets the sum)" \
  $'float warp_sum(float v) {\n  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);' \
  $'float warp_sum(float v) {\n  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);'
m shfl-width $E "warp_sum(double): shuffle width 16 (the two half-warps never meet)" \
  $'double warp_sum(double v) {\n  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);' \
  $'double warp_sum(double v) {\n  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o, 16);'
m gemv-row-bound $E "gemv_quant: row bound r > rows (the warp past the last row runs)" \
  $'  if (r >= w.rows) return;\n  const uint8_t* row = static_cast<const uint8_t*>(w.data) + uint64_t(r) * w.row_bytes;\n  const int64_t chunks' \
  $'  if (r > w.rows) return;\n  const uint8_t* row = static_cast<const uint8_t*>(w.data) + uint64_t(r) * w.row_bytes;\n  const int64_t chunks'
m half8-tail $E "gemv_half8: loop bound i < n8 - 1 (the last 8 columns dropped)" \
  $'for (int64_t i = lane; i < n8; i += 32)' \
  $'for (int64_t i = lane; i < n8 - 1; i += 32)'
m panel-offset $E "dequant_panel: rows taken from row 0, not the panel's first row r0" \
  $'uint64_t(r0 + r) * w.row_bytes' \
  $'uint64_t(r) * w.row_bytes'
m kv-slot $E "rope_cache: K/V written at pos without the sequence slot's offset" \
  $'(uint64_t(slot[t]) * uint64_t(s.max_context) + uint64_t(pos[t])) * uint64_t(kv_dim)' \
  $'(uint64_t(pos[t])) * uint64_t(kv_dim)'
m syncwarp-rope $E "rope_cache: no __syncwarp between the rotation and the K cache write" \
  $'  __syncwarp();\n  if (is_q) return;' \
  $'  if (is_q) return;'
m gqa-map $E "attention: GQA head h reads kv head h % kv_heads, not h / group" \
  $'const int64_t g = h / (s.heads / s.kv_heads)' \
  $'const int64_t g = h % s.kv_heads'
m window $E "attention: sliding window one position too wide (p1 - window)" \
  $'lo = window > 0 ? (p1 - window + 1 > 0 ? p1 - window + 1 : 0) : 0' \
  $'lo = window > 0 ? (p1 - window > 0 ? p1 - window : 0) : 0'
m sync-attn $E "attention: no __syncthreads before the warps' partial results are merged" \
  $'so[warp][lane + 32 * j] = o[j];\n  __syncthreads();\n' \
  $'so[warp][lane + 32 * j] = o[j];\n'

D=cuda/device_math.hpp
m q4k-nibble $D "Q4_K/Q5_K: scale of sub-blocks 4-7 from the high nibble (the min's)" \
  $'sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);' \
  $'sc = (s[j + 4] >> 4) | ((s[j - 4] >> 6) << 4);'
m q6k-scale $D "Q6_K: scale index l / 16 + g instead of l / 16 + 2 * g" \
  $'float(sc[l / 16 + 2 * g])' \
  $'float(sc[l / 16 + g])'

C=cuda/convert.cu
m bf16-trunc $C "convert_kernel: bf16 by truncation (bits >> 16), not round to nearest even" \
  $'static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(v);' \
  $'static_cast<uint16_t*>(dst)[i] = uint16_t(__float_as_uint(v) >> 16);'
m convert-bound $C "convert_kernel: grid-stride bound i <= n (one element past the end)" \
  $'i < n; i += uint64_t(gridDim.x) * blockDim.x' \
  $'i <= n; i += uint64_t(gridDim.x) * blockDim.x'

R=cuda/copy_ring.cu
m ring-no-wait $R "copy ring: the compute stream does not wait for the slot's copy (filled event)" \
  $'  NK_CUDA(cudaStreamWaitEvent(cudaStream_t(compute_), ev(filled_[size_t(s)]), 0));\n' \
  $'  (void)s;\n'
m ring-refill $R "copy ring: a refill does not wait for the compute stream's last use (done event)" \
  $'  NK_CUDA(cudaStreamWaitEvent(cudaStream_t(copy_), ev(done_[size_t(s)]), 0));\n' \
  ''
m ring-event-stream $R "copy ring: filled event recorded on the compute stream, not the copy stream" \
  $'cudaEventRecord(ev(filled_[size_t(s)]), cudaStream_t(copy_))' \
  $'cudaEventRecord(ev(filled_[size_t(s)]), cudaStream_t(compute_))'

L=cuda/loader.cu
m convert-stream $L "loader: conversion kernel on the default stream, unordered with its copy" \
  $'launch_convert(from, to, dst, scratch_, n, s, err)' \
  $'launch_convert(from, to, dst, scratch_, n, nullptr, err)'
m d2h-no-sync $L "loader: read-back without waiting for the copy streams (no cudaDeviceSynchronize)" \
  $'  if (!ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize", err)) return false;\n  return ok(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost)' \
  $'  return ok(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost)'

I=cuda/device_info.cu
m devinfo-free $I "list_devices: free memory reported as the total" \
  $'d.free_bytes = free_b;' \
  $'d.free_bytes = total_b;'

# apply I [TREE [no]]: applies mutation I to TREE's copy (the scratch tree; "no": only
# look) and prints the line it changes.
apply() {
  python3 - "${2:-$TREE}/${FILES[$1]}" "${OLDS[$1]}" "${NEWS[$1]}" "${3:-yes}" <<'EOF'
import sys
path, old, new, write = sys.argv[1:5]
text = open(path).read()
n = text.count(old)
if n != 1:
    sys.exit(f"{path}: the text to mutate occurs {n} times, not once")
at = text.index(old)
if write == "yes":
    open(path, "w").write(text.replace(old, new))
same = 0  # the line reported is the first one the edit changes
while same < min(len(old), len(new)) and old[same] == new[same]:
    same += 1
print(text.count("\n", 0, at + same) + 1)
EOF
}

# ---- options ----------------------------------------------------------------------------
ONLY=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --list)  # read-only: where each mutation applies in the worktree
      for i in "${!IDS[@]}"; do
        line=$(apply "$i" "$ROOT" no) || line="NOT FOUND"
        printf '%-18s %-26s %s\n' "${IDS[$i]}" "${FILES[$i]}:$line" "${DESCS[$i]}"
      done
      exit 0 ;;
    --only) ONLY=",${2:?--only needs a list of ids},"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "mutate_cuda.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

# ---- the scratch tree ----------------------------------------------------------------------
mkdir -p "$TREE"
cd "$ROOT"
# sync SRC DST < NUL-separated paths: copies each file whose content differs. Copies get a new
# modification time (ninja rebuilds what a copy replaced only when it is newer than its outputs).
sync_tree() {
  python3 -c '
import os, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
for rel in filter(None, sys.stdin.buffer.read().decode().split("\0")):
    a, b = os.path.join(src, rel), os.path.join(dst, rel)
    if os.path.islink(a) or not os.path.isfile(a):
        continue
    if os.path.isfile(b) and os.path.getsize(a) == os.path.getsize(b) and open(a, "rb").read() == open(b, "rb").read():
        continue
    os.makedirs(os.path.dirname(b), exist_ok=True)
    shutil.copyfile(a, b)
    shutil.copymode(a, b)
' "$1" "$2"
}
if [[ -n "${MUTATE_REV:-}" ]]; then  # a commit instead of the working tree
  rm -rf "$WORK/rev" && mkdir -p "$WORK/rev"
  git archive "$MUTATE_REV" | tar -x -C "$WORK/rev"
  git ls-tree -r -z --name-only "$MUTATE_REV" | sync_tree "$WORK/rev" "$TREE"
else
  git ls-files -z --cached --others --exclude-standard | sync_tree "$ROOT" "$TREE"
fi
# The pristine copies the scratch files are restored from (the worktree may change meanwhile).
rm -rf "$WORK/orig"
for f in $(printf '%s\n' "${FILES[@]}" | sort -u); do mkdir -p "$WORK/orig/$(dirname "$f")"; cp "$TREE/$f" "$WORK/orig/$f"; done
RESTORE=""
restore() {
  if [[ -n "$RESTORE" ]]; then cp "$WORK/orig/$RESTORE" "$TREE/$RESTORE"; RESTORE=""; fi
}
trap 'restore' EXIT
trap 'restore; echo "mutate_cuda.sh: interrupted, scratch restored" >&2; exit 130' INT
trap 'restore; exit 143' TERM

# The normal build's flags (so ccache has the objects); CMAKE_OPTIMIZE_DEPENDENCIES drops the
# static libraries' build-order edges, so a mutated .cu rebuilds the emulator's object only,
# not also the nvcc one (the `nunchaku` binary and nunchaku_tests are never built here).
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
[[ -f "$BUILD/CMakeCache.txt" ]] || GEN+=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
cmake -S "$TREE" -B "$BUILD" "${GEN[@]}" -DNUNCHAKU_CUDA_EMU=ON -DCMAKE_OPTIMIZE_DEPENDENCIES=ON >"$WORK/configure.log" 2>&1 ||
  { tail -20 "$WORK/configure.log"; exit 2; }
echo "building the unmutated emulator tests in $BUILD ..." >&2
cmake --build "$BUILD" --target nunchaku_cuda_emu_tests -j "$JOBS" >"$WORK/build.log" 2>&1 ||
  { tail -30 "$WORK/build.log"; echo "mutate_cuda.sh: the unmutated tree does not build" >&2; exit 2; }
echo "running the unmutated tests ..." >&2
(cd "$BUILD" && timeout "$TIMEOUT" ./nunchaku_cuda_emu_tests >"$WORK/baseline.log" 2>&1) ||
  { tail -30 "$WORK/baseline.log"; echo "mutate_cuda.sh: the unmutated tests fail: nothing to compare" >&2; exit 2; }


# The first failure in a Catch2 XML report (possibly cut short by a crash or a timeout).
first_failure() {
  python3 - "$1" <<'EOF'
import html, re, sys
xml = open(sys.argv[1], errors="replace").read()
def clean(s, n=160):
    s = " ".join(html.unescape(s).split())
    return s if len(s) <= n else s[: n - 3] + "..."
case, infos = None, []
pattern = (r'<TestCase name="([^"]*)"|<Info>(.*?)</Info>|<Expression success="false"[^>]*>(.*?)</Expression>'
           r'|<(Exception|FatalErrorCondition)[^>]*>(.*?)</\4>|<OverallResult success="true"')
for m in re.finditer(pattern, xml, re.S):
    if m.group(1) is not None:
        case, infos = html.unescape(m.group(1)), []
    elif m.group(2) is not None:
        infos.append(m.group(2))
    elif m.group(3) is not None:
        body = m.group(3)
        exc = re.search(r"<(Exception|FatalErrorCondition)[^>]*>(.*?)</\1>", body, re.S)
        expanded = re.search(r"<Expanded>(.*?)</Expanded>", body, re.S)
        msg = f"{exc.group(1)}: {clean(exc.group(2), 240)}" if exc else clean(expanded.group(1) if expanded else "")
        print(f"{case} | {msg}" + (f" | {clean(infos[-1])}" if infos and not exc else ""))
        sys.exit(0)
    elif m.group(4) is not None:
        print(f"{case} | {m.group(4)}: {clean(m.group(5), 240)}")
        sys.exit(0)
    else:
        infos = []
print(f"{case} | the run stopped there without a failure report (crash or kill)" if case else "no failure reported")
EOF
}

RESULTS=()
CAUGHT=0 TOTAL=0
for i in "${!IDS[@]}"; do
  id=${IDS[$i]} file=${FILES[$i]}
  [[ -z "$ONLY" || "$ONLY" == *",$id,"* ]] || continue
  TOTAL=$((TOTAL + 1))
  RESTORE=$file
  line=$(apply "$i") || { restore; RESULTS+=("$id|$file:?|ERROR|the text to mutate is not in $file (once)"); continue; }
  echo "[$id] $file:$line: ${DESCS[$i]}" >&2
  log=$WORK/$id
  if ! cmake --build "$BUILD" --target nunchaku_cuda_emu_tests -j "$JOBS" >"$log.build.log" 2>&1; then
    restore
    RESULTS+=("$id|$file:$line|ERROR|build failed (see $log.build.log)")
    continue
  fi
  set +e
  (cd "$BUILD" && timeout "$TIMEOUT" ./nunchaku_cuda_emu_tests -a -r xml -o "$log.xml" >"$log.out" 2>&1)
  rc=$?
  set -e
  restore
  if [[ $rc -eq 0 ]]; then
    RESULTS+=("$id|$file:$line|SURVIVED|every test passed")
  else
    CAUGHT=$((CAUGHT + 1))
    if [[ $rc -eq 124 ]]; then what="timed out after ${TIMEOUT}s: $(first_failure "$log.xml")"
    else what=$(first_failure "$log.xml"); fi
    RESULTS+=("$id|$file:$line|caught|$what")
  fi
done
# Leave the scratch build matching the tree again (cheap: the next run starts from it).
cmake --build "$BUILD" --target nunchaku_cuda_emu_tests -j "$JOBS" >/dev/null 2>&1 || true

echo
printf '| %-3s | %-18s | %-28s | %-8s | %s\n' "#" "mutation" "where" "result" "first failing test | message"
printf '|%s|%s|%s|%s|%s\n' "-----" "--------------------" "------------------------------" "----------" "----"
n=0
for r in "${RESULTS[@]}"; do
  n=$((n + 1))
  IFS='|' read -r id where res what <<<"$r"
  printf '| %-3s | %-18s | %-28s | %-8s | %s\n' "$n" "$id" "$where" "$res" "$what"
done
echo
echo "caught $CAUGHT/$TOTAL (emulator: NUNCHAKU_CUDA_EMU_* from the environment; logs in $WORK)"
[[ $CAUGHT -eq $TOTAL ]]
