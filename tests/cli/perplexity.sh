#!/usr/bin/env bash
# deepinfer perplexity against llama.cpp (issue 4): same GGUF, same quant,
# same text, same windows. The golden comes from scripts/gen_goldens_llamacpp.py
# (llama-cpp-python 0.3.36, default CPU build, no flash attention, f16 KV
# cache, plain CPU buffers); this test needs no venv. Both kernel modes run:
#   - "ggml" (--kernels ggml: llama.cpp's CPU numerics, ggml_compat.h):
#     top-1 agreement >= 99% over ALL predictions (issue 4's bar). Measured:
#     2044/2044 = 100% on the first 4 windows, 5110/5110 on all 10, 511/511
#     on window 1 alone (the sanitizer run); log-probs equal to the golden's
#     6 decimals, i.e. the forward reproduces llama.cpp's bits.
#   - the default exact kernels (f32 activations, 7e-5 from transformers):
#     >= 99% where llama.cpp's own argmax is decisive (top-1 minus top-2
#     logit >= 0.5) and >= 93% over all predictions. Their rounding differs
#     from llama.cpp's int8/f16 rounding by ~0.06 nat per log-prob, which
#     flips near-ties on this 135M model: measured 95.89% on 4 windows,
#     94.52% on window 1, 96.83% on all 10; every disagreement sits at a
#     llama.cpp margin below 0.4 nat. The 93% floor guards against
#     regressions with slack for kernels that flip a few more near-ties.
# For both: our tokenization of the text equals llama.cpp's, id for id;
# |PPL_ours / PPL_llama.cpp - 1| <= 1% for --score-all and for the
# llama-perplexity scheme (second half of each window); the PPL the command
# prints is the one its --top1-out file implies.
# Under the sanitizer build (DI_SANITIZE=ON, ~15x slower) only the first
# window is scored, with the same thresholds (ggml 99% overall, default 93%).
# Gemma 3 270M Q4_K_M (when fetched; golden from the same script, first 2
# windows): its Q5_0 / Q4_K / Q6_K matmuls have no ggml-numerics twin here
# (ggml_compat.h covers Q4_0/Q4_1/Q8_0), so even --kernels ggml does not
# reproduce llama.cpp's activation rounding (Q8_0 / Q8_K blocks) on most
# weights, and both modes are held to the looser bars: top-1 >= 99% where
# llama.cpp is decisive, >= 93% overall, PPL within 3%. Measured (2
# windows, this Xeon, after the Q5_0 int8 tables and the sigmoid GELU):
# ggml 95.89% overall, 768/768 decisive, PPL -0.74% (all) / -1.51%
# (half); default 95.21%, 765/768, -0.38% / -0.88% (not run under the
# sanitizers: see below). Ours is the lower
# PPL: transformers agrees with our exact forward to 1e-4
# (tests/model/test_gemma.c), so the gap is llama.cpp's int8 rounding.
set -euo pipefail
BIN=$1
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
GOLD=tests/data/golden/llamacpp/smollm2_q4_1_jsts_readme.json
GEMMA=models/gemma-3-270m-q4_k_m.gguf
GEMMA_GOLD=tests/data/golden/llamacpp/gemma3_270m_q4_k_m_jsts_readme.json
QWEN=models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
QWEN_GOLD=tests/data/golden/llamacpp/qwen25_coder_05b_q4_k_m_jsts_readme.json
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -f "$GOLD" ] || fail "no golden $GOLD"
[ -f "$GEMMA_GOLD" ] || fail "no golden $GEMMA_GOLD"
TEXT=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifest"]["text"])' "$GOLD")
[ -f "$TEXT" ] || fail "$TEXT (named by $GOLD) missing"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# compare MODEL GOLD MODE MIN_TOP1 MAX_PPL_REL: scores the text with MODEL
# and --kernels MODE ("default": no flag) and checks it against GOLD;
# MIN_TOP1 is the overall top-1 floor, MAX_PPL_REL the bound on
# |PPL ours / PPL llama.cpp - 1|.
compare() {
  local model=$1 gold=$2 mode=$3 min_top1=$4 max_ppl=$5 flag=() chunks
  [ "$mode" = default ] || flag=(--kernels "$mode")
  chunks=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifest"]["test_chunks"])' "$gold")
  # under the sanitizers one window: a noisier statistic, on which even the
  # exact kernels sit -0.87% from llama.cpp (SmolLM2; 4 windows: -0.2% for
  # the int8 ones), so the int8 default's bound widens to 2% there
  case "${DI_SANITIZE:-OFF}" in ON|1|on|TRUE|true) chunks=1; [ "$mode" = default ] && max_ppl=0.02 ;; esac
  "$BIN" tokenize -m "$model" --bos -f "$TEXT" >"$tmp/ids" 2>"$tmp/err" || fail "tokenize: $(cat "$tmp/err")"
  "$BIN" perplexity -m "$model" -f "$TEXT" --ctx 512 --chunks "$chunks" --score-all -t 2 "${flag[@]}" \
    --top1-out "$tmp/top1" >"$tmp/out" 2>"$tmp/err" || fail "perplexity ($mode) exited $?: $(cat "$tmp/err")"
  python3 - "$gold" "$TEXT" "$tmp/ids" "$tmp/out" "$tmp/top1" "$chunks" "$mode" "$min_top1" "$(basename "$model")" \
    "$max_ppl" <<'PY' ||
