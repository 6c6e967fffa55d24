#!/usr/bin/env python3
"""Service-level figures for the disk KV tier and the prefill/decode split
(bench/results/service.md). Standard library only; every server is a
`deepinfer serve` on a loopback port started here.

  disk   TTFT of one long prompt (default 4096 tokens): cold (nothing cached),
         from the disk tier (after a restart of serve), from RAM (repeat).
  router multi-turn chat with a shared system prompt over 2 engines behind
         `deepinfer route`, affinity vs round-robin: throughput (output
         tokens/s) and TTFT p50/p99.
  pd     TTFT / TPOT of `clients` concurrent chat requests, combined (one
         serve) vs split (a --role prefill and a --role decode serve: the
         client runs the prompt on the prefill engine with max_tokens 1,
         moves its KV with /v1/kv/export -> /v1/kv/import, then streams the
         answer from the decode engine; TTFT counts all of it).

Run: python3 bench/service_bench.py --bin build/deepinfer [--model M] [--threads 2]
"""
import argparse
import concurrent.futures as cf
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def launch(binary, model, extra):
    args = [binary, "serve", "--port", "0"] + (["-m", model] if model else []) + extra
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    m = re.search(r"listening on http://[^:]+:(\d+)", p.stdout.readline())
    if not m:
        p.kill()
        sys.exit("service_bench: server did not start")
    return p, int(m.group(1))


def stop(p):
    p.terminate()
    p.wait(timeout=600)


def post(port, path, body, ctype="application/json", timeout=3600):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    c.request("POST", path, data, {"Content-Type": ctype})
    r = c.getresponse()
    out = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError(f"{path}: {r.status} {out[:200]!r}")
    return out


def stream(port, body, t0, timeout=3600):
    """Streams a chat completion; returns (ttft_s, token times) from t0."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", "/v1/chat/completions", json.dumps(dict(body, stream=True)).encode(),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    times = []
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("choices") and ev["choices"][0].get("delta", {}).get("content"):
            times.append(time.time() - t0)
    c.close()
    return times


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def words_for(n_tokens):
    """About n_tokens tokens of SmolLM2's tokenizer (measured: 4096 -> ~4100)."""
    return " ".join(f"w{i % 97}" for i in range(int(n_tokens / 2.9)))


def disk_bench(a):
    d = tempfile.mkdtemp(prefix="di_bench_kv_")
    base = ["-t", str(a.threads), "-c", "8192", "--kv-tokens", "16384", "--kv-disk", d, "--temp", "0"]
    body = {"messages": [{"role": "user", "content": words_for(a.prompt_tokens)}], "max_tokens": 1}
    out = {}
    try:
        p, port = launch(a.bin, a.model, base)
        t = time.time(); u = json.loads(post(port, "/v1/chat/completions", body))["usage"]; out["cold_s"] = time.time() - t
        out["prompt_tokens"] = u["prompt_tokens"]
        stop(p)  # flushes the RAM cache to the disk tier
        p, port = launch(a.bin, a.model, base)
        t = time.time(); u = json.loads(post(port, "/v1/chat/completions", body))["usage"]; out["disk_s"] = time.time() - t
        out["disk_cached"] = u["prompt_tokens_details"]["cached_tokens"]
        t = time.time(); u = json.loads(post(port, "/v1/chat/completions", body))["usage"]; out["ram_s"] = time.time() - t
        out["ram_cached"] = u["prompt_tokens_details"]["cached_tokens"]
        stop(p)
        out["disk_bytes"] = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".kvr"))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return out


