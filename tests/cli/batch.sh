#!/usr/bin/env bash
# deepinfer batch: results come back in input order with the documented
# fields; bad lines become error records and the rest still runs; greedy
# output is the same as `deepinfer run --raw` for the same prompt.
set -euo pipefail
BIN=$1
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$MODEL" ] || { echo "batch.sh: default model not fetched, skipping"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# a directory is not an input file: an error, not "0 requests" and exit 0
rc=0; "$BIN" batch -m "$MODEL" --in "$tmp" --out "$tmp/dir.jsonl" 2>"$tmp/err" || rc=$?
[ "$rc" = 1 ] || fail "batch --in DIR: exit $rc"
grep -q "is a directory" "$tmp/err" || fail "batch --in DIR: $(cat "$tmp/err")"
[ ! -e "$tmp/dir.jsonl" ] || fail "batch --in DIR wrote an output file"

cat >"$tmp/in.jsonl" <<'JSONL'
{"id":"a","prompt":"The quick brown fox","max_tokens":8,"temperature":0}
{"id":"b","messages":[{"role":"user","content":"Name a color."}],"max_tokens":8,"seed":3}
not json at all
{"id":"c","prompt":5}
{"id":"d","prompt":"x","temperature":-1}
{"id":"e","prompt":"Count: one, two,","max_tokens":12,"temperature":0,"stop":[" four"]}
JSONL
"$BIN" batch -m "$MODEL" --in "$tmp/in.jsonl" --out "$tmp/out.jsonl" -t 2 2>"$tmp/err" \
  || fail "batch exited $?: $(cat "$tmp/err")"
python3 - "$tmp/out.jsonl" <<'PY' || fail "output records"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert [r["id"] for r in recs] == ["a", "b", 2, "c", "d", "e"], [r["id"] for r in recs]
for r in recs:
    if r["id"] in ("a", "b", "e"):
        for k in ("text", "token_ids", "finish_reason", "prompt_tokens", "completion_tokens"):
            assert k in r, (r, k)
        assert r["completion_tokens"] == len(r["token_ids"]) > 0
    else:
        assert r["finish_reason"] == "error" and r["error"], r
assert recs[0]["finish_reason"] == "length" and recs[0]["completion_tokens"] == 8
assert " four" not in recs[5]["text"], recs[5]
PY
grep -q "batch: 6 requests" "$tmp/err" || fail "no summary line"

# Same greedy completion through `run --raw`.
want=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["text"], end="")' "$tmp/out.jsonl")
got=$("$BIN" run -m "$MODEL" --raw -p "The quick brown fox" -n 8 --temp 0 -t 2 2>/dev/null)
[ "$got" = "$want" ] || fail "run --raw gave '$got', batch gave '$want'"

# Prompt as ids, output as ids: the same greedy tokens as the text path.
ids=$("$BIN" run -m "$MODEL" --prompt-ids "504 2365 6354 16438" -n 8 --temp 0 -t 2 --print-ids 2>/dev/null)
want_ids=$(python3 -c 'import json,sys; print(" ".join(map(str, json.loads(open(sys.argv[1]).readline())["token_ids"])))' "$tmp/out.jsonl")
[ "$ids" = "$want_ids" ] || fail "--print-ids gave '$ids', batch gave '$want_ids'"
if "$BIN" run -m "$MODEL" --prompt-ids "1 x" 2>/dev/null; then fail "bad --prompt-ids accepted"; fi

# Bad flags are usage errors.
if "$BIN" batch -m "$MODEL" --in "$tmp/in.jsonl" 2>/dev/null; then fail "missing --out accepted"; fi
if "$BIN" run -m "$MODEL" -p x -n abc 2>/dev/null; then fail "bad -n accepted"; fi
if "$BIN" run -m /nonexistent.gguf -p x 2>"$tmp/err"; then fail "missing model accepted"; fi
grep -q "nonexistent" "$tmp/err" || fail "missing-model message does not name the file"
echo "batch.sh: ok"
