#!/bin/sh
# Builds llama.cpp's own binaries, the speed peer of every comparison in
# bench/: llama-bench, llama-batched-bench, llama-cli, llama-server,
# llama-lookup and llama-speculative. Sources: the llama.cpp vendored in the
# PyPI sdist of llama-cpp-python 0.3.36 (the version scripts/
# requirements-llamacpp.txt pins), llama.cpp's default CPU build
# (GGML_NATIVE, its default buffer types), into build-llamacpp/
# (git-ignored). Nothing of llama.cpp is committed.
#
#   sh bench/build_llamacpp.sh [TARGET...]      # default: all six
#
# SDIST=path/to/llama_cpp_python-0.3.36.tar.gz skips the download (pip's
# `download --no-binary`, which reuses pip's cache). Prints the bin folder.
set -eu
VERSION=0.3.36
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/build-llamacpp"
PIP=${LLAMACPP_PIP:-python3 -m pip}
JOBS=${JOBS:-2}
TARGETS=${*:-llama-bench llama-batched-bench llama-cli llama-server llama-lookup llama-speculative}
mkdir -p "$OUT"
SDIST=${SDIST:-$OUT/llama_cpp_python-$VERSION.tar.gz}
[ -f "$SDIST" ] || $PIP download --no-binary :all: --no-deps "llama-cpp-python==$VERSION" -d "$OUT"
SRC="$OUT/llama_cpp_python-$VERSION/vendor/llama.cpp"
[ -d "$SRC" ] || tar -xzf "$SDIST" -C "$OUT"
# The web UI is off (it would need npm or a download), and so are HTTPS and
# curl (no network at run time); everything else is llama.cpp's default.
cmake -S "$SRC" -B "$OUT/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF >"$OUT/configure.log"
# shellcheck disable=SC2086
cmake --build "$OUT/build" --target $TARGETS -j "$JOBS" >"$OUT/build.log"
echo "$OUT/build/bin"
