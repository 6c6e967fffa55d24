#!/usr/bin/env python3
"""Serving benchmark for OpenAI-compatible servers (DeepInfer's `deepinfer
serve`, llama.cpp's server via llama-cpp-python[server], vLLM, ...).

Each of C concurrent clients sends streaming /v1/completions requests back to
back until R requests are done at that level. Per request it records, from
the SSE stream as a client sees it:
  TTFT  time to the first chunk with text
  ITL   gaps between consecutive chunks with text
  TPOT  (e2e - TTFT) / (output tokens - 1), tokens from the usage chunk
  e2e   request start to [DONE]
and per level: p50/p95/p99 of each, request and output-token throughput,
and goodput (requests/s meeting --slo-ttft-ms and --slo-tpot-ms).

Targets are named base URLs; with two or more, the report adds ratios
against the first ("ours vs peer" in one run on one machine):

  python3 bench/serve_bench.py --target deepinfer=http://127.0.0.1:8080 \\
      --target llamacpp=http://127.0.0.1:8081 --concurrency 1 8 32 64

--launch-deepinfer BIN starts `BIN serve` on a free port for the run (and
stops it), so `python3 bench/serve_bench.py --launch-deepinfer build/deepinfer`
needs nothing else. Only the standard library is used; only the given URLs
(loopback in our use) are contacted; every loop is bounded by R requests.
"""
import argparse
import http.client
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain how a refrigerator works.",
    "List some facts about the moon.",
    "Describe a walk through a forest in autumn.",
    "What makes a good cup of coffee?",
    "Tell me about the history of bicycles.",
    "Why do cats purr?",
    "Summarize the plot of a heist movie you invent.",
]


# Extra fields sent in every request body (--ban-tokens sets logit_bias).
EXTRA_BODY = {}


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def one_request(url, key, model, prompt, max_tokens, seed, timeout):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    body = {"prompt": prompt, "max_tokens": max_tokens, "stream": True, "temperature": 0.8, "seed": seed,
            "ignore_eos": True, "stream_options": {"include_usage": True}, **EXTRA_BODY}
    if model:
        body["model"] = model
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", json.dumps(body), headers)
    resp = conn.getresponse()
    if resp.status != 200:
        err = resp.read()[:200]
        conn.close()
        return {"ok": False, "error": f"HTTP {resp.status}: {err!r}"}
    times, n_tokens, buf = [], None, b""
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            break
        ev = json.loads(data)
        now = time.perf_counter()
        if ev.get("usage"):
            n_tokens = ev["usage"].get("completion_tokens")
        for c in ev.get("choices") or []:
            if c.get("text"):
                times.append(now)
    t_end = time.perf_counter()
    conn.close()
    if not times:
        return {"ok": False, "error": "no text"}
    n = n_tokens or len(times)
    ttft = times[0] - t0
    e2e = t_end - t0
    return {"ok": True, "ttft": ttft, "e2e": e2e, "n": n,
            "tpot": (e2e - ttft) / (n - 1) if n > 1 else None,
            "itl": [b - a for a, b in zip(times, times[1:])]}


def run_level(url, key, model, conc, n_requests, max_tokens, timeout):
    lock = threading.Lock()
    results, issued = [], [0]

    def worker(wid):
        rng = random.Random(wid)
        while True:
            with lock:
                if issued[0] >= n_requests:
                    return
                issued[0] += 1
                i = issued[0]
            try:
                r = one_request(url, key, model, rng.choice(PROMPTS), max_tokens, i, timeout)
            except Exception as e:  # noqa: BLE001 - counted as a failure
                r = {"ok": False, "error": repr(e)}
            with lock:
                results.append(r)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(w,)) for w in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, time.perf_counter() - t0


