#!/usr/bin/env bash
# The second model family through the command (issue 15): Gemma 3 270M
# (scripts/fetch-gemma.sh). info names the architecture and its local /
# global layers; run --raw greedy gives llama.cpp's greedy continuation
# (tests/data/golden/gemma: " 6, 7, 8, 9," for this prompt, every step's
# top-1 / top-2 gap at least 2.8, far above the numerics' noise); the chat template renders Gemma turns
# and tokenizes them to the turn tokens. Skipped when the file is absent.
set -euo pipefail
BIN=$1
MODEL=models/gemma-3-270m-q4_k_m.gguf
[ -f "$MODEL" ] || { echo "gemma.sh: $MODEL absent (make model), skipping"; exit 0; }
fail() { echo "FAIL: $*" >&2; exit 1; }

info=$("$BIN" info "$MODEL")
grep -q "^architecture: *gemma3" <<<"$info" || fail "info: no gemma3 architecture: $info"
grep -q "sliding window: *512 keys on local layers, every 6th layer global (5 11 17)" <<<"$info" \
  || fail "info: no sliding-window line: $info"
grep -q "^validation: *ok" <<<"$info" || fail "info: validation: $info"

out=$("$BIN" run -m "$MODEL" --raw -p "1, 2, 3, 4, 5," -n 12 --temp 0 -t 2 2>/dev/null)
[ "$out" = " 6, 7, 8, 9," ] || fail "run --raw greedy: '$out'"

ids=$("$BIN" tokenize -m "$MODEL" --chat --parse-special "Hi")
[ "$ids" = "2 105 2364 107 10979 106 107 105 4368 107" ] || fail "chat template ids: $ids"
echo ok
