#!/usr/bin/env python3
"""DeepInfer vs llama.cpp on the same GGUF files, thread count and machine,
in one run (DESIGN.md section 6).

For each model it measures, alternating the two engines rep by rep so a
change in machine load hits both alike:
  ppP      prompt processing of P tokens (one sequence)
  tgN      decode of N tokens (one sequence, after a 1-token prompt)
  batchB   decode throughput of B concurrent sequences (G tokens each)
DeepInfer through `deepinfer bench --json` (once per --kernels mode),
llama.cpp in-process through llama-cpp-python's low-level API (llama_decode
on the same shapes; greedy argmax, like ours). Machine limits come from
bench_bandwidth (read bandwidth at a size past the caches, f32 FMA and int8
VNNI peaks), giving decode as a share of the bandwidth bound (weight bytes
per token) and prefill as a share of peak arithmetic. The read probe runs
between the repetitions (probe, ours, llama.cpp, probe, ...), and each
rep's decode share is taken against the probes on either side of it, so a
change in machine load between probe and decode does not move the share
(bench/README.md, "Decode share of the bandwidth bound").

Model files: the default Q4_1 and Q8_0 / Q4_0 / Q4_K files made from it by
`deepinfer quantize` (made here when missing).

Writes bench/results/compare-<stamp>.json, .md and .svg (the plot, written
by hand: no plotting dependency).

Usage (llama-cpp-python from scripts/requirements-llamacpp.txt):
  $(scripts/venv.sh llamacpp) bench/compare_llamacpp.py [--reps 3] [--threads 2]
"""
import argparse
import concurrent.futures
import ctypes
import datetime
import json
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
QUANT_TYPES = ["q8_0", "q4_0", "q4_K"]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stderr[-2000:]))
    return r.stdout


def load_avg():
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except OSError:
        return None


# ---- model facts (from `deepinfer info`) ----------------------------------

def model_facts(bin_path, model):
    out = run([bin_path, "info", model])
    def num(label):
        m = re.search(r"^\s*%s:\s+([0-9.]+)" % re.escape(label), out, re.M)
        return float(m.group(1)) if m else None
    m = re.search(r"^tensors:\s+\d+\s+\(([0-9.]+) MiB\)", out, re.M)
    f = {k: num(k) for k in ["layers", "hidden", "heads", "kv heads", "head dim", "ffn", "vocab"]}
    f["weight_bytes"] = float(m.group(1)) * 1024 * 1024 if m else os.path.getsize(model)
    types = re.findall(r"^\s+(\w+)\s+(\d+) tensors", out, re.M)
    f["types"] = {t: int(n) for t, n in types}
    return f


def prefill_flops_per_token(f, n_prompt):
    """2 x multiply-adds per prompt token: the layer matmuls plus attention
    over (P+1)/2 positions on average (logits only for the last token)."""
    L, E, H, Hk, D, F = (f[k] for k in ["layers", "hidden", "heads", "kv heads", "head dim", "ffn"])
    macs = L * (2 * E * H * D + 2 * E * Hk * D + 3 * E * F)
    macs += L * H * D * 2 * (n_prompt + 1) / 2
    return 2 * macs


# ---- llama.cpp through llama-cpp-python ------------------------------------

