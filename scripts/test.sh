#!/usr/bin/env bash
# Installs what is missing, builds, runs the whole test suite with ctest.
#   ./scripts/test.sh              normal build in build/
#   ./scripts/test.sh --sanitize   ASan+UBSan build in build-asan/ (without nvcc; the CUDA
#                                  emulator tests run the cuda/*.cu kernels under the sanitizers)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
if [[ "${1:-}" == "--sanitize" ]]; then
  export BUILD_DIR=build-asan
  ./scripts/build.sh -DNUNCHAKU_SANITIZE=ON -DNUNCHAKU_CUDA=OFF -DNUNCHAKU_CUDA_EMU=ON
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
else
  export BUILD_DIR=build
  ./scripts/build.sh
fi
cd "$BUILD_DIR"
ctest --output-on-failure -j "$(nproc)"
