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

# HF checkpoint folders (DeepSeek-V4 tiny goldens): shape and validation.
D=tests/data/golden/deepseek_v4
"$BIN" info $D/tiny_fp8 >"$tmp/out" 2>"$tmp/err" || fail "tiny_fp8 rejected: $(cat "$tmp/err")"
for want in "architecture: +deepseek_v4" "layers: +5" "hidden: +128" "compression: +csa 4, hca 32" \
            "quantization: +fp8 e4m3, 128x128" "f8_e4m3 " "validation: +ok" \
            "1  compressed_sparse_attention +hash_moe"; do
  grep -Eq "^ *$want" "$tmp/out" || fail "tiny_fp8 info lacks '$want'"
done
"$BIN" info $D/tiny_bf16 >"$tmp/out" 2>"$tmp/err" || fail "tiny_bf16 rejected: $(cat "$tmp/err")"
grep -Eq "rope theta: +main 10000, compressed 160000 \(yarn\)" "$tmp/out" || fail "tiny_bf16 rope"
# An empty directory: one line naming the missing config.json.
mkdir "$tmp/hf"
if "$BIN" info "$tmp/hf" >/dev/null 2>"$tmp/err"; then fail "directory: exit 0"; fi
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "directory: stderr is not one line"
grep -q "config.json" "$tmp/err" || fail "directory message: $(cat "$tmp/err")"
# A folder whose config disagrees with its tensors: validation fails, one line.
mkdir "$tmp/bad"
sed 's/"hidden_size": 128/"hidden_size": 96/' $D/tiny_fp8/config.json >"$tmp/bad/config.json"
ln -s "$PWD/$D/tiny_fp8/model.safetensors" "$tmp/bad/model.safetensors"
if "$BIN" info "$tmp/bad" >"$tmp/out" 2>"$tmp/err"; then fail "bad folder: exit 0"; fi
grep -q "validation: *FAILED" "$tmp/out" || fail "bad folder: no FAILED line"
grep -q "embed.weight" "$tmp/err" || fail "bad folder message: $(cat "$tmp/err")"

# Routed experts: the bytes a token reads count the expert stacks at top-k / n
# (tiny Qwen3-MoE: 8 experts, top 2), the decode bound of compare_llamacpp.py.
"$BIN" info tests/data/families/qwen3moe-q4_k_m.gguf >"$tmp/out" || fail "moe info: exit $?"
grep -q "active per token: .* counted at top 2 of 8" "$tmp/out" || fail "moe info: no active-bytes line"
"$BIN" info tests/data/families/qwen2-q4_k_m.gguf >"$tmp/out" || fail "dense info: exit $?"
if grep -q "active per token" "$tmp/out"; then fail "dense info: an active-bytes line"; fi

# Usage errors.
if "$BIN" info >/dev/null 2>&1; then fail "no argument: exit 0"; fi
if "$BIN" info /nonexistent/model.gguf >/dev/null 2>"$tmp/err"; then fail "missing file: exit 0"; fi
grep -q "model.gguf" "$tmp/err" || fail "missing file message"
echo "info.sh: ok"
