#!/usr/bin/env bash
# deepinfer info: the default model reports its shape and exits 0; a
# malformed file and a directory exit non-zero with a one-line reason.
set -euo pipefail
BIN=$1
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

if [ -f "$MODEL" ]; then
  "$BIN" info "$MODEL" >"$tmp/out" 2>"$tmp/err" || fail "info on the default model exited $?: $(cat "$tmp/err")"
  for want in "layers: +30" "hidden: +576" "heads: +9" "kv heads: +3" "vocab: +49152" \
              "architecture: +llama" "validation: +ok" "q4_1 +210 tensors"; do
    grep -Eq "^ *$want" "$tmp/out" || fail "info output lacks '$want'"
  done
  [ ! -s "$tmp/err" ] || fail "stderr not empty on success: $(cat "$tmp/err")"
else
  echo "info.sh: default model not fetched, skipping its checks"
fi

# Tiny valid llama from the committed corpus.
"$BIN" info tests/data/seeds/gguf/tiny_llama.gguf >"$tmp/out" 2>"$tmp/err" || fail "tiny llama rejected"
grep -Eq "layers: +2$" "$tmp/out" || fail "tiny llama layers"

# Malformed files: non-zero exit, exactly one line on stderr naming the file.
for f in tests/data/malformed/gguf/tensor_offset_past_end.gguf \
         tests/data/malformed/gguf/llama_missing_ffn_down.gguf \
         tests/data/malformed/gguf/bad_magic.gguf; do
  if "$BIN" info "$f" >"$tmp/out" 2>"$tmp/err"; then fail "$f: exit 0"; fi
  [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "$f: stderr is not one line: $(cat "$tmp/err")"
  grep -q "$(basename "$f")" "$tmp/err" || fail "$f: message does not name the file"
done
grep -q "blk.1.ffn_down.weight" <("$BIN" info tests/data/malformed/gguf/llama_missing_ffn_down.gguf 2>&1 || true) \
  || fail "missing tensor not named"

# A directory (HF checkpoint): not supported yet, one line.
mkdir "$tmp/hf"
if "$BIN" info "$tmp/hf" >/dev/null 2>"$tmp/err"; then fail "directory: exit 0"; fi
grep -q "not supported yet" "$tmp/err" || fail "directory message: $(cat "$tmp/err")"

# Usage errors.
if "$BIN" info >/dev/null 2>&1; then fail "no argument: exit 0"; fi
if "$BIN" info /nonexistent/model.gguf >/dev/null 2>"$tmp/err"; then fail "missing file: exit 0"; fi
grep -q "model.gguf" "$tmp/err" || fail "missing file message"
echo "info.sh: ok"
