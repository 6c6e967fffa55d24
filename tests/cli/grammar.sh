#!/usr/bin/env bash
# deepinfer grammar --check: accept (exit 0), reject (exit 1), and a schema
# that does not compile (exit 2 with a message), with the DeepSeek-V3
# tokenizer fetched into testdata/; then a tiny --bench run.
set -euo pipefail
BIN=$1
TOK=testdata/tokenizer/deepseek-v3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -d "$TOK" ] || fail "$TOK missing (scripts/fetch-testdata.sh fetches it)"

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

# ordinary JSON files: a trailing newline, spaces after ':' and ','
printf '{"n": 42}\n' >"$tmp/spaced.json"
"$BIN" grammar --tokenizer "$TOK" --schema "$tmp/s.json" --check "$tmp/spaced.json" >"$tmp/out" || fail "spaced instance: exit $?: $(cat "$tmp/out")"
printf '  {\n  "n" : 42\n}\n\n' >"$tmp/pretty.json"
"$BIN" grammar --tokenizer "$TOK" --schema "$tmp/s.json" --check "$tmp/pretty.json" >"$tmp/out" || fail "pretty instance: exit $?: $(cat "$tmp/out")"
printf '{"s": "a b\\" c"}\n' >"$tmp/str.json"   # whitespace inside strings stays
printf '{"type":"object","properties":{"s":{"const":"a b\\" c"}},"required":["s"]}' >"$tmp/sconst.json"
"$BIN" grammar --tokenizer "$TOK" --schema "$tmp/sconst.json" --check "$tmp/str.json" >"$tmp/out" || fail "string with spaces: $(cat "$tmp/out")"
# a reject says where and what was expected, at the file's own position
rc=0; "$BIN" grammar --tokenizer "$TOK" --schema "$tmp/s.json" --check "$tmp/bad.json" >"$tmp/out" || rc=$?
grep -qx "at byte 5 (line 1, column 6): got '0', expected '1'-'9'" "$tmp/out" || fail "reject explanation: $(cat "$tmp/out")"
printf '{\n  "n": x}' >"$tmp/bad2.json"
rc=0; "$BIN" grammar --tokenizer "$TOK" --schema "$tmp/s.json" --check "$tmp/bad2.json" >"$tmp/out" || rc=$?
[ "$rc" = 1 ] && grep -q "^at byte 9 (line 2, column 8): got 'x', expected '1'-'9'" "$tmp/out" || fail "reject position: $(cat "$tmp/out")"
printf '{"n":4' >"$tmp/short.json"
rc=0; "$BIN" grammar --tokenizer "$TOK" --schema "$tmp/s.json" --check "$tmp/short.json" >"$tmp/out" || rc=$?
grep -q "ends too early, expected '.', '0'-'9', '}'" "$tmp/out" || fail "early end: $(cat "$tmp/out")"

rc=0; "$BIN" grammar --tokenizer "$TOK" --strict --schema "$tmp/unsupported.json" --check "$tmp/good.json" >"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" = 2 ] || fail "unsupported schema: exit $rc"
grep -q "'uniqueItems'" "$tmp/err" || fail "unsupported schema message: $(cat "$tmp/err")"

rc=0; "$BIN" grammar --tokenizer "$TOK" --regex '[0-9]+' --check "$tmp/good.json" >"$tmp/out" || rc=$?
[ "$rc" = 1 ] || fail "regex reject: exit $rc"

mkdir "$tmp/bench" && cp "$tmp/s.json" "$tmp/bench/a.json" && cp "$tmp/unsupported.json" "$tmp/bench/b.json"
"$BIN" grammar --tokenizer "$TOK" --bench "$tmp/bench" >"$tmp/out" || fail "bench: exit $?"
grep -q "^schemas 2, compiled 2 (100.0%) by default, 1 (50.0%) with --strict" "$tmp/out" || fail "bench coverage: $(cat "$tmp/out")"
echo ok
