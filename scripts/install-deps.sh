#!/usr/bin/env bash
# Installs every build and test dependency of dynrt from Debian 12's registry (apt).
# Nothing is downloaded from anywhere else. Safe to run again: apt skips what is there.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git ca-certificates
  libcaf-dev libyaml-cpp-dev libeigen3-dev libxxhash-dev libcurl4-openssl-dev libssl-dev
  nlohmann-json3-dev libcli11-dev libspdlog-dev librapidcheck-dev
  libboost-dev libboost-system-dev libkainjow-mustache-dev
  libre2-dev libhiredis-dev redis-server
  libgtest-dev libgmock-dev libbenchmark-dev python3-jsonschema python3-yaml
  python3-matplotlib python3-httpx
  clang libclang-rt-14-dev llvm-14 clang-format
  lld  # the linker the build uses where it is installed: faster than GNU ld
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null; then
    echo "install-deps: missing ${missing[*]}; run this script as root (or install sudo)" >&2
    exit 1
  fi
  sudo_cmd=(sudo)
fi
echo "install-deps: installing ${missing[*]}"
"${sudo_cmd[@]}" apt-get update -q
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
