#!/usr/bin/env bash
# Run where apt works, before a gpu-check.sh call on a machine that lacks the C++ build
# dependencies (the lent GPU machines have CMake, ninja, nvcc and PyTorch but none of these
# libraries, and cannot download): puts the Debian packages of fmt, nlohmann_json, Catch2,
# CLI11, PCRE2 and pkg-config into .deps/ (git-ignored; the device call carries it, e.g.
# carry [".deps"]). gpu-check.sh unpacks them into .deps/root, never into /.
#   ./scripts/gpu-deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=(libfmt-dev libfmt9 nlohmann-json3-dev catch2 libcli11-dev libpcre2-dev libpcre2-8-0
      pkgconf pkgconf-bin libpkgconf3)
rm -rf .deps && mkdir -p .deps
(cd .deps && apt-get download "${PKGS[@]}") ||
  { echo "gpu-deps: apt-get download failed (run 'apt-get update' first?)" >&2; exit 1; }
du -sh .deps
