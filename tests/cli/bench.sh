#!/usr/bin/env bash
# deepinfer bench: --json prints one object per test with the documented
# keys (values are timings, never checked); bad flags exit 2.
set -euo pipefail
BIN=$1
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

if "$BIN" bench -m "$MODEL" -b 0 >/dev/null 2>&1; then fail "-b 0 accepted"; fi
if "$BIN" bench -m "$MODEL" -r 0 >/dev/null 2>&1; then fail "-r 0 accepted"; fi
if "$BIN" bench -m /nonexistent.gguf -p 4 -n 2 -r 1 -b 1 >/dev/null 2>&1; then fail "missing model accepted"; fi

if [ -f "$MODEL" ]; then
  "$BIN" bench -m "$MODEL" -p 8 -n 4 -r 1 -b 1,3 --batch-gen 4 -t 2 --json >"$tmp/out" 2>"$tmp/err" \
    || fail "bench exited $?: $(cat "$tmp/err")"
  [ "$(wc -l <"$tmp/out")" -eq 4 ] || fail "want 4 JSON lines, got: $(cat "$tmp/out")"
  for t in pp8 tg4 batch1 batch3; do
    line=$(grep "\"test\": \"$t\"" "$tmp/out") || fail "no $t line"
    for k in tokens_per_s min max threads model kernels; do
      echo "$line" | grep -q "\"$k\": " || fail "$t lacks $k"
    done
  done
  grep -q "rep 1/1" "$tmp/err" || fail "no progress on stderr"
else
  echo "bench.sh: default model not fetched, skipping the run"
fi
echo ok
