#!/usr/bin/env bash
# Progress of long work (issue 15): plain lines when stderr is a file (no
# carriage returns: logs stay readable), a bar rewritten in place on a
# terminal (a pty), for quantize, batch and bench; the model-load bar
# (weights pre-touched) on a terminal only, never in a log.
set -euo pipefail
BIN=$1
SEED=tests/data/seeds/gguf/tiny_llama.gguf
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$BIN" quantize "$SEED" "$tmp/q.gguf" q8_0 2>"$tmp/err" || fail "quantize: $(cat "$tmp/err")"
grep -q "^quantize: 0/[0-9]*, " "$tmp/err" || fail "quantize: no start line: $(cat -v "$tmp/err")"
n=$(sed -n 's/^quantize: 0\/\([0-9]*\),.*/\1/p' "$tmp/err")
grep -q "^quantize: $n/$n, " "$tmp/err" || fail "quantize: no end line: $(cat -v "$tmp/err")"
! grep -q $'\r' "$tmp/err" || fail "quantize: carriage returns in a log"

if [ -f "$MODEL" ]; then
  printf '%s\n' '{"prompt":"Hi","max_tokens":2}' '{"prompt":"Yo","max_tokens":2}' >"$tmp/in.jsonl"
  "$BIN" batch -m "$MODEL" --in "$tmp/in.jsonl" --out "$tmp/out.jsonl" -t 2 --temp 0 2>"$tmp/err" \
    || fail "batch: $(cat "$tmp/err")"
  grep -q "^batch: 0/2, " "$tmp/err" && grep -q "^batch: 2/2, .*ETA" "$tmp/err" \
    || fail "batch: no progress lines: $(cat -v "$tmp/err")"
  ! grep -q $'\r' "$tmp/err" || fail "batch: carriage returns in a log"
  ! grep -q "load" "$tmp/err" || fail "batch: a load line in a log: $(cat -v "$tmp/err")"
fi

# bench: which test, runs done of warm-up + reps (plain lines in a log)
"$BIN" bench -m "$SEED" -p 8 -n 4 -b '' -r 2 -t 1 2>"$tmp/err" >/dev/null || fail "bench: $(cat "$tmp/err")"
grep -q "^bench pp8: 0/3, " "$tmp/err" && grep -q "^bench pp8: 3/3, " "$tmp/err" && grep -q "^bench tg4: 3/3, " "$tmp/err" \
  || fail "bench: no progress lines: $(cat -v "$tmp/err")"
grep -q "^bench: tg4 rep 2/2: " "$tmp/err" || fail "bench: no per-rep line: $(cat -v "$tmp/err")"
! grep -q $'\r' "$tmp/err" || fail "bench: carriage returns in a log"

command -v python3 >/dev/null || { echo "progress.sh: no python3 for the pty, skipping the terminal check"; exit 0; }
# on_tty WHAT NEEDLE... -- ARGV...: runs ARGV on a pty; it must exit 0 and
# print every NEEDLE (a bar redrawn with \r); a NEEDLE written !TEXT means
# TEXT must not appear
on_tty() {
  local what=$1; shift
  python3 - "$@" <<'PY' || fail "terminal progress ($what)"
import os, pty, sys
sep = sys.argv.index("--")
needles, argv = [n.encode() for n in sys.argv[1:sep]], sys.argv[sep + 1:]
pid, fd = pty.fork()
if pid == 0:
    os.execv(argv[0], argv)
out = b""
while True:
    try:
        d = os.read(fd, 4096)
    except OSError:
        break
    if not d:
        break
    out += d
_, st = os.waitpid(pid, 0)
assert os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0, out
for n in needles:
    if n.startswith(b"!"):
        assert n[1:] not in out, (n, out)
    else:
        assert n in out, (n, out)
PY
}
on_tty quantize $'\rquantize [' ETA -- "$BIN" quantize "$SEED" "$tmp/t.gguf" q8_0
on_tty bench $'\rbench pp8 [' 3/3 -- "$BIN" bench -m "$SEED" -p 8 -n 4 -b "" -r 2 -t 1
# a 3.5 KB model loads without a bar (below the bar's 32 MiB)
on_tty "load, tiny" "!load [" -- "$BIN" bench -m "$SEED" -p 8 -n 4 -b "" -r 2 -t 1
if [ -f "$MODEL" ]; then
  # the load bar on a terminal: start, end (MB of the weights) and the newline
  on_tty load $'\rload [' $'\rload [########################] ' -- \
    "$BIN" run -m "$MODEL" --raw -p "Hi" -n 1 -t 1 --temp 0
  "$BIN" run -m "$MODEL" --raw -p "Hi" -n 1 -t 1 --temp 0 2>"$tmp/err" >/dev/null || fail "run: $(cat "$tmp/err")"
  ! grep -q "load" "$tmp/err" || fail "run: a load line in a log: $(cat -v "$tmp/err")"
fi
echo ok
