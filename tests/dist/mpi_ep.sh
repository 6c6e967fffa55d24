#!/usr/bin/env bash
# Expert + data parallelism under mpirun (scripts/mpirun.sh: shared memory +
# loopback only, oversubscribed), each run bounded by `timeout`:
#   1. mpi_ep_forward: EP logits byte-equal to one process at 1, 2 and 4
#      ranks, placeholder steps, EPLB rebalances moving weights (with
#      redundant slots and a forced skew: the measured moe_lb after the
#      first rebalance is lower than before it), both tiny checkpoints;
#   1b. mpi_cp_forward: a context-parallel prefill (DeepInfer's zigzag split
#      over 2 / 3 / 4 ranks) byte-equal to one process, and decode after it;
#   1c. deepinfer run --cp: the engine's CP prefill (whole and chunked)
#      gives the ids of one process;
#   2. deepinfer run --ep: the greedy ids of goldens.json (transformers);
#   3. deepinfer batch --ep: lines sharded over 2 / 4 ranks give the same
#      records as one process; 3b. the same for DeepSeek-V4.1 (tiny, tiny_b)
#      with EPLB rebalancing, and run --ep; 3c. serve --ep: two replicas
#      on their own ports answer like one process, SIGTERM ends the job;
#   4. a rank killed mid-run, and a rank that hangs: the job ends with an
#      error within the bound.
# Skips (exit 0 with a message) when MPI was not built or mpirun is absent.
set -euo pipefail
BIN=$1
BUILD=$2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MPIRUN_SH="$ROOT/scripts/mpirun.sh"
FWD="$BUILD/mpi_ep_forward"
if ! command -v mpirun >/dev/null 2>&1 || [ ! -x "$FWD" ]; then
  echo "mpi_ep.sh: SKIP (mpirun or an MPI build is missing)"
  exit 0
fi
# Open MPI's own allocations are not ours to leak-check
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}detect_leaks=0"
SLOW=1
[ "${DI_SANITIZE:-OFF}" = ON ] && SLOW=4
T=$((60 * SLOW))
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
G=$ROOT/tests/data/golden/deepseek_v4

# 1. forward-level bit equality
for args in "1 tiny_fp8" "2 tiny_fp8" "2 tiny_bf16 --interval 4 --extra 2 --skew 1.8 --decode 10" \
            "4 tiny_fp8 --seqs 3 --interval 4 --decode 8" "4 tiny_bf16 --interval 8 --extra 4 --skew 3 --decode 10" \
            "2 tiny_fp8 --seqs 16 --decode 24 --interval 32 --skew 2 --check-measured" \
            "4 tiny_bf16 --seqs 16 --decode 24 --interval 32 --skew 2 --extra 4 --check-measured"; do
  set -- $args
  np=$1 model=$2
  shift 2
  out=$(timeout $T "$MPIRUN_SH" "$np" "$FWD" "$G/$model" "$@" 2>"$TMP/err") ||
    { cat "$TMP/err" >&2; fail "mpi_ep_forward -np $np $model $*"; }
  echo "$out"
done

# 1b. context-parallel prefill (zigzag split): every row's logits and the
#     decode after it byte-equal to one process
for args in "2 tiny_fp8" "3 tiny_bf16" "4 tiny_fp8 --len 100"; do
  set -- $args
  np=$1 model=$2
  shift 2
  out=$(timeout $T "$MPIRUN_SH" "$np" "$BUILD/mpi_cp_forward" "$G/$model" "$@" 2>"$TMP/err") ||
    { cat "$TMP/err" >&2; fail "mpi_cp_forward -np $np $model $*"; }
  echo "$out"
done

