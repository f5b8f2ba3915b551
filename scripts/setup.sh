#!/usr/bin/env bash
# Installs the Debian packages nunchaku needs to build and test, when missing.
# As root: runs apt-get. Otherwise: prints the apt-get line and exits 1.
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config libcli11-dev libfmt-dev libspdlog-dev
      nlohmann-json3-dev catch2 libpcre2-dev
      libcurl4-openssl-dev  # src/hub: reads from the Hugging Face Hub (optional for the build)
      fish)  # fish: the completion test runs `fish -n` and fish's own completion on our script
[[ "${1:-}" == "--fuzz" ]] && PKGS+=(clang libclang-rt-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ $(id -u) -ne 0 ]]; then
  echo "nunchaku needs these Debian packages: ${missing[*]}" >&2
  echo "run: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