import hashlib, json, math, sys
gold_path, text_path, ids_path, out_path, top1_path, chunks, mode, min_top1, name, max_ppl = sys.argv[1:11]
mode = f"{name} {mode}"
chunks, min_top1, max_ppl = int(chunks), float(min_top1), float(max_ppl)
g = json.load(open(gold_path))
m = g["manifest"]
ctx = m["ctx"]
assert hashlib.sha256(open(text_path, "rb").read()).hexdigest() == m["text_sha256"], \
    "text changed since the golden was made: rerun scripts/gen_goldens_llamacpp.py"

ours = [int(x) for x in open(ids_path).read().split()]
theirs = g["tokens"]
if ours != theirs:
    i = next((k for k, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    raise AssertionError(f"tokenization differs at {i}: ours {ours[i:i+5]} llama.cpp {theirs[i:i+5]} "
                         f"({len(ours)} vs {len(theirs)} tokens)")

fields = open(out_path).read().split()
assert fields[0] == "PPL", fields
ppl_printed, n_scored, n_win, ctx_out, first = float(fields[1]), int(fields[2]), int(fields[3]), int(fields[4]), int(fields[5])
assert (n_win, ctx_out, first) == (chunks, ctx, 0), fields
rows = [l.split() for l in open(top1_path) if not l.startswith("#")]
assert len(rows) == n_scored == chunks * (ctx - 1), (len(rows), n_scored)

DECISIVE = 0.5  # nat: llama.cpp's top-1 minus top-2 logit
agree = decisive = decisive_agree = 0
lp_ours = {}
for idx, target, argmax, lp in rows:
    idx, target, argmax = int(idx), int(target), int(argmax)
    w, j = divmod(idx - 1, ctx)
    assert target == theirs[idx], (idx, target)
    same = argmax == g["windows"][w]["argmax"][j]
    agree += same
    if g["windows"][w]["margin"][j] >= DECISIVE:
        decisive += 1
        decisive_agree += same
    lp_ours[(w, j)] = float(lp)
top1 = agree / len(rows)
top1_decisive = decisive_agree / decisive

def ppl(lps):
    return math.exp(-sum(lps) / len(lps))

keys_all = [(w, j) for w in range(chunks) for j in range(ctx - 1)]
keys_half = [(w, j) for (w, j) in keys_all if j >= ctx // 2]
res = {}
for name, keys in (("all", keys_all), ("half", keys_half)):
    a = ppl([lp_ours[k] for k in keys])
    b = ppl([g["windows"][w]["logprob"][j] for (w, j) in keys])
    res[name] = (a, b, len(keys))
print(f"perplexity.sh [{mode}]: {len(ours)} tokens identical; {chunks} window(s) of {ctx}: "
      f"top-1 agreement {agree}/{len(rows)} = {100 * top1:.2f}%; where llama.cpp's margin >= "
      f"{DECISIVE}: {decisive_agree}/{decisive} = {100 * top1_decisive:.2f}%")
for name, (a, b, n) in res.items():
    print(f"perplexity.sh [{mode}]: PPL ({name}, {n} scored) ours {a:.4f} llama.cpp {b:.4f} "
          f"ratio-1 {100 * (a / b - 1):+.3f}%")
assert abs(ppl_printed / res["all"][0] - 1) < 1e-5, (ppl_printed, res["all"][0])
assert top1_decisive >= 0.99, f"top-1 agreement at decisive positions {top1_decisive:.4f} < 0.99"
assert top1 >= min_top1, f"top-1 agreement {top1:.4f} < {min_top1}"
for name, (a, b, n) in res.items():
    assert abs(a / b - 1) <= max_ppl, f"PPL {name}: ours {a} vs llama.cpp {b}"
PY
    fail "comparison with llama.cpp ($model, $mode kernels)"
}
if [ -f "$MODEL" ]; then
  compare "$MODEL" "$GOLD" ggml 0.99 0.01
  compare "$MODEL" "$GOLD" default 0.93 0.01
else
  echo "perplexity.sh: default model not fetched, skipping it"
fi
case "${DI_SANITIZE:-OFF}" in
  # a Gemma window costs ~4x SmolLM2's (its 262144-row output per scored
  # token): minutes under ASan, for no code the SmolLM2 run does not cover
  # (test_gemma runs its forward under the sanitizers)
  ON|1|on|TRUE|true) echo "perplexity.sh: sanitizer build, Gemma skipped" ;;
  *) if [ -f "$GEMMA" ]; then GEMMA_RUN=1; fi ;;