# 1c. run --cp: the engine splits long prefill steps (whole prompts and
#     chunks) over the ranks; greedy and seeded ids equal one process
P=$(python3 -c "print(' '.join(str((i * 37 + 11) % 200 + 5) for i in range(150)))")
CP_ARGS=("--temp 0" "--temp 0.8 --seed 3" "--temp 0 --batch-tokens 48")
CP_NP="2 3"
[ "$SLOW" -gt 1 ] && { CP_ARGS=("--temp 0 --batch-tokens 48"); CP_NP=2; } # the sanitizer build: one run
for args in "${CP_ARGS[@]}"; do
  want=$(timeout $T "$BIN" run -m "$G/tiny_fp8" --prompt-ids "$P" -n 10 $args --print-ids --kv-f32 -t 1 2>/dev/null) ||
    fail "run $args (one process)"
  for np in $CP_NP; do
    got=$(timeout $T "$MPIRUN_SH" "$np" "$BIN" run --cp --cp-min-rows 16 -m "$G/tiny_fp8" --prompt-ids "$P" -n 10 \
          $args --print-ids --kv-f32 -t 1 2>"$TMP/err") || { cat "$TMP/err" >&2; fail "run --cp -np $np $args"; }
    [ "$got" = "$want" ] || fail "run --cp -np $np $args: got '$got' want '$want'"
  done
done
# EP + CP (+ EPLB) together: experts sliced, long prefill steps split
if [ "$SLOW" -eq 1 ]; then
want=$(timeout $T "$BIN" run -m "$G/tiny_fp8" --prompt-ids "$P" -n 10 --temp 0 --print-ids --kv-f32 -t 1 2>/dev/null)
got=$(timeout $T "$MPIRUN_SH" 4 "$BIN" run --ep --cp --cp-min-rows 16 --eplb-interval 3 --ep-extra-experts 2 \
      -m "$G/tiny_fp8" --prompt-ids "$P" -n 10 --temp 0 --print-ids --kv-f32 -t 1 2>"$TMP/err") ||
  { cat "$TMP/err" >&2; fail "run --ep --cp -np 4"; }
[ "$got" = "$want" ] || fail "run --ep --cp -np 4: got '$got' want '$want'"
fi
echo "run --cp: 2 and 3 ranks equal one process (greedy, seeded, chunked prefill); --ep --cp with EPLB at 4 ranks too"
# DeepSeek-V4.1: batch --cp (every rank runs every line; several long
# prompts per step, zigzag-split per sequence) equals one process, alone
# and with --ep + EPLB
python3 - >"$TMP/cp41.jsonl" <<'PY'
import json
for i in range(4):
    print(json.dumps({"id": i, "prompt": ("Long prompt number %d about DeepSeek, " % i) * (6 + 3 * i),
                      "max_tokens": 5, "temperature": 0}))
print(json.dumps({"id": "s", "prompt": "A seeded one " * 20, "max_tokens": 6, "temperature": 0.8, "seed": 5}))
PY
for model in tiny_b; do # (tiny, 10 layers, checked by hand: too slow for every run)
  M41=$ROOT/tests/data/golden/deepseek_v41/$model
  timeout $T "$BIN" batch -m "$M41" --in "$TMP/cp41.jsonl" --out "$TMP/one.jsonl" -t 1 2>/dev/null ||
    fail "v41 $model: batch (one process)"
  V41_CP=("2" "3" "4 --ep --eplb-interval 3 --ep-extra-experts 2")
  [ "$SLOW" -gt 1 ] && V41_CP=("2 --ep --eplb-interval 3 --ep-extra-experts 2") # the sanitizer build: one run
  for args in "${V41_CP[@]}"; do
    set -- $args
    np=$1
    shift
    timeout $T "$MPIRUN_SH" "$np" "$BIN" batch --cp --cp-min-rows 16 "$@" -m "$M41" --in "$TMP/cp41.jsonl" \
      --out "$TMP/cp.jsonl" -t 1 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "v41 $model: batch --cp -np $args"; }
    cmp -s "$TMP/one.jsonl" "$TMP/cp.jsonl" ||
      { diff "$TMP/one.jsonl" "$TMP/cp.jsonl" >&2; fail "v41 $model: batch --cp -np $args differs"; }
  done
done
echo "deepseek_v41 batch --cp: 2 and 3 ranks, and 4 with --ep + EPLB, equal one process"

# 2. run --ep: the goldens' greedy continuations
for model in tiny_fp8 tiny_bf16; do
  python3 - "$G/$model/goldens.json" >"$TMP/cases" <<'PY'
import json, sys
for c in json.load(open(sys.argv[1]))["cases"]:
    if "greedy" in c:
        print(" ".join(map(str, c["prompt"])) + "|" + " ".join(map(str, c["greedy"])))
