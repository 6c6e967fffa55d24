#!/bin/sh
# Builds llama.cpp's own speculative-decoding tools, `llama-lookup` (prompt
# lookup / n-gram drafts) and `llama-speculative` (a draft model). Same
# sources as bench/build_llama_server.sh: the llama.cpp vendored in
# the PyPI sdist of llama-cpp-python 0.3.36, CPU only, into
# build-llamacpp/ (git-ignored). Nothing of llama.cpp is committed.
#
#   sh bench/build_llama_spec.sh [SDIST.tar.gz]
#
# Prints the bin folder. Run the tools with --no-repack where they take it
# (see bench/README.md).
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
cmake -S "$SRC" -B "$OUT/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
    -DBUILD_SHARED_LIBS=OFF >"$OUT/configure-spec.log"
cmake --build "$OUT/build" --target llama-lookup llama-speculative -j "$JOBS" >"$OUT/build-spec.log"
echo "$OUT/build/bin"