class LlamaCpp:
    """Low-level llama.cpp: one model and context per measurement set. The
    names moved between releases; both spellings are tried."""

    def __init__(self, path, threads, n_ctx, n_batch, n_seq_max, extra_bufts=False):
        import llama_cpp as L
        import numpy as np
        self.L, self.np = L, np
        # silence llama.cpp's per-graph logging (kept alive on the object)
        self._log_cb = L.llama_log_callback(lambda level, text, user: None)
        L.llama_log_set(self._log_cb, None)
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        # Extra buffer types (AMX tiles, repacked Q4_0/Q8_0 layouts) are off
        # by default: with llama-cpp-python 0.3.36 built natively on this VM
        # (AMX_INT8 = 1, REPACK = 1) the first llama_decode segfaults when
        # they are on. --llama-extra-bufts turns them back on elsewhere.
        if hasattr(mp, "use_extra_bufts"):
            mp.use_extra_bufts = extra_bufts
        load = getattr(L, "llama_model_load_from_file", None) or L.llama_load_model_from_file
        self.model = load(path.encode(), mp)
        if not self.model:
            raise RuntimeError("llama.cpp could not load " + path)
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_batch
        if hasattr(cp, "n_ubatch"):
            cp.n_ubatch = n_batch
        cp.n_seq_max = n_seq_max
        cp.n_threads = threads
        cp.n_threads_batch = threads
        if hasattr(cp, "kv_unified"):
            cp.kv_unified = True
        new_ctx = getattr(L, "llama_init_from_model", None) or L.llama_new_context_with_model
        self.ctx = new_ctx(self.model, cp)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not create a context")
        if hasattr(L, "llama_model_get_vocab"):
            self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        else:
            self.n_vocab = L.llama_n_vocab(self.model)
        self.batch = L.llama_batch_init(max(n_batch, n_seq_max), 0, n_seq_max)
        self.version = getattr(L, "__version__", "?")

    def close(self):
        L = self.L
        L.llama_batch_free(self.batch)
        L.llama_free(self.ctx)
        (getattr(L, "llama_model_free", None) or L.llama_free_model)(self.model)

    def clear(self):
        L = self.L
        if hasattr(L, "llama_get_memory"):
            L.llama_memory_clear(L.llama_get_memory(self.ctx), True)
        else:
            L.llama_kv_cache_clear(self.ctx)

    def decode(self, rows):
        """rows: [(token, pos, seq, want_logits)]"""
        b = self.batch
        for i, (tok, pos, seq, want) in enumerate(rows):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = 1 if want else 0
        b.n_tokens = len(rows)
        rc = self.L.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError("llama_decode returned %d" % rc)

    def argmax_rows(self, n_rows):
        ptr = self.L.llama_get_logits(self.ctx)
        arr = self.np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)),
                                         shape=(n_rows, self.n_vocab))
        return [int(x) for x in arr.argmax(axis=1)]

    def pp(self, prompt):
        self.clear()
        t0 = time.perf_counter()
        self.decode([(t, i, 0, i == len(prompt) - 1) for i, t in enumerate(prompt)])
        return len(prompt) / (time.perf_counter() - t0)

    def tg(self, first, n):
        self.clear()
        self.decode([(first, 0, 0, True)])
        tok = self.argmax_rows(1)[0]
        t0 = time.perf_counter()
        for i in range(n):
            self.decode([(tok, i + 1, 0, True)])
            tok = self.argmax_rows(1)[0]
        return n / (time.perf_counter() - t0)

    def batched(self, firsts, n):
        self.clear()
        B = len(firsts)
        self.decode([(firsts[s], 0, s, True) for s in range(B)])
        toks = self.argmax_rows(B)
        t0 = time.perf_counter()
        for i in range(n):
            self.decode([(toks[s], i + 1, s, True) for s in range(B)])
            toks = self.argmax_rows(B)
        return B * n / (time.perf_counter() - t0)


# ---- ours ---------------------------------------------------------------------

def ours_once(bin_path, model, a, kernels):
    cmd = [bin_path, "bench", "-m", model, "-p", str(a.n_prompt), "-n", str(a.n_gen), "-t", str(a.threads),
           "-r", "1", "-b", ",".join(str(b) for b in a.batches), "--batch-gen", str(a.batch_gen), "--json"]
    if kernels != "default":
        cmd += ["--kernels", kernels]
    res = {}
    for line in run(cmd).splitlines():
        o = json.loads(line)
        res[o["test"]] = (o["tokens_per_s"], o["kernels"])
    return res


def summarize(v):
    return {"tokens_per_s": statistics.median(v), "min": min(v), "max": max(v), "reps": len(v)}


def probe_read(a, mib, full):
    """One read probe at mib MiB: the full one (7 passes, compute peaks too)
    or the quick read-only one run between repetitions (-c 0)."""
    cmd = [a.bandwidth_bin, "-s", str(mib), "-t", str(a.threads), "-r", "7" if full else str(a.probe_passes)]
    if not full:
        cmd += ["-c", "0"]
    return json.loads(run(cmd))