PY
  while IFS='|' read -r prompt want; do
    got=$(timeout $T "$MPIRUN_SH" 2 "$BIN" run --ep -m "$G/$model" --prompt-ids "$prompt" -n 32 --temp 0 \
          --print-ids --kv-f32 -t 1 2>"$TMP/err") || { cat "$TMP/err" >&2; fail "$model: run --ep"; }
    [ "$got" = "$want" ] || fail "$model: run --ep: got '$got' want '$want'"
  done <"$TMP/cases"
done
echo "run --ep: goldens' greedy ids at 2 ranks"

# 3. batch --ep: data-parallel shards equal one process
python3 - >"$TMP/in.jsonl" <<'PY'
import json
for i in range(7):
    print(json.dumps({"id": i, "prompt": "Hello number %d, DeepSeek" % i + " and more" * i,
                      "max_tokens": 3 + 4 * (i % 3), "temperature": 0}))
print(json.dumps({"id": "sampled", "prompt": "A seeded one", "max_tokens": 6, "temperature": 0.8, "seed": 5}))
PY
M=$G/tiny_bf16
timeout $T "$BIN" batch -m "$M" --in "$TMP/in.jsonl" --out "$TMP/one.jsonl" -t 1 --kv-f32 2>/dev/null ||
  fail "batch (one process)"
for np in 2 4; do
  timeout $T "$MPIRUN_SH" "$np" "$BIN" batch --ep -m "$M" --in "$TMP/in.jsonl" --out "$TMP/ep$np.jsonl" -t 1 \
    --kv-f32 --eplb-interval 3 --ep-extra-experts 2 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "batch --ep -np $np"; }
  cmp -s "$TMP/one.jsonl" "$TMP/ep$np.jsonl" || { diff "$TMP/one.jsonl" "$TMP/ep$np.jsonl" >&2; fail "batch --ep -np $np differs"; }
done
echo "batch --ep: 2 and 4 ranks equal one process ($(wc -l <"$TMP/one.jsonl") records)"

# 3b. DeepSeek-V4.1 through the same EP core: batch --ep with EPLB moving
#     weights (redundant slots), both tiny checkpoints, 2 and 4 ranks, the same
#     records as one process; run --ep the same ids as run
for model in tiny_b tiny; do
  [ "$model" = tiny ] && [ "$SLOW" -gt 1 ] && continue # the sanitizer build: the small one only
  M41=$ROOT/tests/data/golden/deepseek_v41/$model
  timeout $T "$BIN" batch -m "$M41" --in "$TMP/in.jsonl" --out "$TMP/one41.jsonl" -t 1 2>/dev/null ||
    fail "v41 $model: batch (one process)"
  NPS="2 4"; [ "$SLOW" -gt 1 ] && NPS=2 # the sanitizer build: 2 ranks
  for np in $NPS; do
    timeout $T "$MPIRUN_SH" "$np" "$BIN" batch --ep -m "$M41" --in "$TMP/in.jsonl" --out "$TMP/ep41.jsonl" -t 1 \
      --eplb-interval 3 --ep-extra-experts 2 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "v41 $model: batch --ep -np $np"; }
    cmp -s "$TMP/one41.jsonl" "$TMP/ep41.jsonl" ||
      { diff "$TMP/one41.jsonl" "$TMP/ep41.jsonl" >&2; fail "v41 $model: batch --ep -np $np differs"; }
  done
  want=$(timeout $T "$BIN" run -m "$M41" -p "Hello DeepSeek" -n 12 --temp 0 --print-ids -t 1 2>/dev/null) ||
    fail "v41 $model: run"
  got=$(timeout $T "$MPIRUN_SH" 2 "$BIN" run --ep -m "$M41" -p "Hello DeepSeek" -n 12 --temp 0 --print-ids -t 1 \
        2>"$TMP/err") || { cat "$TMP/err" >&2; fail "v41 $model: run --ep"; }
  [ "$got" = "$want" ] || fail "v41 $model: run --ep: got '$got' want '$want'"
done
# forced skew (V4.1 too): the same records with and without rebalances, and
# the placement lowers moe_lb on its window
M41=$ROOT/tests/data/golden/deepseek_v41/tiny_b
for ev in "" "--eplb-interval 4 --ep-extra-experts 2 --eplb-log"; do
  [ "$SLOW" -gt 1 ] && break # the sanitizer build: covered by the release run
  timeout $T "$MPIRUN_SH" 2 "$BIN" batch --ep -m "$M41" --in "$TMP/in.jsonl" --out "$TMP/sk${ev:+1}.jsonl" -t 1 \
    --ep-force-imbalance 3 $ev 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "v41: batch --ep --ep-force-imbalance $ev"; }
