#!/usr/bin/env bash
# Installs the Debian packages DeepInfer builds and tests with. Idempotent:
# packages already present are not touched, and apt is not called at all
# when nothing is missing. libedit-dev gives `deepinfer chat` line editing and
# history (the build falls back to plain line reading without it).
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config clang libclang-rt-14-dev
  libpcre2-dev libutf8proc-dev libjansson-dev libmicrohttpd-dev libcmocka-dev
  libopenmpi-dev openmpi-bin
  libedit-dev
  python3 python3-venv unzip curl ca-certificates
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