def summarize(results, wall, slo_ttft, slo_tpot):
    ok = [r for r in results if r["ok"]]
    ttft = [r["ttft"] * 1e3 for r in ok]
    tpot = [r["tpot"] * 1e3 for r in ok if r["tpot"] is not None]
    e2e = [r["e2e"] * 1e3 for r in ok]
    itl = [x * 1e3 for r in ok for x in r["itl"]]
    good = [r for r in ok if r["ttft"] * 1e3 <= slo_ttft and (r["tpot"] is None or r["tpot"] * 1e3 <= slo_tpot)]
    s = {"requests": len(results), "failed": len(results) - len(ok), "wall_s": wall,
         "req_per_s": len(ok) / wall, "out_tok_per_s": sum(r["n"] for r in ok) / wall,
         "goodput_req_per_s": len(good) / wall}
    for name, xs in (("ttft_ms", ttft), ("tpot_ms", tpot), ("itl_ms", itl), ("e2e_ms", e2e)):
        for p in (50, 95, 99):
            s[f"{name}_p{p}"] = pct(xs, p)
    errs = [r["error"] for r in results if not r["ok"]]
    if errs:
        s["first_error"] = errs[0]
    return s


def launch_deepinfer(binary, model, extra):
    args = [binary, "serve", "--port", "0"] + (["-m", model] if model else []) + extra
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    m = re.search(r"listening on (http://\S+?):(\d+)", line)
    if not m:
        p.kill()
        sys.exit(f"serve_bench: server did not start: {line!r}")
    return p, f"http://127.0.0.1:{m.group(2)}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", action="append", default=[], help="NAME=BASE_URL (repeatable)")
    ap.add_argument("--launch-deepinfer", metavar="BIN", help="start BIN serve for the run as target 'deepinfer'")
    ap.add_argument("--launch-args", default="", help="extra flags for the launched server")
    ap.add_argument("--model", default=None, help="model file for --launch-deepinfer / model id to send")
    ap.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", ""))
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 64])
    ap.add_argument("--requests", type=int, default=0, help="requests per level (default 2 x concurrency, >= 8)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--slo-ttft-ms", type=float, default=2000)
    ap.add_argument("--slo-tpot-ms", type=float, default=200)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--ban-tokens", type=int, nargs="*", default=[],
                    help="token ids sent with logit_bias -100, for servers without ignore_eos "
                         "(llama-cpp-python); SmolLM2's end tokens are 0 and 2")
    ap.add_argument("--json", help="write the full report here")
    a = ap.parse_args()
    if a.ban_tokens:
        EXTRA_BODY["logit_bias"] = {str(t): -100 for t in a.ban_tokens}
    targets = [t.split("=", 1) for t in a.target]
    proc = None
    if a.launch_deepinfer:
        proc, url = launch_deepinfer(a.launch_deepinfer, a.model, a.launch_args.split())
        targets.insert(0, ["deepinfer", url])
    if not targets:
        ap.error("give --target NAME=URL or --launch-deepinfer BIN")
    report = {"config": vars(a), "levels": {}}
    try:
        for c in a.concurrency:
            n = a.requests or max(8, 2 * c)
            report["levels"][c] = {}
            for name, url in targets:
                model = None if a.launch_deepinfer and name == "deepinfer" else (a.model and os.path.basename(a.model))
                res, wall = run_level(url, a.api_key, model, c, n, a.max_tokens, a.timeout)
                s = summarize(res, wall, a.slo_ttft_ms, a.slo_tpot_ms)
                report["levels"][c][name] = s
                print(f"c={c:<3} {name:<10} {s['out_tok_per_s']:8.1f} tok/s  {s['req_per_s']:6.2f} req/s  "
                      f"goodput {s['goodput_req_per_s']:6.2f}  TTFT p50/p99 {s['ttft_ms_p50']:7.0f}/"
                      f"{s['ttft_ms_p99']:7.0f} ms  TPOT p50/p99 {s['tpot_ms_p50']:6.1f}/{s['tpot_ms_p99']:6.1f} ms  "
                      f"ITL p99 {s['itl_ms_p99']:6.1f} ms  e2e p99 {s['e2e_ms_p99']:7.0f} ms  failed {s['failed']}",
                      flush=True)
            if len(targets) > 1:
                base = report["levels"][c][targets[0][0]]
                for name, _ in targets[1:]:
                    o = report["levels"][c][name]
                    r_tp = base["out_tok_per_s"] / o["out_tok_per_s"] if o["out_tok_per_s"] else float("inf")
                    r_tpot = base["tpot_ms_p99"] / o["tpot_ms_p99"] if o["tpot_ms_p99"] else float("nan")
                    print(f"c={c:<3} {targets[0][0]}/{name}: throughput x{r_tp:.2f}, p99 TPOT x{r_tpot:.2f} "
                          "(lower is better)")
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
