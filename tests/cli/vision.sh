#!/usr/bin/env bash
# Image input through the command on the tiny DeepSeek-V4.1 vision checkpoint:
# `run --raw --image` greedy ids equal the V4.1 oracle's with DeepInfer's
# tower (tests/data/golden/vision/tower/forward.json, the cli_text case);
# batch lines with "images"; bad images and text-only models refused.
set -euo pipefail
BIN=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
VL=tests/data/golden/deepseek_v41/tiny_vl
IMG=tests/data/golden/vision/images
want=$(python3 -c '
import json
c = [c for c in json.load(open("tests/data/golden/vision/tower/forward.json"))["cases"] if c.get("cli_text")][0]
print(c["cli_text"] + "|" + c["images"][0] + "|" + " ".join(map(str, c["greedy"])))')
text=${want%%|*}; rest=${want#*|}; img=${rest%%|*}; ids=${rest#*|}
got=$("$BIN" run -m "$VL" --raw --image "$IMG/$img" -p "$text" -n 8 --temp 0 --print-ids --numerics ideal --kv-f32 \
      2>/dev/null) || fail "run --image exited $?"
[ "$got" = "$ids" ] || fail "run --image: got '$got' want '$ids' (oracle)"
# two images, chat template, default numerics: runs and is deterministic
a=$("$BIN" run -m "$VL" --image "$IMG/rgb_17x91.png" --image "$IMG/jpeg_80x60_q90.jpg" -p "Compare them" -n 6 \
    --temp 0 --print-ids 2>/dev/null) || fail "two images"
b=$("$BIN" run -m "$VL" --image "$IMG/rgb_17x91.png" --image "$IMG/jpeg_80x60_q90.jpg" -p "Compare them" -n 6 \
    --temp 0 --print-ids 2>/dev/null) || fail "two images, again"
[ "$a" = "$b" ] || fail "two images: not deterministic ('$a' vs '$b')"
# batch: the same request as a line with "images" gives the run's ids
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '{"id": "a", "prompt": "%s", "images": ["%s"], "max_tokens": 8, "temperature": 0}\n{"id": "b", "prompt": "x", "images": ["%s"]}\n{"id": "c", "prompt": "x", "images": "no"}\n' \
  "$text" "$IMG/$img" "tests/data/malformed/image/png_truncated_data.png" >"$tmp/in.jsonl"
"$BIN" batch -m "$VL" --in "$tmp/in.jsonl" --out "$tmp/out.jsonl" --numerics ideal --kv-f32 2>/dev/null \
  || fail "batch exited $?"
python3 - "$tmp/out.jsonl" "$ids" <<'PY' || fail "batch records"
import json, sys
rec = {r["id"]: r for r in map(json.loads, open(sys.argv[1]))}
assert " ".join(map(str, rec["a"]["token_ids"])) == sys.argv[2], rec["a"]
assert rec["b"]["finish_reason"] == "error" and "image" in rec["b"]["error"], rec["b"]
assert rec["c"]["finish_reason"] == "error", rec["c"]
PY
# refusals: a corrupt image, a text-only model, a missing file
for bad in png_truncated_data.png jpeg_cmyk.jpg png_bomb.png wrong_magic.bin; do
  if "$BIN" run -m "$VL" --image "tests/data/malformed/image/$bad" -p x -n 2 >/dev/null 2>"$tmp/err"; then
    fail "$bad accepted"
  fi
  grep -q "image" "$tmp/err" || fail "$bad: no message"
done
if "$BIN" run -m tests/data/golden/deepseek_v41/tiny --image "$IMG/$img" -p x -n 2 >/dev/null 2>"$tmp/err"; then
  fail "text-only model took an image"
fi
grep -q "no images" "$tmp/err" || fail "text-only model: no message"
if "$BIN" run -m "$VL" --image /nonexistent.png -p x -n 2 >/dev/null 2>&1; then fail "missing file accepted"; fi
# chat: /image FILE attaches an image to the next message (kept in the
# history, resent each turn); a missing, corrupt or absent file is refused
# with a reason and the session goes on; a text-only model says so
printf '/image %s\nDescribe it.\n/image /nonexistent.png\n/image tests/data/malformed/image/png_truncated_data.png\n/image\nAnd now?\n' \
  "$IMG/rgb_17x91.png" | "$BIN" chat -m "$VL" -n 4 --temp 0 -t 2 >"$tmp/out" 2>"$tmp/err" || fail "chat /image: exit $?: $(cat "$tmp/err")"
grep -q "\[image $IMG/rgb_17x91.png (png, 17x91) attached to your next message\]" "$tmp/err" || fail "chat /image: $(cat "$tmp/err")"
grep -q "/image /nonexistent.png: cannot open: No such file or directory" "$tmp/err" || fail "chat /image missing: $(cat "$tmp/err")"
grep -q "png_truncated_data.png: png: truncated" "$tmp/err" || fail "chat /image corrupt: $(cat "$tmp/err")"
grep -q "usage: /image FILE" "$tmp/err" || fail "chat /image no file: $(cat "$tmp/err")"
[ "$(grep -c '\[prompt' "$tmp/err")" = 2 ] || fail "chat /image: not two replies: $(cat "$tmp/err")"
grep -Eq '\[prompt [0-9]+ tok \([1-9][0-9]* cached\)' "$tmp/err" || fail "chat /image: second turn not cached: $(cat "$tmp/err")"
# a chat with images that outgrows the context drops old turns, counting
# each image as the positions it expands to (47 for rgb_300x200)
printf '/image %s\nDescribe it.\n/image %s\nAnd this?\n/image %s\nAnd this one?\n' "$IMG/rgb_300x200.png" \
  "$IMG/rgb_300x200.png" "$IMG/rgb_300x200.png" | "$BIN" chat -m "$VL" -n 4 --temp 0 -t 2 --ctx 128 >"$tmp/out" \
  2>"$tmp/err" || fail "chat images --ctx 128: exit $?: $(cat "$tmp/err")"
[ "$(grep -c '\[prompt' "$tmp/err")" = 3 ] || fail "chat images --ctx 128: not three replies: $(cat "$tmp/err")"
grep -q "dropped the oldest 1 turn" "$tmp/err" || fail "chat images --ctx 128: no turn dropped: $(cat "$tmp/err")"
printf '/image %s\n' "$IMG/rgb_17x91.png" | "$BIN" chat -m tests/data/golden/deepseek_v41/tiny -n 2 -t 2 >"$tmp/out" 2>"$tmp/err" \
  || fail "chat /image text-only: exit $?"
grep -q "this model takes no images" "$tmp/err" || fail "chat /image text-only: $(cat "$tmp/err")"
echo "vision cli: ok"
