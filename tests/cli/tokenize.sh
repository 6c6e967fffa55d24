#!/usr/bin/env bash
# deepinfer tokenize: ids on one line (fixture convention), --decode back,
# special-token parsing only on request, chat template rendering, errors.
set -euo pipefail
BIN=$1
DATA=testdata/tokenizer
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# first fixture line of two vocabularies
got=$("$BIN" tokenize -m "$DATA/ggml-vocab-gpt-2.gguf" "Hello world")
[ "$got" = "15496 995" ] || fail "gpt-2 'Hello world' -> '$got'"
got=$("$BIN" tokenize -m "$DATA/llama3" " Hello world")
[ "$got" = "22691 1917" ] || fail "llama3 ' Hello world' -> '$got'"
got=$("$BIN" tokenize -m "$DATA/ggml-vocab-llama-spm.gguf" --bos "Hello world")
[ "$got" = "1 15043 3186" ] || fail "llama-spm --bos -> '$got'"

# --file and --decode round trip, including newlines
printf 'line one\n\tline two 🦙\n' > "$tmp/in.txt"
"$BIN" tokenize -m "$DATA/deepseek-v3" --file "$tmp/in.txt" > "$tmp/ids"
"$BIN" tokenize -m "$DATA/deepseek-v3" --decode --file "$tmp/ids" > "$tmp/back"
printf 'line one\n\tline two 🦙\n\n' | cmp -s - "$tmp/back" || fail "decode(encode(file)) differs"

# special tokens: text by default, one id with --parse-special
got=$("$BIN" tokenize -m "$DATA/llama3" "<|eot_id|>")
[ "$got" != "128009" ] || fail "special token parsed without --parse-special"
got=$("$BIN" tokenize -m "$DATA/llama3" --parse-special "<|eot_id|>")
[ "$got" = "128009" ] || fail "--parse-special <|eot_id|> -> '$got'"
got=$("$BIN" tokenize -m "$DATA/llama3" --decode --render-special "128000 9906")
[ "$got" = "<|begin_of_text|>Hello" ] || fail "--render-special -> '$got'"

# chat: DeepSeek template from tokenizer_config.json
got=$("$BIN" tokenize -m "$DATA/deepseek-v3" --chat "hi")
[ "$got" = "0 128803 6366 128804" ] || fail "deepseek --chat -> '$got'"

# usage and load errors
set +e
"$BIN" tokenize >/dev/null 2>&1; [ $? -eq 2 ] || fail "no text should exit 2"
# no -m: the default model, found as run finds it (a missing $DEEPINFER_MODEL: exit 1, named)
HOME=$tmp DEEPINFER_MODEL=/nonexistent.gguf "$BIN" tokenize "x" >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && grep -q nonexistent.gguf "$tmp/err" || fail "tokenize without -m: $(cat "$tmp/err")"
"$BIN" tokenize -m /nonexistent.gguf "x" >/dev/null 2>"$tmp/err"; [ $? -eq 1 ] || fail "bad model should exit 1"
grep -q nonexistent "$tmp/err" || fail "error does not name the file"
"$BIN" tokenize -m "$DATA/ggml-vocab-gpt-2.gguf" --decode "1 99999999" >/dev/null 2>&1; [ $? -eq 1 ] || fail "bad id should exit 1"
set -e

if [ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
  got=$("$BIN" tokenize -m models/SmolLM2-135M-Instruct.Q4_1.gguf --chat "Hi")
  first=$(echo "$got" | cut -d' ' -f1)
  [ "$first" = "1" ] || fail "smollm2 chat should start with <|im_start|> (1): '$got'"
fi
echo ok
