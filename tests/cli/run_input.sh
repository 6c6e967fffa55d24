#!/usr/bin/env bash
# deepinfer run's comforts (issue 15): the prompt from a file (-f) or stdin
# (-p -), --help naming every default, and a random default seed that -v
# prints and --seed gives back.
set -euo pipefail
BIN=$1
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$MODEL" ] || { echo "run_input.sh: default model not fetched, skipping"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
greedy=(-m "$MODEL" -n 6 --temp 0 -t 2 --raw)

# -f FILE and -p - give what -p TEXT gives (a newline in the file included)
printf 'The capital of France is\nParis, and the capital of Spain is' >"$tmp/p.txt"
want=$("$BIN" run "${greedy[@]}" -p "$(cat "$tmp/p.txt")" 2>/dev/null)
got=$("$BIN" run "${greedy[@]}" -f "$tmp/p.txt" 2>/dev/null) || fail "-f: exit $?"
[ "$got" = "$want" ] || fail "-f: '$got' != '$want'"
got=$("$BIN" run "${greedy[@]}" -p - <"$tmp/p.txt" 2>/dev/null) || fail "-p -: exit $?"
[ "$got" = "$want" ] || fail "-p -: '$got' != '$want'"
# ...and their errors are plain
rc=0; "$BIN" run "${greedy[@]}" -f "$tmp/none.txt" 2>"$tmp/err" || rc=$?
[ "$rc" = 1 ] && grep -q "none.txt: cannot open" "$tmp/err" || fail "-f missing: rc $rc: $(cat "$tmp/err")"
printf 'a\0b' >"$tmp/nul.txt"
rc=0; "$BIN" run "${greedy[@]}" -f "$tmp/nul.txt" 2>"$tmp/err" || rc=$?
[ "$rc" = 1 ] && grep -q "NUL" "$tmp/err" || fail "-f with NUL: rc $rc: $(cat "$tmp/err")"
rc=0; "$BIN" run "${greedy[@]}" -f "$tmp/p.txt" -p x 2>"$tmp/err" || rc=$?
[ "$rc" = 2 ] || fail "-f and -p both accepted"

# --help: every option that takes a value shows its default (or says what 0 means)
"$BIN" run --help >"$tmp/help"
grep -q -- "-n, --max-tokens .*\[default: 256\]" "$tmp/help" || fail "--help: no -n default"
grep -q -- "--temp .*\[default: 0.2\]" "$tmp/help" || fail "--help: no --temp default"
grep -q -- "--seed .*random" "$tmp/help" || fail "--help: seed default not explained"
# (into a file: grep -q exiting at the first match would SIGPIPE the writer)
"$BIN" run -n 5 --temp 0.7 --help >"$tmp/help2"
grep -q -- "--temp .*\[default: 0.2\]" "$tmp/help2" || fail "--help shows set values, not defaults"

# the default seed is random and printed with -v; --seed repeats a run
sample=(-m "$MODEL" -n 12 --temp 1.5 --top-p 1 -t 2 -p "Tell me a story." -v)
"$BIN" run "${sample[@]}" >"$tmp/a" 2>"$tmp/ea"
"$BIN" run "${sample[@]}" >"$tmp/b" 2>"$tmp/eb"
sa=$(sed -n 's/.*seed \([0-9]*\) .*/\1/p' "$tmp/ea" | head -1)
sb=$(sed -n 's/.*seed \([0-9]*\) .*/\1/p' "$tmp/eb" | head -1)
[ -n "$sa" ] && [ -n "$sb" ] || fail "-v printed no seed: $(cat "$tmp/ea")"
[ "$sa" != "$sb" ] || fail "two runs drew the same seed $sa"
"$BIN" run "${sample[@]}" --seed "$sa" >"$tmp/c" 2>/dev/null
cmp -s "$tmp/a" "$tmp/c" || fail "--seed $sa did not repeat the run: '$(cat "$tmp/a")' vs '$(cat "$tmp/c")'"
echo ok
