#!/usr/bin/env bash
# The default model is found outside the checkout ($DEEPINFER_MODEL, the
# user cache), the error says where it looked, and `cmake --install` (what
# `make install` runs) lays out the binary, library, header and a
# pkg-config file that builds a program against the library.
set -euo pipefail
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
BUILD=$(dirname "$BIN")
SRC=$PWD
MODEL=$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# a copy of the binary outside any checkout, run from elsewhere, no cache
cp "$BIN" "$tmp/deepinfer"
mkdir "$tmp/home" "$tmp/cwd"
cd "$tmp/cwd"
rc=0; HOME=$tmp/home DEEPINFER_CACHE= "$tmp/deepinfer" run -p hi -n 1 2>"$tmp/err" || rc=$?
[ "$rc" = 1 ] || fail "no model anywhere: exit $rc"
grep -q "default model SmolLM2-135M-Instruct.Q4_1.gguf is not in any of" "$tmp/err" || fail "error: $(cat "$tmp/err")"
grep -q "$tmp/home/.cache/deepinfer/SmolLM2-135M-Instruct.Q4_1.gguf" "$tmp/err" || fail "cache not named: $(cat "$tmp/err")"
grep -q "share/deepinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf" "$tmp/err" || fail "prefix not named: $(cat "$tmp/err")"
if [ -f "$MODEL" ]; then
  HOME=$tmp/home DEEPINFER_MODEL=$MODEL "$tmp/deepinfer" run -p hi -n 1 -t 2 >/dev/null 2>"$tmp/err" \
    || fail "DEEPINFER_MODEL: $(cat "$tmp/err")"
  mkdir -p "$tmp/home/.cache/deepinfer"
  ln -s "$MODEL" "$tmp/home/.cache/deepinfer/SmolLM2-135M-Instruct.Q4_1.gguf"
  HOME=$tmp/home DEEPINFER_CACHE= "$tmp/deepinfer" run -p hi -n 1 -t 2 >/dev/null 2>"$tmp/err" \
    || fail "user cache: $(cat "$tmp/err")"
  # every command that defaults to the model finds it the same way
  for cmd in "bench -p 8 -n 2 -r 1 -b ''" "tokenize hi" "perplexity -f $SRC/README.md --chunks 1 -c 32 -t 2"; do
    HOME=$tmp/home DEEPINFER_CACHE= eval "\"\$tmp/deepinfer\" $cmd" >/dev/null 2>"$tmp/err" \
      || fail "user cache, $cmd: $(cat "$tmp/err")"
  done
  # and the build tree's own binary finds the checkout's models/ from anywhere
  HOME=$tmp/home2 "$BIN" run -p hi -n 1 -t 2 >/dev/null 2>"$tmp/err" || fail "build tree binary: $(cat "$tmp/err")"
fi
rc=0; DEEPINFER_MODEL=$tmp/none.gguf "$tmp/deepinfer" run -p hi 2>"$tmp/err" || rc=$?
[ "$rc" = 1 ] && grep -q 'DEEPINFER_MODEL' "$tmp/err" || fail "bad DEEPINFER_MODEL: $(cat "$tmp/err")"

# the install layout
cmake --install "$BUILD" --prefix "$tmp/prefix" >/dev/null || fail "cmake --install"
for f in bin/deepinfer lib/libdeepinfer.a include/deepinfer.h lib/pkgconfig/deepinfer.pc; do
  [ -f "$tmp/prefix/$f" ] || fail "not installed: $f"
done
"$tmp/prefix/bin/deepinfer" --version | grep -q '^deepinfer ' || fail "installed binary"
# The sanitizer build's library carries ASan/UBSan references: a program
# linked against it needs the same runtime flags.
san=""
case "${DI_SANITIZE:-OFF}" in ON|1|on|TRUE|true) san="-fsanitize=address,undefined" ;; esac
PKG_CONFIG_PATH=$tmp/prefix/lib/pkgconfig cc -std=c11 $san -o "$tmp/example" "$SRC/examples/batch_generate.c" \
  $(PKG_CONFIG_PATH=$tmp/prefix/lib/pkgconfig pkg-config --define-variable=prefix="$tmp/prefix" --cflags --libs deepinfer) \
  2>"$tmp/err" || fail "building against the installed library: $(cat "$tmp/err")"
echo ok
