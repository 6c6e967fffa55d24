#!/usr/bin/env bash
# deepinfer bench serve / bench plot: against a misbehaving stub
# (tests/cli/bench_serve_stub.py) every failure is a counted error or timeout
# with its reason and the run ends within its bounds; against our own server
# (started here on a free loopback port) the counts add up, the percentiles
# equal Python's statistics.quantiles(method='inclusive') on the recorded
# samples, prefix-cache hits are seen, and every record validates against
# bench/serve_record.schema.json (PyPI jsonschema, the test venv).
set -euo pipefail
BIN=$1
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
SCHEMA=bench/serve_record.schema.json
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
PY=$(bash scripts/venv.sh test)

# usage errors: exit 2 with a message
for args in "" "--url http://x --sweep users:1" "--url http://x --workload turns=0" \
            "--url http://x --rate 1 --concurrency 2" "--url http://x --workload input=lognormal:10:1000"; do
  rc=0; "$BIN" bench serve $args >/dev/null 2>"$tmp/err" || rc=$?
  [ "$rc" = 2 ] || fail "bench serve $args: exit $rc, want 2"
done

# unreachable server: without --model nothing to measure (exit 1); with it,
# every request is a counted connect error
rc=0; "$BIN" bench serve --url http://127.0.0.1:9 -q >/dev/null 2>"$tmp/err" || rc=$?
[ "$rc" = 1 ] || fail "unreachable without --model: exit $rc"
"$BIN" bench serve --url http://127.0.0.1:9 --model m -n 3 -c 2 -q --out "$tmp/unreach.json" >/dev/null 2>&1 \
  || fail "unreachable with --model: exit $?"