def llama_once(model, threads, n_ctx, n_batch, n_seq_max, extra_bufts, n_prompt, n_gen, batches, batch_gen):
    """One repetition of llama.cpp's tests, run in a process of its own
    (measure_model): with OMP_WAIT_POLICY=ACTIVE its idle OpenMP threads
    keep spinning for seconds after its last llama_decode, so in our process
    they would take a core from the read probes and from our runs. The
    process exits before the next probe, and its threads with it."""
    lc = LlamaCpp(model, threads, n_ctx, n_batch, n_seq_max, extra_bufts)
    try:
        seed = 12345
        prompt = []
        for _ in range(n_prompt + max(batches) + 1):
            seed = (seed * 1664525 + 1013904223) % 2 ** 32
            prompt.append(seed % lc.n_vocab)
        lc.pp(prompt[:16])  # warm-up
        r = {"pp%d" % n_prompt: lc.pp(prompt[:n_prompt]), "tg%d" % n_gen: lc.tg(prompt[0], n_gen)}
        for b in batches:
            r["batch%d" % b] = lc.batched(prompt[:b], batch_gen)
        return r, lc.version
    finally:
        lc.close()


def measure_model(bin_path, model, a, mib):
    """Reps of: read probe, ours (each kernel mode), llama.cpp (in a fresh
    process, llama_once); then a last probe. Returns the results and the
    probes (len reps + 1: probe i is taken just before rep i, probe i+1
    just after it)."""
    tests = ["pp%d" % a.n_prompt, "tg%d" % a.n_gen] + ["batch%d" % b for b in a.batches]
    ours = {k: {t: [] for t in tests} for k in a.kernels}
    names = {}
    llama = {t: [] for t in tests}
    n_ctx = max(a.n_prompt + a.n_gen + 16, max(a.batches) * (a.batch_gen + 8) + 16)
    spawn = multiprocessing.get_context("spawn")
    probes = []
    version = "?"
    for rep in range(a.reps):
        probes.append(probe_read(a, mib, full=rep == 0))
        for k in a.kernels:
            r = ours_once(bin_path, model, a, k)
            for t in tests:
                ours[k][t].append(r[t][0])
                names[k] = r[t][1]
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as ex:
            r, version = ex.submit(llama_once, model, a.threads, n_ctx, max(a.n_prompt, max(a.batches)),
                                   max(a.batches), a.llama_extra_bufts, a.n_prompt, a.n_gen, list(a.batches),
                                   a.batch_gen).result()
        for t in tests:
            llama[t].append(r[t])
        log("  rep %d/%d: ours %s | llama.cpp %s" % (
            rep + 1, a.reps,
            " ".join("%s=%.0f" % (t, ours[a.kernels[0]][t][-1]) for t in tests),
            " ".join("%s=%.0f" % (t, llama[t][-1]) for t in tests)))
    probes.append(probe_read(a, mib, full=True))
    return tests, {k: {t: summarize(v) for t, v in ours[k].items()} for k in a.kernels}, names, \
        {t: summarize(v) for t, v in llama.items()}, version, ours, llama, probes


def bandwidth_shares(per_rep, weight_bytes, probes):
    """Share of the bandwidth bound per repetition: tokens/s x weight bytes
    per token / read bandwidth, where rep i's bandwidth is the mean of the
    medians of the probes just before and just after it (the machine's load
    at that moment). Also against the best single pass of any of the
    model's probes (the machine's real limit; the stricter number)."""
    bws = [(probes[i]["read_gbs_median"] + probes[i + 1]["read_gbs_median"]) / 2 * 1e9 for i in range(len(per_rep))]
    shares = [v * weight_bytes / bw for v, bw in zip(per_rep, bws)]
    best_bw = max(p["read_gbs_best"] for p in probes) * 1e9
    return {"median": statistics.median(shares), "min": min(shares), "max": max(shares), "per_rep": shares,
            "vs_best": statistics.median(per_rep) * weight_bytes / best_bw, "best_read_gbs": best_bw / 1e9}


