#!/usr/bin/env python3
"""DeepInfer's server against llama.cpp's servers, in one run on one machine
(issue 7's serving goal: at 32 clients, >= 3x llama.cpp's output-token
throughput at equal or better p99 TPOT).

Starts every server on a free loopback port, each with the same model and
thread count:
  deepinfer            `deepinfer serve` with its defaults (batch everything)
  llamacpp-python      llama-cpp-python's server (bench/llamacpp_server.py)
  llama-server-npN     llama.cpp's native server with N parallel slots
                       (continuous batching); build it with
                       bench/build_llamacpp.sh
  deepinfer-slo-PEER   `deepinfer serve --tpot-target-ms T`, one per peer,
                       T = --slo-fraction x that peer's p99 TPOT measured at
                       --calibrate-clients in this same run (first phase)
then measures each server ALONE on the machine (started, warmed, measured at
every concurrency level --repeat times, stopped before the next starts: a
spinning or idle server beside the measured one would take cores from it);
the SLO-mode servers take their targets from their peer's own run. Per
server and level the report keeps the median of each statistic over the
repetitions. llama.cpp runs with its default options. Load averages
(os.getloadavg) are recorded around every level. Writes JSON and a markdown
report with the ratios and a plain verdict per peer.

  python3 bench/serve_compare.py --deepinfer build/deepinfer \\
      --llama-server build-llamacpp/build/bin/llama-server \\
      --llamacpp-python VENV/bin/python \\
      --markdown bench/results/serve_vs_llamacpp.md --json bench/results/serve_vs_llamacpp.json
"""
import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_bench  # noqa: E402  (same folder)

DEFAULT_MODEL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
READY_TIMEOUT_S = 300


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, name):
    """Polls GET /v1/models until it answers 200 (llama-server says 503 while loading)."""
    t0 = time.time()
    while time.time() - t0 < READY_TIMEOUT_S:
        if proc.poll() is not None:
            sys.exit(f"serve_compare: {name} exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=5) as r:
                if r.status == 200:
                    return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.5)
    sys.exit(f"serve_compare: {name} not ready after {READY_TIMEOUT_S} s")


class Servers:
    def __init__(self, log_dir):
        self.procs = []
        self.log_dir = log_dir

    def start(self, name, argv, env=None):
        port = free_port()
        argv = [a.replace("{port}", str(port)) for a in argv]
        log = open(os.path.join(self.log_dir, f"{name}.log"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, **(env or {})))
        self.procs.append((name, p))
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, p, name)
        print(f"serve_compare: {name} ready at {url}: {' '.join(argv)}", flush=True)
        return url

    def stop(self):
        for _, p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for _, p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def measure(url, conc, n, a):
    res, wall = serve_bench.run_level(url, "", None, conc, n, a.max_tokens, a.timeout)
    return serve_bench.summarize(res, wall, a.slo_ttft_ms, a.slo_tpot_ms)


def median_summary(runs):
    out = {}
    for k in runs[0]:
        vals = [r[k] for r in runs if isinstance(r.get(k), (int, float))]
        if vals and len(vals) == len(runs):
            out[k] = statistics.median(vals)
        else:
            out[k] = runs[0][k]
    out["repeats"] = len(runs)
    out["failed"] = sum(r["failed"] for r in runs)
    out["requests"] = sum(r["requests"] for r in runs)
    return out


def fmt(x, nd=1):
    return "n/a" if x is None or x != x else f"{x:.{nd}f}"


