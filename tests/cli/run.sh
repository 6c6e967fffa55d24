#!/usr/bin/env bash
# deepinfer run / chat from the command line: the messages a user sees when
# a request fails, the caps that keep small contexts usable, and the chat
# loop's handling of Ctrl-C, Ctrl-D and a full context. Each block is a
# regression test for one defect of issue 15.
set -euo pipefail
BIN=$1
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$MODEL" ] || { echo "run.sh: default model not fetched, skipping"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# An unsatisfiable schema: the user sees a readable reason, never an empty
# or dangling "error: " line (the event's error text was kept past its
# callback), and the command fails.
printf '{"type":"integer","minimum":10,"maximum":5}' >"$tmp/unsat.json"
rc=0; "$BIN" run -m "$MODEL" -p x -n 8 --json-schema "$tmp/unsat.json" >"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" != 0 ] || fail "unsatisfiable schema: exit 0"
grep -Eq '^(error|deepinfer run): .*[a-z]' "$tmp/err" || fail "unsatisfiable schema: no reason: $(cat -v "$tmp/err")"
! grep -Eq '^error: *$' "$tmp/err" || fail "unsatisfiable schema: empty error line"
# ... and the empty language is found when compiling, naming the keyword
grep -q "matches nothing: no integer satisfies 'minimum' 10, 'maximum' 5" "$tmp/err" \
  || fail "unsatisfiable schema: reason does not name the keywords: $(cat -v "$tmp/err")"
printf '{"$ref":"#"}' >"$tmp/self.json"
rc=0; "$BIN" run -m "$MODEL" -p x -n 8 --json-schema "$tmp/self.json" >"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" != 0 ] && grep -q "'\$ref'" "$tmp/err" || fail "self-referring schema: exit $rc: $(cat -v "$tmp/err")"

# -t beyond the CPUs is capped, with a warning, and the run still works
n_cpu=$(nproc)
"$BIN" run -m "$MODEL" -p hi -n 2 --temp 0 -t 1000 >"$tmp/out" 2>"$tmp/err" || fail "-t 1000: exit $?: $(cat "$tmp/err")"
grep -q "warning: -t 1000 is more than the $n_cpu CPUs available; using $n_cpu" "$tmp/err" \
  || fail "-t 1000: no warning: $(cat "$tmp/err")"

# messages name what the user gave, never an internal function
rc=0; "$BIN" tokenize -m "$MODEL" $'a\xffb' >"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" = 1 ] && grep -q "not valid UTF-8" "$tmp/err" || fail "invalid UTF-8: exit $rc: $(cat -v "$tmp/err")"
rc=0; "$BIN" tokenize -m "$MODEL" --decode 99999999 >"$tmp/out" 2>>"$tmp/err" || rc=$?
[ "$rc" = 1 ] || fail "bad id: exit $rc"
! grep -Eq '(tok|detok|chat)_[a-z_]+:|di_[a-z_]+' "$tmp/err" || fail "internal names in messages: $(cat -v "$tmp/err")"

echo ok
