#!/usr/bin/env bash
# deepinfer grammar follows the policy of run and serve for what a grammar
# cannot enforce (issue 28): by default an unknown `format` (or keyword) is
# dropped, named on stderr, and the schema compiles; --strict refuses it
# (exit 2, naming it); a schema that matches nothing is refused either way;
# --bench counts both policies in one run. The tokenizer is the default
# model's (a GGUF holds its vocabulary).
set -euo pipefail
BIN=$1
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$MODEL" ] || { echo "grammar_policy.sh: default model not fetched, skipping"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

printf '{"type":"object","properties":{"id":{"type":"string","format":"x-made-up"}},"required":["id"],"additionalProperties":false}' >"$tmp/fmt.json"
printf '{"id":"anything at all"}' >"$tmp/inst.json"

# default: compiles, the instance is accepted, the dropped format is named once on stderr
"$BIN" grammar --tokenizer "$MODEL" --schema "$tmp/fmt.json" --check "$tmp/inst.json" >"$tmp/out" 2>"$tmp/err" ||
  fail "default: exit $?: $(cat "$tmp/out" "$tmp/err")"
head -1 "$tmp/out" | grep -qx accept || fail "default: $(cat "$tmp/out")"
grep -qx "deepinfer grammar: warning: not enforced (dropped; --strict refuses them): 'format' 'x-made-up' at #/id" "$tmp/err" ||
  fail "default: warning: $(cat "$tmp/err")"
[ "$(wc -l <"$tmp/err")" = 1 ] || fail "default: stderr: $(cat "$tmp/err")"
# --lenient names the default: the same
"$BIN" grammar --tokenizer "$MODEL" --lenient --schema "$tmp/fmt.json" --check "$tmp/inst.json" >"$tmp/out" 2>"$tmp/err2" ||
  fail "--lenient: exit $?"
cmp -s "$tmp/err" "$tmp/err2" || fail "--lenient: $(cat "$tmp/err2")"

# --strict: refused, naming the format
rc=0; "$BIN" grammar --tokenizer "$MODEL" --strict --schema "$tmp/fmt.json" --check "$tmp/inst.json" >"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" = 2 ] || fail "--strict: exit $rc"
grep -q "cannot compile: .*'format' 'x-made-up' is not enforced" "$tmp/err" || fail "--strict: message: $(cat "$tmp/err")"

# a known format is enforced: no warning, and a wrong value is rejected
printf '{"type":"string","format":"date"}' >"$tmp/date.json"
printf '"2024-02-30x"' >"$tmp/baddate.json"
rc=0; "$BIN" grammar --tokenizer "$MODEL" --schema "$tmp/date.json" --check "$tmp/baddate.json" >"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" = 1 ] || fail "known format: exit $rc: $(cat "$tmp/out")"
[ ! -s "$tmp/err" ] || fail "known format: stderr: $(cat "$tmp/err")"

# unsatisfiable: refused in both policies
printf '{"type":"string","format":"x-made-up","minLength":5,"maxLength":2}' >"$tmp/unsat.json"
for mode in "" --strict; do
  rc=0; "$BIN" grammar --tokenizer "$MODEL" $mode --schema "$tmp/unsat.json" --check "$tmp/inst.json" >"$tmp/out" 2>"$tmp/err" || rc=$?
  [ "$rc" = 2 ] || fail "unsatisfiable ($mode): exit $rc"
  [ -n "$mode" ] || grep -q "cannot compile: .*'minLength' 5 is above 'maxLength' 2" "$tmp/err" || fail "unsatisfiable: message: $(cat "$tmp/err")"
done

# --sample compiles the same way (and warns the same way)
"$BIN" grammar --tokenizer "$MODEL" --schema "$tmp/fmt.json" --sample 1 --tokens 64 >"$tmp/out" 2>"$tmp/err" || fail "sample: exit $?"
grep -q "'format' 'x-made-up' at #/id" "$tmp/err" || fail "sample: warning: $(cat "$tmp/err")"

# --bench: both coverage figures in one run, whichever policy the walks use
mkdir "$tmp/bench"
cp "$tmp/fmt.json" "$tmp/bench/a.json"
cp "$tmp/date.json" "$tmp/bench/b.json"
cp "$tmp/unsat.json" "$tmp/bench/c.json"
for mode in "" --strict; do
  "$BIN" grammar --tokenizer "$MODEL" $mode --bench "$tmp/bench" --tokens 8 >"$tmp/out" || fail "bench ($mode): exit $?"
  grep -qx "schemas 3, compiled 2 (66.7%) by default, 1 (33.3%) with --strict" "$tmp/out" || fail "bench ($mode): $(cat "$tmp/out")"
done
grep -qx "walks and times: the --strict grammars" "$tmp/out" || fail "bench --strict: $(cat "$tmp/out")"
"$BIN" grammar --tokenizer "$MODEL" --bench "$tmp/bench" --tokens 0 --json >"$tmp/out" || fail "bench --json: exit $?"
grep -q '"schemas": 3, "compiled": 2, "compiled_default": 2, "compiled_strict": 1,' "$tmp/out" || fail "bench --json: $(cat "$tmp/out")"
echo ok
