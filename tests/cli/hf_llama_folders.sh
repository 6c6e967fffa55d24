#!/usr/bin/env bash
# HF folders of the llama family through the command (model/llama_hf.h):
# `info` validates each tiny folder of tests/data/hf; `run` greedy from the
# golden's prompt ids gives transformers' greedy tokens
# (tests/data/golden/hf/<family>.json, scripts/gen_goldens_hf_llama.py) up to
# the first step whose top-1/top-2 margin is under 0.01 or an end token (the engine's
# kernels and cache order differ from torch's by float rounding); `batch`
# runs chat requests on a folder; an unknown architecture exits 1 naming
# itself and the supported ones.
set -euo pipefail
BIN=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
T=$(mktemp -d /tmp/di_hf_llama_XXXXXX)
trap 'rm -rf "$T"' EXIT
for f in llama qwen2 qwen3 qwen3moe mistral mixtral phi3 gemma3; do
  D=tests/data/hf/$f
  G=tests/data/golden/hf/$f.json
  "$BIN" info "$D" >"$T/info" 2>&1 || fail "$f: info exited $?: $(cat "$T/info")"
  grep -q "validation:      ok" "$T/info" || fail "$f: info: $(cat "$T/info")"
  read -r prompt want n <<<"$(python3 - "$G" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
n = 0
while n < len(g["greedy"]) and g["greedy_margin"][n] >= 0.01:
    n += 1
print(",".join(map(str, g["prompt"])), ",".join(map(str, g["greedy"][:n])) or "-", n)
PY
)"
  got=$("$BIN" run -m "$D" --prompt-ids "${prompt//,/ }" -n 6 --temp 0 --kv-f32 -t 2 --print-ids 2>"$T/err") \
    || fail "$f: run exited $?: $(cat "$T/err")"
  got=$(echo $got | tr ' ' ',')
  # the shorter is a prefix of the other: generation stops early at an end
  # token (phi3's </s>), which transformers' greedy does not
  [ "$n" = 0 ] || [ "${got:0:${#want}}" = "$want" ] || [ "${want:0:${#got}}" = "$got" ] \
    || fail "$f: greedy $got, transformers $want"
  echo "$f: greedy $got (transformers $want)"
done

cat >"$T/in.jsonl" <<'JSONL'
{"id":"a","messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"temperature":0}
{"id":"b","prompt":"the cat","max_tokens":4,"temperature":0}
JSONL
for f in qwen3 mistral; do
  "$BIN" batch -m tests/data/hf/$f --in "$T/in.jsonl" --out "$T/out.jsonl" -t 2 2>"$T/err" \
    || fail "$f: batch exited $?: $(cat "$T/err")"
  [ "$(grep -c '"id"' "$T/out.jsonl")" = 2 ] || fail "$f: batch output: $(cat "$T/out.jsonl")"
  ! grep -q '"error"' "$T/out.jsonl" || fail "$f: batch error: $(cat "$T/out.jsonl")"
done

# the template in chat_template.jinja (newer transformers) instead of
# tokenizer_config.json: the same prompt
J=$T/jinja
mkdir "$J"
cp tests/data/hf/mistral/* "$J/"
python3 - "$J" <<'PY'
import json, sys
d = sys.argv[1]
c = json.load(open(d + "/tokenizer_config.json"))
open(d + "/chat_template.jinja", "w").write(c.pop("chat_template"))
json.dump(c, open(d + "/tokenizer_config.json", "w"))
PY
a=$("$BIN" run -m tests/data/hf/mistral -p "Hello there" -n 1 --temp 0 2>&1 | grep -o 'prompt [0-9]* tok')
b=$("$BIN" run -m "$J" -p "Hello there" -n 1 --temp 0 2>&1 | grep -o 'prompt [0-9]* tok')
[ -n "$a" ] && [ "$a" = "$b" ] || fail "chat_template.jinja: '$b', with tokenizer_config.json '$a'"

rc=0; "$BIN" run -m tests/data/malformed/hf_llama/unknown_architecture -p hi -n 1 >/dev/null 2>"$T/err" || rc=$?
[ "$rc" = 1 ] || fail "unknown architecture: exit $rc"
grep -q "FalconForCausalLM.*not supported.*Qwen2ForCausalLM" "$T/err" || fail "unknown architecture: $(cat "$T/err")"
echo "hf_llama_folders: ok"