# the stub: one mode per run (the model id selects it)
CORPUS=tests/data/malformed/sse
python3 tests/cli/bench_serve_stub.py "$CORPUS" >"$tmp/stub.port" &
pids+=($!)
for _ in $(seq 150); do [ -s "$tmp/stub.port" ] && break; sleep 0.1; done
STUB=http://127.0.0.1:$(cat "$tmp/stub.port")
modes="ok stall malformed html early http500 huge"
for f in "$CORPUS"/*.sse; do modes="$modes corpus:$(basename "$f" .sse)"; done
for mode in $modes; do
  start=$(date +%s)
  "$BIN" bench serve --url "$STUB/v1" --model $mode -n 4 -c 2 --stall 0.5 --timeout 5 -q \
    --cost-per-hour 1 --out "$tmp/stub_${mode#corpus:}.json" >"$tmp/table_${mode#corpus:}" \
    2>"$tmp/err_${mode#corpus:}" || fail "stub $mode: exit $?: $(cat "$tmp/err_${mode#corpus:}")"
  [ $(( $(date +%s) - start )) -le 10 ] || fail "stub $mode: run took past its bounds"
done

# real prompts from a JSONL file, Poisson arrivals
printf '{"prompt": "What is 2+2?"}\n"Name a color."\n' >"$tmp/prompts.jsonl"
"$BIN" bench serve --url "$STUB" --model ok -n 6 --rate 40 --workload "prompts=$tmp/prompts.jsonl,turns=2" -q \
  --out "$tmp/prompts.json" >/dev/null 2>&1 || fail "prompts file run: exit $?"
printf '{"prompt": 3}\n' >"$tmp/bad_prompts.jsonl"
rc=0; "$BIN" bench serve --url "$STUB" --model ok --workload "prompts=$tmp/bad_prompts.jsonl" -q >/dev/null 2>"$tmp/err" || rc=$?
[ "$rc" = 2 ] && grep -q "line 1" "$tmp/err" || fail "bad prompts file: exit $rc: $(cat "$tmp/err")"

# Ctrl-C: what is in flight is cancelled, the sweep stops, the record is written
"$BIN" bench serve --url "$STUB" --model stall -n 4 -c 2 --stall 100 --timeout 100 -q --sweep concurrency:2,2 \
  --out "$tmp/interrupted.json" >/dev/null 2>&1 &
bpid=$!
sleep 2
kill -INT $bpid
start=$(date +%s)
wait $bpid || fail "interrupted run: exit $?"
[ $(( $(date +%s) - start )) -le 3 ] || fail "interrupted run did not stop at once"
[ "$(wc -l <"$tmp/interrupted.json")" = 1 ] || fail "sweep went on after the interrupt"

"$PY" - "$tmp" "$SCHEMA" <<'PY' || fail "records"
import json, os, sys, statistics
import jsonschema
tmp, schema_path = sys.argv[1], sys.argv[2]
schema = json.load(open(schema_path))
jsonschema.Draft202012Validator.check_schema(schema)
V = jsonschema.Draft202012Validator(schema)

def load(name):
    recs = [json.loads(l) for l in open(os.path.join(tmp, name)) if l.strip()]
    for r in recs:
        V.validate(r)
        q = r["requests"]
        assert q["sent"] == q["ok"] + q["errors"] + q["timeouts"], q
        assert q["sent"] == len(r["samples"]), q
    return recs

want = {  # mode -> (outcome counts, reason prefix)
    "stall": ("timeouts", "stalled"),
    "malformed": ("errors", "malformed SSE"),
    "html": ("errors", "not an SSE stream"),
    "early": ("errors", "stream closed before [DONE]"),
    "http500": ("errors", "HTTP 500"),
    "huge": ("errors", "malformed SSE: SSE event longer than"),
    # the regression corpus, tests/data/malformed/sse/NAME.sse
    "bad_json": ("errors", "malformed SSE: event is not a JSON object"),
    "array_event": ("errors", "malformed SSE: event is not a JSON object"),
    "event_after_done": ("errors", "malformed SSE: event after [DONE]"),
    "no_choices": ("errors", "malformed SSE: chunk without choices or usage"),
    "error_object": ("errors", "error in stream: overloaded"),
    "no_content": ("errors", "no content in the answer"),
    "cut_mid_event": ("errors", "stream closed before [DONE]"),
    "no_data_lines": ("errors", "stream closed before [DONE]"),
    "binary": ("errors", "stream closed before [DONE]"),
}
corpus = {f[:-4] for f in os.listdir("tests/data/malformed/sse") if f.endswith(".sse")}
assert corpus <= set(want), ("corpus files without an expected reason", corpus - set(want))
(ok,) = load("stub_ok.json")
assert ok["requests"]["ok"] == 4 and ok["output_tokens"] == 12, ok["requests"]
assert abs(ok["prefix_cache_hit_rate"] - 2 / 7) < 1e-9
assert ok["cost_per_million_output_tokens"] > 0
for mode, (kind, reason) in want.items():
    (r,) = load(f"stub_{mode}.json")
    q = r["requests"]
    assert q[kind] == 4 and q["ok"] == 0, (mode, q)
    assert all(k.startswith(reason) for k in q["reasons"]), (mode, q["reasons"])
    assert r["cost_per_million_output_tokens"] is None, mode  # nothing delivered
(p,) = load("prompts.json")
assert p["requests"]["ok"] == 6 and p["workload"]["n_prompts"] == 2 and p["workload"]["mode"] == "poisson", p["workload"]
(i,) = load("interrupted.json")
assert i["requests"]["errors"] == 2 and list(i["requests"]["reasons"]) == ["cancelled (interrupt)"], i["requests"]
(u,) = load("unreach.json")
assert u["requests"]["errors"] == 3 and all(k.startswith("connect") for k in u["requests"]["reasons"]), u["requests"]
PY

# our own server, a tiny multi-turn workload with a shared system prompt
if [ -f "$MODEL" ]; then
  N=6; SWEEP=1,3
  if [ "${DI_SANITIZE:-OFF}" = ON ]; then N=3; SWEEP=1; fi  # one small point under ASan
  "$BIN" serve -m "$MODEL" --port 0 -t 2 >"$tmp/serve.out" 2>"$tmp/serve.err" &
  pids+=($!)
  for _ in $(seq 300); do grep -q "listening on" "$tmp/serve.out" 2>/dev/null && break; sleep 0.1; done
  URL=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$tmp/serve.out")
  [ -n "$URL" ] || fail "our server did not start: $(cat "$tmp/serve.err")"
  "$BIN" bench serve --url "$URL" -n $N --sweep concurrency:$SWEEP --timeout 60 -q \
    --workload turns=2,system=60,shared=1,input=fixed:4,output=fixed:4,seed=3 --ignore-eos \
    --cost-per-hour 0.1 --power-watts 50 --note "ctest" --out "$tmp/ours.jsonl" >"$tmp/table" 2>"$tmp/err" \
    || fail "bench serve against our server: exit $?: $(cat "$tmp/err")"
  [ "$(grep -c '^ ' "$tmp/table")" -ge 2 ] || fail "no table: $(cat "$tmp/table")"
  "$PY" - "$tmp/ours.jsonl" "$SCHEMA" "$N" "$SWEEP" <<'PY' || fail "our server's records"
import json, sys, statistics
import jsonschema
recs = [json.loads(l) for l in open(sys.argv[1])]
V = jsonschema.Draft202012Validator(json.load(open(sys.argv[2])))
n = int(sys.argv[3])
want_c = [int(c) for c in sys.argv[4].split(",")]
assert [r["workload"]["concurrency"] for r in recs] == want_c, [r["workload"] for r in recs]

def pct(xs, q):  # Python's own definition, not ours
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0]
    cuts = statistics.quantiles(xs, n=100, method="inclusive")
    return cuts[q - 1]

for r in recs:
    V.validate(r)
    q = r["requests"]
    assert q["sent"] == n == q["ok"] + q["errors"] + q["timeouts"], q
    assert q["ok"] == n, q  # our server answers every request
    assert r["engine"]["name"] == "deepinfer" and "kernels=" in r["engine"]["build_info"]
    ok = [s for s in r["samples"] if s["outcome"] == "ok"]
    assert all(s["output_tokens"] == 4 for s in ok), ok  # ignore_eos, max_tokens 4
    for key in ("ttft_ms", "e2e_ms", "tpot_ms"):
        xs = [s[key] for s in ok]
        for p in (50, 95, 99):
            want, got = pct(xs, p), r[key][f"p{p}"]
            assert abs(got - want) <= 1e-9 * max(1.0, abs(want)), (key, p, got, want)
    # second turns re-send the shared system prompt and the first turn
    assert r["prefix_cache_hit_rate"] is not None and r["prefix_cache_hit_rate"] > 0, r["prefix_cache_hit_rate"]
    assert r["output_tokens"] == 4 * n and r["cost_per_million_output_tokens"] > 0
    assert r["energy_wh_per_million_output_tokens"] > 0 and r["note"] == "ctest"
PY
  RECS="$tmp/ours.jsonl"
else
  echo "bench_serve.sh: default model not fetched, skipping the run against our server"
  RECS="$tmp/stub_ok.json"
fi

# the plot, when gnuplot is installed (scripts/install-deps.sh installs it)
if command -v gnuplot >/dev/null; then
  "$BIN" bench plot --out "$tmp/plot.svg" --labels "ours,the stub" "$RECS" "$tmp/stub_ok.json" 2>"$tmp/err" \
    || fail "plot: $(cat "$tmp/err")"
  grep -q "the stub" "$tmp/plot.svg" || fail "plot lacks the --labels name"
  grep -q "<svg" "$tmp/plot.svg" || fail "plot is not SVG"
  grep -q "interactivity" "$tmp/plot.svg" || fail "plot has no axis label"
  rc=0; "$BIN" bench plot --out "$tmp/bad.svg" "$tmp/table_ok" 2>/dev/null || rc=$?
  [ "$rc" = 1 ] || fail "plot of a non-record: exit $rc"
fi
echo ok
