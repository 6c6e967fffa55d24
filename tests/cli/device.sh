#!/usr/bin/env bash
# --device on run / chat / batch / serve / bench and deepinfer info: cpu is
# the default and is named; a bad value and a device this build cannot use
# (cuda: no CUDA backend yet) fail with one clear line, never a crash.
set -euo pipefail
BIN=$1
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
TINY=tests/data/seeds/gguf/tiny_llama.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# exit status 1 or 2 (not a signal), stderr naming the reason
refused() { # name, want-regex, command...
  local name=$1 want=$2 rc=0
  shift 2
  "$@" </dev/null >"$tmp/out" 2>"$tmp/err" || rc=$?
  [ "$rc" = 1 ] || [ "$rc" = 2 ] || fail "$name: exit $rc (want 1 or 2): $(cat "$tmp/err")"
  grep -Eq "$want" "$tmp/err" || fail "$name: stderr lacks '$want': $(cat "$tmp/err")"
}

echo '{"prompt": "hi", "max_tokens": 2}' >"$tmp/in.jsonl"
args() { # the flags each command needs besides the model
  case $1 in
    run) echo "-p hi -n 2" ;;
    batch) echo "--in $tmp/in.jsonl --out $tmp/o.jsonl" ;;
    serve) echo "--port 0" ;;
    bench) echo "-p 4 -n 2 -r 1 -b 1" ;;
    *) echo "" ;;
  esac
}
# the three reasons a cuda request is refused: no CUDA backend in this
# build, no CUDA device, or the backend does not run the model yet
CUDA_NO="device 'cuda'(: deepinfer was built without a CUDA backend|: no usable CUDA device| \(.*\): the cuda backend does not yet implement)"
for cmd in run chat batch serve bench; do
  # shellcheck disable=SC2046
  refused "$cmd --device tpu" "device 'tpu' unknown: expected cpu, cuda or cuda:N" \
    "$BIN" $cmd -m "$TINY" $(args $cmd) --device tpu
  # shellcheck disable=SC2046
  refused "$cmd --device cuda" "$CUDA_NO" \
    "$BIN" $cmd -m "$TINY" $(args $cmd) --device cuda
  # shellcheck disable=SC2046
  refused "$cmd --device cuda:1" "device 'cuda:1'" "$BIN" $cmd -m "$TINY" $(args $cmd) --device cuda:1
done

# info names the device; asking for cuda says why not
"$BIN" info "$TINY" >"$tmp/out" 2>"$tmp/err" || fail "info: exit $?: $(cat "$tmp/err")"
grep -Eq "^device: +cpu \(backend cpu; kernels [a-z0-9-]+" "$tmp/out" || fail "info: no device line: $(cat "$tmp/out")"
"$BIN" info "$TINY" --device cpu >"$tmp/out" 2>&1 || fail "info --device cpu: exit $?"
grep -Eq "^device: +cpu" "$tmp/out" || fail "info --device cpu: no device line"
refused "info --device cuda" "$CUDA_NO" "$BIN" info "$TINY" --device cuda
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "info --device cuda: stderr is not one line: $(cat "$tmp/err")"
refused "info --device bad" "expected cpu, cuda or cuda:N" "$BIN" info "$TINY" --device bad

if [ -f "$MODEL" ]; then
  # --device cpu is the default: same greedy tokens
  "$BIN" run -m "$MODEL" -p "The capital of France" -n 6 --temp 0 -t 2 >"$tmp/a" 2>/dev/null || fail "run: exit $?"
  "$BIN" run -m "$MODEL" -p "The capital of France" -n 6 --temp 0 -t 2 --device cpu >"$tmp/b" 2>/dev/null \
    || fail "run --device cpu: exit $?"
  cmp -s "$tmp/a" "$tmp/b" || fail "--device cpu changed the output"
  "$BIN" bench -m "$MODEL" -p 4 -n 2 -r 1 -b '' -t 2 --device cpu --json >"$tmp/out" 2>/dev/null || fail "bench: exit $?"
  grep -q '"device": "cpu"' "$tmp/out" || fail "bench --json names no device: $(cat "$tmp/out")"
else
  echo "device.sh: default model not fetched, skipping the runs"
fi
echo "device.sh: ok"
