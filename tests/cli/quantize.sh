#!/usr/bin/env bash
# deepinfer quantize: rewrites the tiny seed model to each type; the result
# validates and its matrices carry the new type; bad arguments exit 2.
set -euo pipefail
BIN=$1
SEED=tests/data/seeds/gguf/tiny_llama.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

if "$BIN" quantize "$SEED" "$tmp/x.gguf" q9_9 2>/dev/null; then fail "bad type accepted"; fi
if "$BIN" quantize "$SEED" 2>/dev/null; then fail "missing arguments accepted"; fi
if "$BIN" quantize /nonexistent.gguf "$tmp/x.gguf" q8_0 2>/dev/null; then fail "missing input accepted"; fi
# the output naming the input (or a link to it) is refused; the input stays
cp "$SEED" "$tmp/self.gguf"
ln -s "$tmp/self.gguf" "$tmp/link.gguf"
sum=$(sha256sum <"$tmp/self.gguf")
for out in "$tmp/self.gguf" "$tmp/link.gguf"; do
  rc=0; "$BIN" quantize "$tmp/self.gguf" "$out" q8_0 2>"$tmp/err" || rc=$?
  [ "$rc" = 2 ] || fail "quantize onto its input ($out): exit $rc"
  grep -q "is the input file" "$tmp/err" || fail "quantize onto its input: $(cat "$tmp/err")"
done
[ "$(sha256sum <"$tmp/self.gguf")" = "$sum" ] || fail "quantize changed its input"
[ ! -e "$tmp/self.gguf.tmp" ] || fail "temporary file left behind"
# check SRC TYPE: quantize, validate, and find TYPE tensors in the result
check() {
  "$BIN" quantize "$1" "$tmp/$2.gguf" "$2" 2>"$tmp/err" || fail "$2: $(cat "$tmp/err")"
  "$BIN" info "$tmp/$2.gguf" >"$tmp/out" || fail "$2: info failed"
  grep -Eq "^validation: +ok" "$tmp/out" || fail "$2: does not validate"
  grep -Eq "^  $2 +[0-9]+ tensors" "$tmp/out" || fail "$2: no $2 tensors: $(cat "$tmp/out")"
}
check "$SEED" f16 # the seed's rows are 4 wide: only block-1 types apply
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f "$MODEL" ]; then
  for t in q8_0 q4_0 q4_K; do check "$MODEL" $t; done
  grep -Eq "^  q4_1 +181 tensors" "$tmp/out" || fail "q4_K: 576-wide matrices should fall back to q4_1"
else
  echo "quantize.sh: default model not fetched, skipping its checks"
fi
echo ok
