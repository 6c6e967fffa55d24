#!/usr/bin/env bash
# V4.1 folders in the released layout that DeepInfer 0.1.0's own loader
# accepts, and the one it refuses (issue 28, section 2):
#   - tiny_ne: `engram_layer_ids: []` (hf/config.py:_build_engram: no Engram)
#     runs, and `info` says no layer has Engram;
#   - tiny_b's weights with tiny's 512-token tokenizer.json (384 logits):
#     loads; --prompt-ids within the vocabulary run, a prompt id or a text
#     prompt past it is refused per request (DeepInfer's add_request drops
#     a prompt outside [0, vocab));
#   - a vision_config + image_token_id without vision.* / aligner.* tensors
#     (the tower stripped): refused at load with DeepInfer's reason (its
#     loader needs every tower parameter covered).
set -euo pipefail
BIN=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
G=tests/data/golden/deepseek_v41
T=$(mktemp -d /tmp/di_v41_folders_XXXXXX)
trap 'rm -rf "$T"' EXIT

# --- no Engram
grep -q '"engram_layer_ids": \[\]' "$G/tiny_ne/config.json" || fail "tiny_ne: engram_layer_ids is not []"
"$BIN" info "$G/tiny_ne" >"$T/info" 2>&1 || fail "tiny_ne: info exited $?: $(cat "$T/info")"
! grep -q Engram "$T/info" || fail "tiny_ne: info names an Engram layer"
got=$("$BIN" run -m "$G/tiny_ne" --prompt-ids "0 17 42 99" -n 6 --temp 0 --print-ids 2>"$T/err") \
  || fail "tiny_ne: run exited $?: $(cat "$T/err")"
[ "$(echo "$got" | wc -w)" -eq 6 ] || fail "tiny_ne: got '$got'"

# --- a tokenizer larger than the logits
B=$T/bigtok
mkdir "$B"
for f in "$G"/tiny_b/model*.safetensors* ; do ln -s "$(realpath "$f")" "$B/"; done
ln -s "$(realpath "$G/tiny/tokenizer.json")" "$B/tokenizer.json"
# Engram's compressed vocabulary is built from the tokenizer and checked
# against the config: without Engram the pairing is only about the vocab
python3 - "$G/tiny_b/config.json" "$B/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
t = c["text_config"]
for k in [k for k in t if k.startswith("engram_")]:
    del t[k]
t["engram_layer_ids"] = []
json.dump(c, open(sys.argv[2], "w"))
PY
got=$("$BIN" run -m "$B" --prompt-ids "0 17 42 383" -n 4 --temp 0 --print-ids 2>"$T/err") \
  || fail "bigtok: --prompt-ids within the vocab exited $?: $(cat "$T/err")"
for id in $got; do [ "$id" -lt 384 ] || fail "bigtok: sampled id $id past the 384 logits"; done
if "$BIN" run -m "$B" --prompt-ids "0 17 400" -n 2 --temp 0 >/dev/null 2>"$T/err"; then
  fail "bigtok: prompt id 400 of 384 logits accepted"
fi
grep -q "outside the model's vocabulary of 384" "$T/err" || fail "bigtok: unclear error: $(cat "$T/err")"
# " STRASSE" is one of the tokenizer's ids past 384
if "$BIN" run -m "$B" -p " STRASSE" --raw -n 2 --temp 0 >/dev/null 2>"$T/err"; then
  fail "bigtok: a text prompt past the logits accepted"
fi
grep -q "outside the model's vocabulary of 384" "$T/err" || fail "bigtok: unclear text error: $(cat "$T/err")"

# --- the vision tower stripped
S=$T/stripped
mkdir "$S"
for f in "$G"/tiny_b/model*.safetensors* "$G/tiny_b/tokenizer.json"; do ln -s "$(realpath "$f")" "$S/"; done
python3 - "$G/tiny_b/config.json" "$G/tiny_vl/config.json" "$S/config.json" <<'PY'
import json, sys
c, vl = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
c["vision_config"], c["image_token_id"] = vl["vision_config"], 4
json.dump(c, open(sys.argv[3], "w"))
PY
if "$BIN" run -m "$S" --prompt-ids "0 17" -n 2 >/dev/null 2>"$T/err"; then
  fail "stripped tower: loaded"
fi
grep -q "holds no vision tower" "$T/err" || fail "stripped tower: unclear error: $(cat "$T/err")"
echo "deepseek_v41_folders.sh: ok"