# ---- the plot ---------------------------------------------------------------

def write_svg(path, results, kernels):
    """Grouped bars: one panel per model, one group per test, bars for each
    of our kernel modes and llama.cpp (tokens/s, each panel scaled to its
    own maximum), the ratio printed above our bars."""
    colors = ["#1f77b4", "#2ca02c", "#9467bd", "#d62728"]
    panel_w, panel_h, top, left = 760, 220, 40, 60
    H = top + len(results) * (panel_h + 50) + 40
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="11">' % (panel_w + left + 20, H),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="20" font-size="14">DeepInfer vs llama.cpp, tokens/s (median; ratio over bars)</text>'
           % left]
    series = [("ours " + k, colors[i % 3]) for i, k in enumerate(kernels)] + [("llama.cpp", colors[3])]
    for i, (name, col) in enumerate(series):
        out.append('<rect x="%d" y="26" width="10" height="10" fill="%s"/><text x="%d" y="35">%s</text>'
                   % (left + 330 + i * 110, col, left + 344 + i * 110, name))
    for pi, r in enumerate(results):
        y0 = top + pi * (panel_h + 50) + 20
        tests = r["tests"]
        vals = [[r["ours"][k][t]["tokens_per_s"] for k in kernels] + [r["llama"][t]["tokens_per_s"]] for t in tests]
        vmax = max(max(v) for v in vals) or 1
        out.append('<text x="%d" y="%d" font-size="12">%s</text>' % (left, y0, os.path.basename(r["model"])))
        base = y0 + panel_h
        out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (left, base, left + panel_w, base))
        gw = panel_w / len(tests)
        bw = (gw - 20) / len(series)
        for ti, t in enumerate(tests):
            gx = left + ti * gw + 10
            for si, v in enumerate(vals[ti]):
                h = (panel_h - 30) * v / vmax
                x = gx + si * bw
                out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>'
                           % (x, base - h, bw - 2, h, series[si][1]))
                label = "%.0f" % v
                if si < len(kernels) and vals[ti][-1] > 0:
                    label = "%.2fx" % (v / vals[ti][-1])
                out.append('<text x="%.1f" y="%.1f" font-size="9" text-anchor="middle">%s</text>'
                           % (x + bw / 2 - 1, base - h - 3, label))
            out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (gx + (gw - 20) / 2, base + 14, t))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "deepinfer"))
    ap.add_argument("--bandwidth-bin", default=os.path.join(ROOT, "build", "bench_bandwidth"))
    ap.add_argument("--models", nargs="*", help="GGUF files (default: Q4_1 + our q8_0/q4_0/q4_K)")
    ap.add_argument("--threads", "-t", type=int, default=2)
    ap.add_argument("--n-prompt", "-p", type=int, default=512)
    ap.add_argument("--n-gen", "-n", type=int, default=128)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--batch-gen", type=int, default=32)
    ap.add_argument("--reps", "-r", type=int, default=3)
    ap.add_argument("--probe-passes", type=int, default=5, help="passes of the read probe between reps")
    ap.add_argument("--kernels", default="default,q8", help="our kernel modes to run (default = exact)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--omp-wait-policy", default="ACTIVE",
                    help="OMP_WAIT_POLICY for llama.cpp (ACTIVE = its default; PASSIVE only on a busy machine)")
    ap.add_argument("--llama-extra-bufts", action="store_true",
                    help="let llama.cpp use AMX / repacked weight buffers (crashes on the dev VM)")
    a = ap.parse_args()
    a.batches = [int(x) for x in a.batches.split(",") if x]
    a.kernels = [k for k in a.kernels.split(",") if k]
    if not a.models:
        a.models = [DEFAULT_MODEL]
        for t in QUANT_TYPES:
            p = DEFAULT_MODEL.replace(".Q4_1.gguf", ".%s.gguf" % t)
            if not os.path.exists(p):
                log("making %s with deepinfer quantize" % os.path.basename(p))
                run([a.bin, "quantize", DEFAULT_MODEL, p, t])
            a.models.append(p)
    os.makedirs(a.out, exist_ok=True)
    # llama.cpp runs with OpenMP's default active spin-wait, its fastest
    # setting on a quiet machine; on an oversubscribed one that spin makes
    # its 2-thread decode collapse (1-8 tok/s), so a busy machine gets a
    # warning (PASSIVE is its best setting there). Must be set before
    # libgomp loads (first llama_cpp use).
    os.environ.setdefault("OMP_WAIT_POLICY", a.omp_wait_policy)
    load1 = (load_avg() or [0.0])[0]
    if os.environ["OMP_WAIT_POLICY"].upper() == "ACTIVE" and load1 > 1.0:
        log("warning: load %.1f: llama.cpp's spinning threads lose most of their decode speed on a busy "
            "machine; measure on a quiet one (or pass --omp-wait-policy PASSIVE)" % load1)
    log("machine: load %s, %d threads, OMP_WAIT_POLICY=%s" % (load_avg(), a.threads, os.environ["OMP_WAIT_POLICY"]))
    results = []
    version = "?"
    machine = None
    for m in a.models:
        log("model %s" % os.path.basename(m))
        facts = model_facts(a.bin, m)
        # the read probe at the model's weight size (decode streams it once
        # per token; on this VM it fits the 480 MiB L3), interleaved with
        # the repetitions
        mib = max(16, int(facts["weight_bytes"] / 2 ** 20 + 0.5))
        tests, ours, names, llama, version, ours_reps, llama_reps, probes = measure_model(a.bin, m, a, mib)
        probe, probe_end = probes[0], probes[-1]
        log("  probes at %d MiB (read GB/s, median of passes): %s" % (
            mib, " ".join("%.1f" % p["read_gbs_median"] for p in probes)))
        machine = machine or probe
        shares = {}
        for t in tests:
            if t.startswith("tg") or t == "batch1":
                shares[t] = {"ours " + k: bandwidth_shares(ours_reps[k][t], facts["weight_bytes"], probes)
                             for k in a.kernels}
                shares[t]["llama.cpp"] = bandwidth_shares(llama_reps[t], facts["weight_bytes"], probes)
        results.append({"model": m, "facts": facts, "tests": tests, "ours": ours, "kernel_names": names,
                        "llama": llama, "probe": [probe, probe_end], "probes": probes, "probe_mib": mib,
                        "per_rep": {"ours": ours_reps, "llama": llama_reps}, "bandwidth_shares": shares,
                        "read_gbs": statistics.median([p["read_gbs_median"] for p in probes])})
    machine_end = probe_end
    f32_peak = statistics.median([r["probe"][i]["f32_gflops_median"] for r in results for i in (0, 1)]) * 1e9
    i8_peak = statistics.median([r["probe"][i]["int8_gmacs_median"] for r in results for i in (0, 1)]) * 2e9
    # AMX int8 tiles at full rate (0 where the CPU or OS lacks them)
    amx_peak = statistics.median([r["probe"][i].get("amx_int8_gmacs_median", 0) for r in results
                                  for i in (0, 1)]) * 2e9
    lines = ["# DeepInfer vs llama.cpp (llama-cpp-python %s%s)" % (
                 version, ", extra buffer types on" if a.llama_extra_bufts else ", extra buffer types (AMX/repack) off"), "",
             "%s, %d threads, OMP_WAIT_POLICY=%s for llama.cpp, load %s at the end; read bandwidth at each "
             "model's size %s GB/s (median over the probes between its reps); decode shares of the bandwidth bound "
             "(tokens/s x weight bytes / read bandwidth): median [min-max] over reps, each rep against the probes "
             "just before and after it, then against the best probe pass at that size; f32 peak %.0f GFLOP/s, int8 VNNI peak "
             "%.0f GOP/s, AMX int8 peak %.0f GOP/s (medians over the probes)" % (
                 datetime.datetime.now().isoformat(timespec="seconds"), a.threads, os.environ["OMP_WAIT_POLICY"],
                 load_avg(), ", ".join("%.2f" % r["read_gbs"] for r in results), f32_peak / 1e9, i8_peak / 1e9,
                 amx_peak / 1e9), "",
             "| model | test | " + " | ".join("ours %s" % k for k in a.kernels) +
             " | llama.cpp | " + " | ".join("ratio %s" % k for k in a.kernels) + " | share of the limit |",
             "|" + "---|" * (4 + 2 * len(a.kernels))]
    for r in results:
        f = r["facts"]
        bound_tg = r["read_gbs"] * 1e9 / f["weight_bytes"]
        r["decode_bound_tokens_per_s"] = bound_tg
        flops = prefill_flops_per_token(f, a.n_prompt)
        for t in r["tests"]:
            lv = r["llama"][t]["tokens_per_s"]
            ov = [r["ours"][k][t]["tokens_per_s"] for k in a.kernels]
            if t.startswith("pp"):
                # ours: each mode against the peak of the arithmetic it uses
                def peak_of(k):
                    if k != "q8":
                        return f32_peak, "f32"
                    if "amx" in r["kernel_names"].get(k, "") and amx_peak > 0:
                        return amx_peak, "AMX int8"
                    return i8_peak, "int8"
                share = ", ".join("ours %s %.0f%% of %s peak" % (k, 100 * o * flops / peak_of(k)[0], peak_of(k)[1])
                                  for k, o in zip(a.kernels, ov))
                share += ", llama.cpp %.0f%% of int8 peak" % (100 * lv * flops / i8_peak)
            elif t in r["bandwidth_shares"]:
                sh = r["bandwidth_shares"][t]
                share = "; ".join("%s %.0f%% [%.0f-%.0f], vs best %.0f%%" % (
                    who, 100 * x["median"], 100 * x["min"], 100 * x["max"], 100 * x["vs_best"])
                    for who, x in sh.items())
                share += " (bound at the best read %.1f GB/s: %.1f tok/s)" % (
                    sh["llama.cpp"]["best_read_gbs"], sh["llama.cpp"]["best_read_gbs"] * 1e9 / f["weight_bytes"])
            else:
                share = ""
            r.setdefault("ratios", {})[t] = {k: (o / lv if lv > 0 else None) for k, o in zip(a.kernels, ov)}
            lines.append("| %s | %s | %s | %.1f | %s | %s |" % (
                os.path.basename(r["model"]), t, " | ".join("%.1f [%.1f-%.1f]" % (
                    r["ours"][k][t]["tokens_per_s"], r["ours"][k][t]["min"], r["ours"][k][t]["max"])
                    for k in a.kernels), lv,
                " | ".join("%.2fx" % (o / lv) if lv > 0 else "-" for o in ov), share))
        best_llama = max(r["llama"]["batch%d" % b]["tokens_per_s"] for b in a.batches) if a.batches else 0
        if best_llama:
            best_ours = [max(r["ours"][k]["batch%d" % b]["tokens_per_s"] for b in a.batches) for k in a.kernels]
            lines.append("| %s | best batched | %s | %.1f | %s | |" % (
                os.path.basename(r["model"]), " | ".join("%.1f" % v for v in best_ours), best_llama,
                " | ".join("%.2fx" % (v / best_llama) for v in best_ours)))
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = os.path.join(a.out, "compare-%s" % stamp)
    with open(base + ".json", "w") as fj:
        json.dump({"machine_start": machine, "machine_end": machine_end, "threads": a.threads,
                   "omp_wait_policy": os.environ["OMP_WAIT_POLICY"],
                   "llama_cpp_python": version, "llama_extra_bufts": a.llama_extra_bufts, "results": results,
                   "load_end": load_avg()}, fj, indent=1)
    with open(base + ".md", "w") as fm:
        fm.write("\n".join(lines) + "\n")
    write_svg(base + ".svg", results, a.kernels)
    print("\n".join(lines))
    log("wrote %s.{json,md,svg}" % base)


if __name__ == "__main__":
    main()
