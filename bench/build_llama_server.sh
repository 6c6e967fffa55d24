#!/bin/sh
# Builds llama.cpp's native `llama-server` (parallel slots, continuous
# batching) from the llama.cpp sources vendored in the PyPI sdist of
# llama-cpp-python 0.3.36, CPU only, into build-llamacpp/ (git-ignored).
# Nothing of llama.cpp is committed. Usage:
#
#   sh bench/build_llama_server.sh [SDIST.tar.gz]
#
# Without an argument the sdist is fetched with the llama-cpp-python venv's
# pip (`pip download --no-binary`), which also reuses pip's cache. The binary
# ends up at build-llamacpp/build/bin/llama-server. Run it with --no-repack:
# llama.cpp's extra buffer types (AMX / repacked weights) segfault on this
# project's VM (see bench/README.md).
set -eu
VERSION=0.3.36
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/build-llamacpp"
PIP=${LLAMACPP_PIP:-/work/venv-llamacpp/bin/pip}
JOBS=${JOBS:-2}
mkdir -p "$OUT"
SDIST=${1:-}
if [ -z "$SDIST" ]; then
    SDIST="$OUT/llama_cpp_python-$VERSION.tar.gz"
    [ -f "$SDIST" ] || "$PIP" download --no-binary :all: --no-deps "llama-cpp-python==$VERSION" -d "$OUT"
fi
SRC="$OUT/llama_cpp_python-$VERSION/vendor/llama.cpp"
[ -d "$SRC" ] || tar -xzf "$SDIST" -C "$OUT"
# UI off (it would need npm or a download); no HTTPS; only the server target.
cmake -S "$SRC" -B "$OUT/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
    -DBUILD_SHARED_LIBS=OFF >"$OUT/configure.log"
cmake --build "$OUT/build" --target llama-server -j "$JOBS" >"$OUT/build.log"
echo "$OUT/build/bin/llama-server"
