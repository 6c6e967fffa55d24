#!/usr/bin/env bash
# One serving comparison with `deepinfer bench serve`: DeepInfer's server
# against llama.cpp's llama-server (bench/build_llamacpp.sh), each alone
# on the machine, same model, same seeded multi-turn chat workload with a
# shared system prompt, a sweep of concurrent users. Writes to bench/results/:
#   serve-sweep-STAMP-deepinfer.jsonl, serve-sweep-STAMP-llama-server.jsonl
#   serve-sweep-STAMP.svg   the Pareto plot (deepinfer bench plot)
#   serve-sweep-STAMP.md    tables: goodput under the SLO, cost per 1M tokens
#
#   bash bench/serve_sweep.sh build/deepinfer build-llamacpp/build/bin/llama-server
#
# Knobs (environment): SWEEP (1,2,4,8,16,32,64), DURATION (s per point, 30),
# REQUESTS (per point, 256), THREADS (2), PRICE_CORE_HOUR (0.05 $),
# WORKLOAD, MODEL, STAMP, ONLY (deepinfer or llama-server: run that one; a
# later run with the same STAMP adds the other and writes the plot and report).
set -euo pipefail
DI=${1:?usage: serve_sweep.sh DEEPINFER LLAMA_SERVER}
LS=${2:?usage: serve_sweep.sh DEEPINFER LLAMA_SERVER}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=${MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}
SWEEP=${SWEEP:-1,2,4,8,16,32,64}
DURATION=${DURATION:-30}
REQUESTS=${REQUESTS:-256}
THREADS=${THREADS:-2}
PRICE_CORE_HOUR=${PRICE_CORE_HOUR:-0.05}
WORKLOAD=${WORKLOAD:-turns=4,system=200,shared=1,input=uniform:16:48,output=fixed:32,seed=1}
STAMP=${STAMP:-$(date -u +%Y%m%d-%H%M%S)}
OUT=$ROOT/bench/results/serve-sweep-$STAMP
NPAR=${SWEEP##*,}   # llama-server slots = the largest number of users
COST=$(awk -v p="$PRICE_CORE_HOUR" -v t="$THREADS" 'BEGIN { printf "%g", p * t }')
LOGS=$(mktemp -d)
srv=""
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; true' EXIT

port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

wait_ready() { # url pid
  for _ in $(seq 600); do
    kill -0 "$2" 2>/dev/null || { echo "serve_sweep: server exited; log in $LOGS" >&2; exit 1; }
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$1/v1/models")" = 200 ] && return 0
    sleep 0.5
  done
  echo "serve_sweep: $1 not ready" >&2; exit 1
}

run_one() { # name, then the server's argv with PORT standing for the port
  local name=$1; shift
  local p; p=$(port)
  local argv=("${@//PORT/$p}")
  "${argv[@]}" >"$LOGS/$name.log" 2>&1 &
  srv=$!
  wait_ready "http://127.0.0.1:$p" "$srv"
  echo "serve_sweep: $name ready: ${argv[*]}" >&2
  # warm-up (page the model in); not recorded
  "$DI" bench serve --url "http://127.0.0.1:$p" -n 2 -c 1 -q --workload "$WORKLOAD" --ignore-eos >/dev/null
  "$DI" bench serve --url "http://127.0.0.1:$p" --engine-name "$name" --sweep "concurrency:$SWEEP" \
    --requests "$REQUESTS" --duration "$DURATION" --timeout 120 --stall 60 --workload "$WORKLOAD" --ignore-eos \
    --slo-ttft-ms 1000 --slo-tpot-ms 100 --cost-per-hour "$COST" \
    --note "$name alone on the machine, $THREADS threads; price $PRICE_CORE_HOUR \$/core-hour x $THREADS cores; shared machine: see loadavg" \
    --out "$OUT-$name.jsonl"
  kill "$srv"; wait "$srv" 2>/dev/null || true; srv=""
}

if [ "${ONLY:-deepinfer}" = deepinfer ]; then
run_one deepinfer "$DI" serve -m "$MODEL" --host 127.0.0.1 --port PORT -t "$THREADS"
fi
if [ "${ONLY:-llama-server}" = llama-server ]; then
# llama-server: its defaults except the slots (one per user) and a context
# that gives every slot 1024 tokens; --no-repack: see bench/README.md.
run_one llama-server "$LS" -m "$MODEL" --host 127.0.0.1 --port PORT -t "$THREADS" -tb "$THREADS" \
  -np "$NPAR" -c $((NPAR * 1024)) --no-repack --no-webui
fi
# plot and report whatever records of this STAMP exist (one engine until
# the other has run)
recs=()
for n in deepinfer llama-server; do [ -f "$OUT-$n.jsonl" ] && recs+=("$OUT-$n.jsonl"); done
"$DI" bench plot --out "$OUT.svg" --title "SmolLM2-135M Q4_1, multi-turn chat, 1-$NPAR users ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $THREADS threads)" \
  "${recs[@]}"
python3 "$ROOT/bench/serve_sweep_report.py" "${recs[@]}" >"$OUT.md"
echo "serve_sweep: wrote $OUT.md, $OUT.svg and the records" >&2
