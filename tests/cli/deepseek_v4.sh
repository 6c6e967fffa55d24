#!/usr/bin/env bash
# deepinfer run -m DIR on the tiny DeepSeek-V4 checkpoints, through the
# engine: --prompt-ids in, --print-ids out, greedy, f32 KV; the ids must equal
# transformers' generate() recorded in goldens.json. Also a text prompt.
set -euo pipefail
BIN=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
for m in tiny_bf16 tiny_fp8; do
  D=tests/data/golden/deepseek_v4/$m
  # the cases with a greedy continuation: "prompt ids|greedy ids" per line
  python3 - "$D/goldens.json" >"/tmp/di_dsv4_cli_$$" <<'PY'
import json, sys
for c in json.load(open(sys.argv[1]))["cases"]:
    if "greedy" in c:
        print(" ".join(map(str, c["prompt"])) + "|" + " ".join(map(str, c["greedy"])))
PY
  n=0
  while IFS='|' read -r prompt want; do
    got=$("$BIN" run -m "$D" --prompt-ids "$prompt" -n 32 --temp 0 --print-ids --kv-f32 2>/dev/null) \
      || fail "$m: run exited $?"
    [ "$got" = "$want" ] || fail "$m: prompt '$prompt': got '$got' want '$want'"
    # speculative decoding (prompt lookup, rejected drafts rolled back) keeps the greedy ids
    got=$("$BIN" run -m "$D" --prompt-ids "$prompt $prompt" -n 24 --temp 0 --print-ids --kv-f32 --spec ngram \
          2>/dev/null) || fail "$m: --spec ngram exited $?"
    want2=$("$BIN" run -m "$D" --prompt-ids "$prompt $prompt" -n 24 --temp 0 --print-ids --kv-f32 2>/dev/null)
    [ "$got" = "$want2" ] || fail "$m: --spec ngram changed the greedy ids: '$got' vs '$want2'"
    n=$((n + 1))
  done <"/tmp/di_dsv4_cli_$$"
  rm -f "/tmp/di_dsv4_cli_$$"
  [ "$n" -gt 0 ] || fail "$m: no greedy cases"
  "$BIN" run -m "$D" -p "Hello, DeepSeek" --raw -n 8 --temp 0 >/dev/null 2>&1 || fail "$m: text prompt"
done
if "$BIN" run -m tests/data/golden/deepseek_v4/tiny_bf16 --prompt-ids "1 x 2" -n 2 >/dev/null 2>&1; then
  fail "bad --prompt-ids accepted"
fi
echo "deepseek_v4.sh: ok"