esac
if [ -n "${GEMMA_RUN:-}" ]; then
  compare "$GEMMA" "$GEMMA_GOLD" ggml 0.93 0.03
  compare "$GEMMA" "$GEMMA_GOLD" default 0.93 0.03
elif [ ! -f "$GEMMA" ]; then
  echo "perplexity.sh: $GEMMA not fetched (scripts/fetch-gemma.sh), skipping it"
fi
# Qwen2.5-Coder-0.5B-Instruct Q4_K_M (when fetched; golden from the same
# script, first 2 windows): Q5_0 / Q8_0 / Q4_K / Q6_K weights, so both modes
# are held to the looser bars, as Gemma. Measured (2 windows, AMD EPYC):
# ggml 98.53% overall, 762/762 decisive, PPL +0.35% (all) / +0.33% (half);
# default 98.43%, 762/762, +0.25% / +0.19%. Skipped under the sanitizers for
# the same reason (a 151936-row output per scored token; test_qwen runs its
# forward there).
case "${DI_SANITIZE:-OFF}" in
  ON|1|on|TRUE|true) echo "perplexity.sh: sanitizer build, Qwen skipped" ;;
  *) if [ -f "$QWEN" ] && [ -f "$QWEN_GOLD" ]; then
       compare "$QWEN" "$QWEN_GOLD" ggml 0.93 0.03
       compare "$QWEN" "$QWEN_GOLD" default 0.93 0.03
     else
       echo "perplexity.sh: $QWEN not fetched (scripts/fetch-qwen.sh), skipping it"
     fi ;;
esac
[ -f "$MODEL" ] || exit 0

# Usage errors and bad input.
if "$BIN" perplexity -m "$MODEL" 2>/dev/null; then fail "missing -f accepted"; fi
if "$BIN" perplexity -m "$MODEL" -f "$TEXT" --ctx 4 2>/dev/null; then fail "--ctx 4 accepted"; fi
printf 'too short' >"$tmp/short.txt"
if "$BIN" perplexity -m "$MODEL" -f "$tmp/short.txt" 2>"$tmp/err"; then fail "text shorter than a window accepted"; fi
grep -q "fewer than one window" "$tmp/err" || fail "short-text message: $(cat "$tmp/err")"
printf 'a\0b' >"$tmp/nul.txt"
if "$BIN" perplexity -m "$MODEL" -f "$tmp/nul.txt" 2>/dev/null; then fail "NUL byte accepted"; fi
echo "perplexity.sh: ok"