done
if [ "$SLOW" -eq 1 ]; then
cmp -s "$TMP/sk.jsonl" "$TMP/sk1.jsonl" || fail "v41: forced skew: a rebalance changed the records"
python3 - "$TMP/err" <<'PY' || fail "v41: EPLB did not lower moe_lb under a forced skew"
import re, sys
m = re.search(r"moe_lb ([0-9.]+) -> ([0-9.]+)", open(sys.argv[1]).read())
sys.exit(0 if m and float(m.group(2)) < float(m.group(1)) else 1)
PY
fi
echo "deepseek_v41 --ep: batch at 2 and 4 ranks with EPLB and run at 2 ranks equal one process; forced skew rebalanced"

# 3c. serve --ep: two data-parallel replicas (rank r listens on its own
#     port) answer like one process; SIGTERM ends the whole job
ports_of() { sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$1"; }
wait_ports() { # file count
  for _ in $(seq 1 $((20 * SLOW))); do
    [ "$(ports_of "$1" | wc -l)" -ge "$2" ] && return 0
    sleep 1
  done
  return 1
}
complete() { # port -> text of a greedy completion
  curl -s -m $T "http://127.0.0.1:$1/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt":"Hello DeepSeek, serve","max_tokens":6,"temperature":0}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])'
}
M41=$ROOT/tests/data/golden/deepseek_v41/tiny_b
"$BIN" serve -m "$M41" --port 0 -t 1 >"$TMP/s1.out" 2>"$TMP/s1.err" &
S1=$!
wait_ports "$TMP/s1.out" 1 || { cat "$TMP/s1.err" >&2; fail "serve (one process) did not start"; }
want=$(complete "$(ports_of "$TMP/s1.out")") || fail "serve (one process): no completion"
kill -TERM $S1; wait $S1 || true
"$MPIRUN_SH" 2 "$BIN" serve --ep -m "$M41" --port 0 -t 1 >"$TMP/s2.out" 2>"$TMP/s2.err" &
S2=$!
wait_ports "$TMP/s2.out" 2 || { cat "$TMP/s2.err" >&2; kill -TERM $S2; fail "serve --ep did not start"; }
for p in $(ports_of "$TMP/s2.out"); do
  got=$(complete "$p") || { kill -TERM $S2; fail "serve --ep: port $p gave no completion"; }
  [ "$got" = "$want" ] || { kill -TERM $S2; fail "serve --ep: port $p: '$got' want '$want'"; }
done
kill -TERM $S2
for _ in $(seq 1 $((15 * SLOW))); do kill -0 $S2 2>/dev/null || break; sleep 1; done
kill -0 $S2 2>/dev/null && { kill -KILL $S2; fail "serve --ep: the job outlived SIGTERM"; }
echo "serve --ep: both replicas answer like one process; SIGTERM ended the job"

# 4. a dead rank and a hung rank end the job with an error in bounded time
BOUND=$((30 * SLOW))
for kind in kill hang; do
  t0=$(date +%s)
  if DI_DIST_FAULT=1:60:$kind timeout $((BOUND + 30)) "$MPIRUN_SH" 2 "$BIN" batch --ep -m "$M" --in "$TMP/in.jsonl" \
       --out "$TMP/f.jsonl" -t 1 --ep-timeout 3 >"$TMP/fout" 2>"$TMP/ferr"; then
    fail "$kind: the job succeeded with a dead rank"
  fi
  dt=$(($(date +%s) - t0))
  [ "$dt" -le "$BOUND" ] || fail "$kind: took ${dt}s (bound ${BOUND}s)"
  grep -q "DI_DIST_FAULT" "$TMP/ferr" || { cat "$TMP/ferr" >&2; fail "$kind: no fault message"; }
  if [ "$kind" = hang ]; then
    grep -q "has not finished after" "$TMP/ferr" || { cat "$TMP/ferr" >&2; fail "hang: no watchdog message"; }
  fi
  echo "fault $kind: the job ended with an error after ${dt}s"
done
echo "mpi_ep.sh: ok"
