#!/usr/bin/env bash
# Run where apt works, before a gpu-check.sh call on a machine that lacks the C++ build
# dependencies (the lent GPU machines have CMake, ninja, nvcc and PyTorch but none of these
# libraries, and cannot download): puts the Debian packages of fmt, spdlog, nlohmann_json,
# Catch2, CLI11, PCRE2 and pkg-config into .deps/ (git-ignored; the device call carries it,
# e.g. carry [".deps"]). gpu-check.sh unpacks them into .deps/root, never into /, and says
# where CMake found each one. Every find_package of CMakeLists.txt needs its package here.
#   ./scripts/gpu-deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# The shared library a -dev package depends on (its name carries the soname's version).
runtime_of() {
  apt-cache depends "$1" 2>/dev/null | awk -v re="$2" '$1 == "Depends:" && $2 ~ re { print $2; exit }'
}
FMT=$(runtime_of libfmt-dev '^libfmt[0-9]')
SPDLOG=$(runtime_of libspdlog-dev '^libspdlog[0-9]')
[[ -n "$FMT" && -n "$SPDLOG" ]] ||
  { echo "gpu-deps: apt-cache does not know libfmt-dev / libspdlog-dev (run 'apt-get update' first?)" >&2; exit 1; }
PKGS=(libfmt-dev "$FMT" libspdlog-dev "$SPDLOG" nlohmann-json3-dev catch2 libcli11-dev libpcre2-dev
      libpcre2-8-0 pkgconf pkgconf-bin libpkgconf3)
rm -rf .deps && mkdir -p .deps
(cd .deps && apt-get download "${PKGS[@]}") ||
  { echo "gpu-deps: apt-get download failed (run 'apt-get update' first?)" >&2; exit 1; }
du -sh .deps
