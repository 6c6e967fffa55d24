#!/usr/bin/env bash
# --bounded-replay[=KEEP] (docs/BOUNDED_REPLAY.md) from the command line: the
# tiny DeepSeek-V4.1 checkpoint runs with it, a keep below the window and a
# model that is not V4.1 are refused with a reason, every generating command
# takes the flag.
set -euo pipefail
BIN=$1
V41=tests/data/golden/deepseek_v41/tiny
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

for cmd in run chat batch serve; do
  "$BIN" $cmd --help >"$tmp/help" || fail "$cmd --help: exit $?"
  grep -q -- '--bounded-replay\[=N\]' "$tmp/help" || fail "$cmd --help: no --bounded-replay"
done

long="one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"
long="$long $long $long"
"$BIN" run -m "$V41" -p "$long" -n 4 --temp 0 -t 2 --bounded-replay >"$tmp/out" 2>"$tmp/err" \
  || fail "--bounded-replay: exit $?: $(cat "$tmp/err")"
"$BIN" run -m "$V41" -p "$long" -n 4 --temp 0 -t 2 --bounded-replay=40 >"$tmp/out" 2>"$tmp/err" \
  || fail "--bounded-replay=40: exit $?: $(cat "$tmp/err")"

rc=0; "$BIN" run -m "$V41" -p x -n 2 --bounded-replay=3 >"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" = 1 ] && grep -q "keep 3 is below the window 16" "$tmp/err" || fail "keep 3: exit $rc: $(cat "$tmp/err")"
rc=0; "$BIN" run -m "$V41" -p x -n 2 --bounded-replay=abc >"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" = 2 ] && grep -q -- "--bounded-replay: expected an integer" "$tmp/err" || fail "keep abc: exit $rc: $(cat "$tmp/err")"

MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f "$MODEL" ]; then
  rc=0; "$BIN" run -m "$MODEL" -p x -n 2 --bounded-replay >"$tmp/out" 2>"$tmp/err" || rc=$?
  [ "$rc" = 1 ] && grep -q "applies to DeepSeek-V4.1 checkpoints only (this model is llama)" "$tmp/err" \
    || fail "llama: exit $rc: $(cat "$tmp/err")"
fi
echo ok
