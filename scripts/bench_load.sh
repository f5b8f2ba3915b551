#!/usr/bin/env bash
# CPU load speed against the hardware, on one >= 2 GB filled safetensors file in /tmp
# with a warm page cache:
#   ours  = `nunchaku load FILE --device cpu` GB/s (allocation included, best of RUNS)
#   cat   = `cat FILE >/dev/null` GB/s (page cache -> a small user buffer, best of RUNS)
#   memcpy= a plain memcpy of the same bytes into a pre-touched buffer (best of RUNS)
# printed as ratios ours/cat and ours/memcpy (target >= 0.9).
#   ./scripts/bench_load.sh [SIZE_GIB=2] [RUNS=3] [NUNCHAKU=build/nunchaku]
#   ./scripts/bench_load.sh --make-only FILE GIB     (just write the file)
set -euo pipefail
cd "$(dirname "$0")/.."
GIB=${1:-2}
RUNS=${2:-3}
BIN=${3:-build/nunchaku}
[[ "$GIB" == "--make-only" ]] || [[ -x "$BIN" ]] || ./scripts/build.sh >/dev/null
command -v cc >/dev/null || { echo "bench_load: needs a C compiler for the memcpy baseline" >&2; exit 1; }

# make_file FILE GIB: safetensors with 16 F32 [4096, 4096] tensors (64 MiB) per GiB, data
# filled (not sparse) with random blocks.
make_file() {
  local file=$1 gib=$2 tmp
  local nt=$((gib * 16)) tb=$((64 * 1024 * 1024))
  tmp=$(mktemp -d /tmp/nunchaku-mk-XXXX)
  {
    printf '{'
    for ((i = 0; i < nt; i++)); do
      ((i)) && printf ','
      printf '"model.layers.%d.mlp.weight":{"dtype":"F32","shape":[4096,4096],"data_offsets":[%d,%d]}' \
        "$i" $((i * tb)) $(((i + 1) * tb))
    done
    printf '}'
  } >"$tmp/header.json"
  local hlen pad
  hlen=$(stat -c %s "$tmp/header.json")
  pad=$(((8 - hlen % 8) % 8))
  printf '%*s' "$pad" '' >>"$tmp/header.json"
  hlen=$((hlen + pad))
  le64() { for ((k = 0; k < 8; k++)); do printf "\\$(printf '%03o' $((($1 >> (8 * k)) & 255)))"; done; }
  le64 "$hlen" >"$file"
  cat "$tmp/header.json" >>"$file"
  head -c "$tb" /dev/urandom >"$tmp/block"
  for ((i = 0; i < nt; i++)); do cat "$tmp/block"; done >>"$file"
  rm -rf "$tmp"
}

if [[ "${1:-}" == "--make-only" ]]; then  # used by scripts/gpu-check.sh
  make_file "$2" "$3"
  exit 0
fi

DIR=$(mktemp -d /tmp/nunchaku-bench-load-XXXX)
trap 'rm -rf "$DIR"' EXIT
FILE="$DIR/model.safetensors"
NT=$((GIB * 16))
TB=$((64 * 1024 * 1024))
make_file "$FILE" "$GIB"
BYTES=$((NT * TB))
echo "file: $FILE ($(numfmt --to=iec "$(stat -c %s "$FILE")"), $NT tensors, $BYTES tensor bytes)"

cat >"$DIR/memcpy.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
int main(int argc, char** argv) {
  size_t n = strtoull(argv[1], 0, 10);
  int runs = atoi(argv[2]);
  char *a = malloc(n), *b = malloc(n);
  if (!a || !b) return 1;
  memset(a, 1, n);
  memset(b, 2, n);  /* pre-touched: the baseline is pure copy bandwidth */
  double best = 0;
  for (int r = 0; r < runs; ++r) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    memcpy(b, a, n);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    if (n / s / 1e9 > best) best = n / s / 1e9;
  }
  printf("%.3f\n", best + 0 * b[n / 2]);
  return 0;
}
C
cc -O2 -o "$DIR/memcpy" "$DIR/memcpy.c"

now() { date +%s.%N; }
cat "$FILE" >/dev/null; cat "$FILE" >/dev/null   # warm the page cache

best_cat=0
for ((r = 0; r < RUNS; r++)); do
  t0=$(now); cat "$FILE" >/dev/null; t1=$(now)
  best_cat=$(awk -v b="$BYTES" -v t0="$t0" -v t1="$t1" -v m="$best_cat" 'BEGIN{g=b/(t1-t0)/1e9; print (g>m?g:m)}')
done
best_memcpy=$("$DIR/memcpy" "$BYTES" "$RUNS")
best_ours=0
for ((r = 0; r < RUNS; r++)); do
  g=$("$BIN" load "$FILE" --device cpu --json | sed -n 's/^  "gb_per_s": \([0-9.e+-]*\),*$/\1/p')
  best_ours=$(awk -v g="$g" -v m="$best_ours" 'BEGIN{print (g>m?g:m)}')
done
best_copy=0
for ((r = 0; r < RUNS; r++)); do
  g=$("$BIN" load "$FILE" --device cpu --copy --json | sed -n 's/^  "gb_per_s": \([0-9.e+-]*\),*$/\1/p')
  best_copy=$(awk -v g="$g" -v m="$best_copy" 'BEGIN{print (g>m?g:m)}')
done
"$BIN" load "$FILE" --device cpu | sed 's/^/  /'

printf '\n%-28s %8s\n' "CPU load, warm cache" "GB/s"
printf '%-28s %8.2f\n' "cat file >/dev/null" "$best_cat"
printf '%-28s %8.2f\n' "memcpy (same bytes)" "$best_memcpy"
printf '%-28s %8.2f  (populated read-only mappings of the page cache)\n' "nunchaku load --device cpu" "$best_ours"
printf '%-28s %8.2f  (private copies: fresh pages + pread)\n' "nunchaku load --copy" "$best_copy"
awk -v o="$best_ours" -v p="$best_copy" -v c="$best_cat" -v m="$best_memcpy" 'BEGIN{
  printf "%-28s %8.2f  (target >= 0.9)\n", "ratio load/cat", o/c;
  printf "%-28s %8.2f  (target >= 0.9)\n", "ratio load/memcpy", o/m;
  printf "%-28s %8.2f\n", "ratio load --copy/cat", p/c;
  printf "%-28s %8.2f\n", "ratio load --copy/memcpy", p/m }'
