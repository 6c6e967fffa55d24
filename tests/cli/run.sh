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

# unenforceable schema features: non-strict (the default, as OpenAI's)
# drops them with a warning; --strict refuses them, naming the feature
printf '{"type":"object","properties":{"ip":{"type":"string","format":"ipv6"},"tags":{"type":"array","items":{"type":"string"},"uniqueItems":true}},"required":["ip","tags"]}' >"$tmp/unenf.json"
"$BIN" run -m "$MODEL" -p "An address" -n 24 --temp 0 -t 2 --json-schema "$tmp/unenf.json" >"$tmp/out" 2>"$tmp/err" \
  || fail "non-strict schema: exit $?: $(cat "$tmp/err")"
grep -q "warning: not enforced.*'format' 'ipv6' at #/ip; 'uniqueItems' at #/tags" "$tmp/err" || fail "non-strict: $(cat "$tmp/err")"
rc=0; "$BIN" run -m "$MODEL" -p x -n 4 -t 2 --strict --json-schema "$tmp/unenf.json" >"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" = 1 ] && grep -q "'format' 'ipv6' is not enforced" "$tmp/err" || fail "--strict: exit $rc: $(cat "$tmp/err")"

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

# run --ctx 64: the default -n (256) is capped to what the context leaves
"$BIN" run -m "$MODEL" --ctx 64 -p hi -t 2 >"$tmp/out" 2>"$tmp/err" || fail "--ctx 64: exit $?: $(cat "$tmp/err")"
grep -q "^deepinfer run: -n 256 capped to 33: the context holds 64 tokens (prompt 31)" "$tmp/err" \
  || fail "--ctx 64: no cap note: $(cat "$tmp/err")"

# chat: a conversation that outgrows the context drops its oldest turns,
# keeps the system prompt, says so, and goes on
printf 'Tell me a long story about a dragon.\nAnd another one about a cat.\nA third story, about a dog?\n' |
  "$BIN" chat -m "$MODEL" --ctx 256 --system "You are helpful." -n 100 --temp 0 -t 2 >"$tmp/out" 2>"$tmp/err" \
  || fail "chat --ctx 256: exit $?: $(cat "$tmp/err")"
grep -q "context of 256 tokens full: dropped the oldest 1 turn; the system prompt stays" "$tmp/err" \
  || fail "chat --ctx 256: no note: $(cat "$tmp/err")"
[ "$(grep -c '\[prompt' "$tmp/err")" = 3 ] || fail "chat --ctx 256: not three replies: $(cat "$tmp/err")"

# chat: Ctrl-C stops the reply, the session goes on; Ctrl-C at the prompt quits
mkfifo "$tmp/in"
"$BIN" chat -m "$MODEL" -n 2000 --ctx 4096 -t 2 <"$tmp/in" >"$tmp/out" 2>"$tmp/err" &
pid=$!
exec 3>"$tmp/in"
echo "Write a very long essay about the history of bread." >&3
for _ in $(seq 200); do [ -s "$tmp/out" ] && break; sleep 0.1; done
[ -s "$tmp/out" ] || fail "chat: no reply streamed"
kill -INT $pid
for _ in $(seq 100); do grep -q '^\[stopped\]' "$tmp/err" && break; sleep 0.1; done
grep -q '^\[stopped\]' "$tmp/err" || fail "chat: Ctrl-C did not stop the reply: $(cat "$tmp/err")"
kill -0 $pid 2>/dev/null || fail "chat: Ctrl-C ended the session"
grep -q "finish cancel" "$tmp/err" || fail "chat: reply not cancelled: $(cat "$tmp/err")"
echo "Say hi." >&3
# the reply may run long (-n 2000): after 10 s stop it too, which also
# prints its stats line
for _ in $(seq 100); do [ "$(grep -c '\[prompt' "$tmp/err")" = 2 ] && break; sleep 0.1; done
[ "$(grep -c '\[prompt' "$tmp/err")" = 2 ] || kill -INT $pid 2>/dev/null || true
for _ in $(seq 300); do [ "$(grep -c '\[prompt' "$tmp/err")" = 2 ] && break; sleep 0.1; done
[ "$(grep -c '\[prompt' "$tmp/err")" = 2 ] || fail "chat: no second reply: $(cat "$tmp/err")"
# the second turn reused the first one's prompt from the cache: the history was kept
sed -n '/^\[stopped\]/,$p' "$tmp/err" | grep -Eq '\[prompt [0-9]+ tok \([1-9][0-9]* cached\)' \
  || fail "chat: history lost after Ctrl-C: $(cat "$tmp/err")"
sleep 0.5
kill -INT $pid 2>/dev/null || true
rc=0; wait $pid || rc=$?
exec 3>&-
[ "$rc" = 0 ] || fail "chat: Ctrl-C at the prompt: exit $rc"

echo ok