def markdown(rep, a):
    L = []
    cfg = rep["config"]
    L.append("# deepinfer serve vs llama.cpp's servers (one run, same machine)\n")
    L.append(f"{rep['started']} to {rep['finished']} UTC, `{os.path.basename(cfg['model'])}`, "
             f"{cfg['threads']} threads per server, streaming /v1/completions, max_tokens {cfg['max_tokens']}, "
             f"temperature 0.8, `ignore_eos` and logit_bias -100 on tokens {cfg['ban_tokens']}; {cfg['repeat']} repetition(s), medians, each server alone on the machine; requests per "
             f"level: max(8, clients) per repetition. SLO for goodput: TTFT <= {cfg['slo_ttft_ms']:.0f} ms and "
             f"TPOT <= {cfg['slo_tpot_ms']:.0f} ms. llama.cpp peers run with "
             f"{'OMP_WAIT_POLICY=' + cfg['omp_wait_policy'] if cfg['omp_wait_policy'] else 'their default options'}"
             f"{' and --no-repack' if cfg.get('llama_no_repack') else ''}. Load average (1 min) during the run: "
             f"{min(rep['loads']):.1f} to {max(rep['loads']):.1f} on {os.cpu_count()} vCPUs, shared with other "
             "work, so absolute numbers are noisy; ratios are side by side.\n")
    L.append("Command:\n")
    L.append("    python3 bench/serve_compare.py " + " ".join(rep["argv"]) + "\n")
    L.append("Servers:\n")
    for name, info in rep["servers"].items():
        L.append(f"- `{name}`: `{info['cmd']}`" + (f" (target {info['target_ms']:.1f} ms = {cfg['slo_fraction']} x "
                                                    f"{info['peer']}'s p99 TPOT {info['peer_p99_tpot_ms']:.1f} ms "
                                                    f"at {cfg['calibrate_clients']} clients)"
                                                    if info.get("target_ms") else ""))
    L.append("")
    names = list(rep["servers"])
    for c in cfg["concurrency"]:
        lv = rep["levels"][str(c)]
        L.append(f"## {c} client(s)\n")
        L.append("| server | out tok/s | req/s | goodput req/s | TTFT p50/p95/p99 ms | TPOT p50/p95/p99 ms | "
                 "ITL p50/p95/p99 ms | e2e p50/p95/p99 ms | failed |")
        L.append("|---|---|---|---|---|---|---|---|---|")
        for n in names:
            s = lv[n]
            trip = lambda k: "/".join(fmt(s[f"{k}_p{p}"], 0) for p in (50, 95, 99))  # noqa: E731
            L.append(f"| {n} | {fmt(s['out_tok_per_s'])} | {fmt(s['req_per_s'], 2)} | "
                     f"{fmt(s['goodput_req_per_s'], 2)} | {trip('ttft_ms')} | {trip('tpot_ms')} | {trip('itl_ms')} | "
                     f"{trip('e2e_ms')} | {s['failed']} of {s['requests']} |")
        L.append(f"\nload average during this level: {fmt(lv['_load_before'])} -> {fmt(lv['_load_after'])}\n")
    L.append("## Ratios (ours / peer): output tok/s, and p99 TPOT (lower is better for us)\n")
    ours = [n for n in names if n.startswith("deepinfer")]
    peers = [n for n in names if not n.startswith("deepinfer")]
    L.append("| clients | ours | peer | throughput ratio | our p99 TPOT | peer p99 TPOT |")
    L.append("|---|---|---|---|---|---|")
    for c in cfg["concurrency"]:
        lv = rep["levels"][str(c)]
        for o in ours:
            for p in peers:
                so, sp = lv[o], lv[p]
                r = so["out_tok_per_s"] / sp["out_tok_per_s"] if sp["out_tok_per_s"] else float("inf")
                L.append(f"| {c} | {o} | {p} | {r:.2f}x | {fmt(so['tpot_ms_p99'])} | {fmt(sp['tpot_ms_p99'])} |")
    L.append("")
    L.append(f"## Verdict at {cfg['goal_clients']} clients: >= 3x output tok/s at equal or better p99 TPOT\n")
    lv = rep["levels"].get(str(cfg["goal_clients"]))
    if lv:
        for p in peers:
            sp = lv[p]
            hits = []
            for o in ours:
                so = lv[o]
                r = so["out_tok_per_s"] / sp["out_tok_per_s"] if sp["out_tok_per_s"] else float("inf")
                ok = r >= 3 and so["tpot_ms_p99"] <= sp["tpot_ms_p99"]
                hits.append(ok)
                L.append(f"- vs `{p}` with `{o}`: {r:.2f}x throughput, p99 TPOT {fmt(so['tpot_ms_p99'])} vs "
                         f"{fmt(sp['tpot_ms_p99'])} ms: **{'met' if ok else 'not met'}**")
            L.append(f"- **vs `{p}`: goal {'MET' if any(hits) else 'NOT MET'}** (by at least one DeepInfer "
                     "configuration)\n")
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deepinfer", default="build/deepinfer")
    ap.add_argument("--deepinfer-args", default="", help="extra flags for every deepinfer server")
    ap.add_argument("--llama-server", help="llama.cpp's llama-server binary (bench/build_llamacpp.sh)")
    ap.add_argument("--parallel", type=int, nargs="*", default=[32, 4],
                    help="llama-server -np values (4 is its default, 'auto')")
    ap.add_argument("--llamacpp-python", help="python with llama-cpp-python[server] installed")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 64])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--calibrate-clients", type=int, default=32)
    ap.add_argument("--slo-fraction", type=float, default=0.85,
                    help="deepinfer-slo-PEER target = this x PEER's measured p99 TPOT")
    ap.add_argument("--no-slo", action="store_true", help="skip the calibrated deepinfer-slo servers")
    ap.add_argument("--slo-target-ms", type=float, nargs="*", default=[],
                    help="also run `deepinfer serve --tpot-target-ms T` for each fixed T (deepinfer-slo-Tms)")
    ap.add_argument("--goal-clients", type=int, default=32)
    ap.add_argument("--slo-ttft-ms", type=float, default=2000)
    ap.add_argument("--slo-tpot-ms", type=float, default=200)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--ban-tokens", type=int, nargs="*", default=[0, 2],
                    help="token ids sent with logit_bias -100 in every request, so that servers without "
                         "ignore_eos (llama-cpp-python) also generate max_tokens (SmolLM2's end tokens: 0, 2)")
    ap.add_argument("--omp-wait-policy", default="",
                    help="OMP_WAIT_POLICY for the llama.cpp peers (default: unset, llama.cpp's own default)")
    ap.add_argument("--llama-no-repack", action="store_true",
                    help="llama-server without repacked weights (only where its default crashes; say so)")
    ap.add_argument("--log-dir", default="build/serve_compare_logs")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    a = ap.parse_args()
    os.makedirs(a.log_dir, exist_ok=True)
    if a.ban_tokens:
        serve_bench.EXTRA_BODY["logit_bias"] = {str(t): -100 for t in a.ban_tokens}
    t = str(a.threads)
    here = os.path.dirname(os.path.abspath(__file__))
    peers = []
    if a.llamacpp_python:
        peers.append(("llamacpp-python", [a.llamacpp_python, os.path.join(here, "llamacpp_server.py"), "--model",
                                          a.model, "--host", "127.0.0.1", "--port", "{port}", "--n_threads", t,
                                          "--n_threads_batch", t, "--n_ctx", "2048",
                                          # its default interrupts the running stream whenever a new
                                          # request arrives (the others end after one token); queue instead
                                          "--interrupt_requests", "False"]))
    if a.llama_server:
        for npar in a.parallel:
            peers.append((f"llama-server-np{npar}", [a.llama_server, "-m", a.model, "--host", "127.0.0.1", "--port",
                                                     "{port}", "-t", t, "-tb", t, "-np", str(npar), "-c", "8192",
                                                     "--no-webui"] + (["--no-repack"] if a.llama_no_repack else [])))
    di_base = [a.deepinfer, "serve", "-m", a.model, "--port", "{port}", "-t", t] + a.deepinfer_args.split()
    rep = {"config": vars(a), "argv": sys.argv[1:], "servers": {}, "levels": {}, "loads": [],
           "started": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    # Every server runs ALONE on the machine: started, warmed, measured at
    # every level and repetition, stopped before the next starts (llama.cpp's
    # spinning threads would otherwise take the cores from whoever runs beside
    # it, and an idle server beside a measured one is not free either). The
    # peers run with their own defaults (no OMP_WAIT_POLICY of ours unless
    # --omp-wait-policy is given).
    peer_env = {"OMP_WAIT_POLICY": a.omp_wait_policy} if a.omp_wait_policy else {}
    runs = {}

    def measure_alone(name, argv, env=None):
        srv = Servers(a.log_dir)
        try:
            url = srv.start(name, argv, env)
            rep["servers"][name] = {"cmd": " ".join(argv)} | rep["servers"].get(name, {})
            measure(url, 1, 2, a)  # warm-up: page the model in
            for r in range(a.repeat):
                for c in a.concurrency:
                    n = max(8, c)
                    lb = os.getloadavg()[0]
                    s = measure(url, c, n, a)
                    s["load1"] = os.getloadavg()[0]
                    runs.setdefault((c, name), []).append(s)
                    print(f"rep {r} c={c:<3} {name:<28} {s['out_tok_per_s']:7.1f} tok/s  TTFT p99 "
                          f"{s['ttft_ms_p99']:7.0f}  TPOT p50/p99 {s['tpot_ms_p50']:6.1f}/{s['tpot_ms_p99']:6.1f} ms  "
                          f"failed {s['failed']}  load {lb:.1f}-{s['load1']:.1f}", flush=True)
                    rep["loads"] += [lb, s["load1"]]
                    lv = rep["levels"].setdefault(str(c), {})
                    lv.setdefault("_load_before", lb)
                    lv["_load_after"] = s["load1"]
        finally:
            srv.stop()

    measure_alone("deepinfer", di_base)
    for name, argv in peers:
        measure_alone(name, argv, peer_env)
        if a.no_slo:
            continue
        # the peer's p99 TPOT at the goal's concurrency (from its own run
        # above) sets the target of one SLO-mode DeepInfer server
        cal = [x for x in runs.get((a.calibrate_clients, name), [])]
        if not cal:
            continue
        p99 = statistics.median([x["tpot_ms_p99"] for x in cal])
        if p99 != p99:
            continue
        target = a.slo_fraction * p99
        sname = f"deepinfer-slo-{name}"
        rep["servers"][sname] = {"target_ms": target, "peer": name, "peer_p99_tpot_ms": p99}
        measure_alone(sname, di_base + ["--tpot-target-ms", f"{target:.1f}"])
    for target in a.slo_target_ms:
        measure_alone(f"deepinfer-slo-{target:g}ms", di_base + ["--tpot-target-ms", f"{target:g}"])
    for (c, name), rs in runs.items():
        rep["levels"][str(c)][name] = median_summary(rs)
    rep["finished"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rep, f, indent=1)
    text = markdown(rep, a)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