def router_run(a, policy):
    extra = ["-t", "1", "-c", "2048", "--temp", "0"]
    engines = [launch(a.bin, a.model, extra) for _ in range(2)]
    args = [a.bin, "route", "--port", "0", "--policy", policy]
    for _, port in engines:
        args += ["--engine", f"http://127.0.0.1:{port}"]
    rp = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    rport = int(re.search(r":(\d+) ", rp.stdout.readline()).group(1))
    system = "You are the help desk of a large library. " + words_for(a.system_tokens)
    try:
        def conversation(c):
            msgs = [{"role": "system", "content": system}]
            ttfts, n_tok = [], 0
            for turn in range(a.turns):
                msgs.append({"role": "user", "content": f"User {c}, question {turn}: where is shelf {c * 7 + turn}?"})
                body = {"messages": msgs, "max_tokens": a.max_tokens, "ignore_eos": True}
                t0 = time.time()
                times = stream(rport, body, t0)
                ttfts.append(times[0])
                n_tok += len(times)
                msgs.append({"role": "assistant", "content": f"Shelf {c * 7 + turn} is upstairs."})
            return ttfts, n_tok
        t = time.time()
        with cf.ThreadPoolExecutor(a.router_clients) as ex:
            res = list(ex.map(conversation, range(a.router_clients)))
        wall = time.time() - t
        ttft = [x for r in res for x in r[0]]
        return {"tok_per_s": sum(r[1] for r in res) / wall, "ttft_p50_s": statistics.median(ttft),
                "ttft_p99_s": pct(ttft, 99), "wall_s": wall}
    finally:
        rp.terminate()
        rp.wait()
        for p, _ in engines:
            stop(p)


def pd_level(a, clients, split):
    extra = ["-t", str(a.threads), "-c", "2048", "--temp", "0"]
    procs = []
    try:
        if split:
            pp, pport = launch(a.bin, a.model, extra + ["--role", "prefill"])
            procs.append(pp)
            dp, dport = launch(a.bin, a.model, extra + ["--role", "decode"])
            procs.append(dp)
        else:
            cp, pport = launch(a.bin, a.model, extra)
            procs.append(cp)
            dport = pport

        def one(i):
            msgs = [{"role": "user", "content": f"Request {i}. " + words_for(a.pd_prompt_tokens)}]
            body = {"messages": msgs, "max_tokens": a.max_tokens, "ignore_eos": True}
            t0 = time.time()
            if split:
                pre = {"messages": msgs, "max_tokens": 1}
                post(pport, "/v1/chat/completions", pre)
                blob = post(pport, "/v1/kv/export", pre)
                post(dport, "/v1/kv/import", blob, "application/octet-stream")
            times = stream(dport, body, t0)
            return times

        with cf.ThreadPoolExecutor(clients) as ex:
            res = list(ex.map(one, range(clients)))
        ttft = [r[0] for r in res if r]
        tpot = [(r[-1] - r[0]) / (len(r) - 1) for r in res if len(r) > 1]
        return {"ttft_p50_s": statistics.median(ttft), "ttft_p99_s": pct(ttft, 99),
                "tpot_p50_ms": 1e3 * statistics.median(tpot), "tpot_p99_ms": 1e3 * pct(tpot, 99)}
    finally:
        for p in procs:
            stop(p)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/deepinfer")
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=4096)
    ap.add_argument("--pd-prompt-tokens", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--clients", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--only", choices=["disk", "pd", "router"])
    ap.add_argument("--system-tokens", type=int, default=512)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--router-clients", type=int, default=8)
    ap.add_argument("--json")
    a = ap.parse_args()
    rep = {"load_before": os.getloadavg()}
    if a.only in (None, "disk"):
        rep["disk"] = disk_bench(a)
        print(json.dumps(rep["disk"]), flush=True)
    if a.only in (None, "router"):
        rep["router"] = {}
        for policy in ("round-robin", "affinity"):
            rep["router"][policy] = router_run(a, policy)
            print(policy, json.dumps(rep["router"][policy]), flush=True)
    if a.only in (None, "pd"):
        rep["pd"] = {}
        for c in a.clients:
            for split in (False, True):
                k = f"{'split' if split else 'combined'}_{c}"
                rep["pd"][k] = pd_level(a, c, split)
                print(k, json.dumps(rep["pd"][k]), flush=True)
    rep["load_after"] = os.getloadavg()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rep, f, indent=1)
    print(json.dumps(rep, indent=1))


if __name__ == "__main__":
    main()
