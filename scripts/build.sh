#!/usr/bin/env bash
# Configures and builds into build/ (or $BUILD_DIR). Extra args go to cmake.
# BUILD_TARGETS="nunchaku" builds only those targets (demo.sh: not the test suite).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
elif [[ $# -gt 0 ]]; then
  cmake -S . -B "$BUILD_DIR" "$@"
fi
TARGETS=()
for t in ${BUILD_TARGETS:-}; do TARGETS+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$(nproc)" "${TARGETS[@]}"
