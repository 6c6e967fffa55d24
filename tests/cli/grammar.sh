#!/usr/bin/env bash
# deepinfer grammar --check: accept (exit 0), reject (exit 1), and a schema
# that does not compile (exit 2 with a message), with the DeepSeek-V3
# tokenizer from ../shared/data; then a tiny --bench run.
set -euo pipefail
BIN=$1
TOK=../shared/data/tokenizer/deepseek-v3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -d "$TOK" ] || { echo "grammar.sh: $TOK missing, skipping"; exit 0; }

printf '{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"required":["n"],"additionalProperties":false}' >"$tmp/s.json"
printf '{"n":42}' >"$tmp/good.json"
printf '{"n":0}' >"$tmp/bad.json"
printf '{"uniqueItems":true}' >"$tmp/unsupported.json"

"$BIN" grammar --tokenizer "$TOK" --schema "$tmp/s.json" --check "$tmp/good.json" >"$tmp/out" || fail "good instance: exit $?"
head -1 "$tmp/out" | grep -qx accept || fail "good instance: $(cat "$tmp/out")"
grep -Eq '^compile [0-9.]+ us, [0-9]+ tokens, mask p50 [0-9.]+ us, p99 [0-9.]+ us$' "$tmp/out" || fail "timing line: $(cat "$tmp/out")"

rc=0; "$BIN" grammar --tokenizer "$TOK" --schema "$tmp/s.json" --check "$tmp/bad.json" >"$tmp/out" || rc=$?
[ "$rc" = 1 ] || fail "bad instance: exit $rc"
head -1 "$tmp/out" | grep -qx reject || fail "bad instance: $(cat "$tmp/out")"

rc=0; "$BIN" grammar --tokenizer "$TOK" --schema "$tmp/unsupported.json" --check "$tmp/good.json" >"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" = 2 ] || fail "unsupported schema: exit $rc"
grep -q "'uniqueItems'" "$tmp/err" || fail "unsupported schema message: $(cat "$tmp/err")"

rc=0; "$BIN" grammar --tokenizer "$TOK" --regex '[0-9]+' --check "$tmp/good.json" >"$tmp/out" || rc=$?
[ "$rc" = 1 ] || fail "regex reject: exit $rc"

mkdir "$tmp/bench" && cp "$tmp/s.json" "$tmp/bench/a.json" && cp "$tmp/unsupported.json" "$tmp/bench/b.json"
"$BIN" grammar --tokenizer "$TOK" --bench "$tmp/bench" >"$tmp/out" || fail "bench: exit $?"
grep -q "^schemas 2, compiled 1 (50.0%)" "$tmp/out" || fail "bench coverage: $(cat "$tmp/out")"
echo ok
