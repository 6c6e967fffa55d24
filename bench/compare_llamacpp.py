#!/usr/bin/env python3
"""DeepInfer vs llama.cpp on the same GGUF files, thread count and machine,
in one run (DESIGN.md section 6).

For each model it measures, alternating the two engines rep by rep so a
change in machine load hits both alike:
  ppP      prompt processing of P tokens (one sequence)
  tgN      decode of N tokens (one sequence, after a 1-token prompt)
  batchB   decode throughput of B concurrent sequences (G tokens each)
DeepInfer through `deepinfer bench --json` (once per --kernels mode),
llama.cpp through its own binaries built from source by
bench/build_llamacpp.sh: llama-bench for ppP / tgN and llama-batched-bench
(-npp 1 -ntg G -npl B) for batchB, each in a process of its own, with
llama.cpp's default options (repacked weights on; if that crashes, the
crash is recorded and the run goes on with --repack 0). Machine limits come from
bench_bandwidth (read bandwidth at a size past the caches, f32 FMA and int8
VNNI peaks), giving decode as a share of the bandwidth bound (weight bytes
per token) and prefill as a share of peak arithmetic. The read probe runs
between the repetitions (probe, ours, llama.cpp, probe, ...), and each
rep's decode share is taken against the probes on either side of it, so a
change in machine load between probe and decode does not move the share
(bench/README.md, "Decode share of the bandwidth bound").

Model files: the default Q4_1 and the Q8_0 / Q4_0 / Q4_K / Q6_K / F16 files
made from it by `deepinfer quantize` (made here when missing), then Gemma 3
270M Q4_K_M (the second family: local sliding-window layers, a 262144-token
tied output; scripts/fetch-gemma.sh) when models/ has it (--no-gemma drops
it); --models replaces the whole list, e.g. --models models/gemma-3-270m-
q4_k_m.gguf for the Gemma row alone.

Writes bench/results/compare-<stamp>.json, .md and .svg (the plot, written
by hand: no plotting dependency).

Usage (plain python3, no packages):
  sh bench/build_llamacpp.sh
  python3 bench/compare_llamacpp.py [--reps 3] [--threads 2] [--models A.gguf ...] [--no-gemma]
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
GEMMA_MODEL = os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf")
QUANT_TYPES = ["q8_0", "q4_0", "q4_K", "q6_K", "f16"]


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


def cpu_info():
    """The CPU's model name and the ISA flags that pick kernels."""
    model, flags = "?", []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k.strip() == "model name" and model == "?":
                    model = v.strip()
                elif k.strip() == "flags" and not flags:
                    flags = v.split()
    except OSError:
        pass
    keep = [x for x in flags if x in ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                                      "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16")]
    return {"model": model, "flags": " ".join(keep)}


# ---- model facts (from `deepinfer info`) ----------------------------------

def model_facts(bin_path, model):
    out = run([bin_path, "info", model])
    def num(label):
        m = re.search(r"^\s*%s:\s+([0-9.]+)" % re.escape(label), out, re.M)
        return float(m.group(1)) if m else None
    m = re.search(r"^tensors:\s+\d+\s+\(([0-9.]+) MiB\)", out, re.M)
    f = {k: num(k) for k in ["layers", "hidden", "heads", "kv heads", "head dim", "ffn", "vocab"]}
    f["weight_bytes"] = float(m.group(1)) * 1024 * 1024 if m else os.path.getsize(model)
    # routed experts: decode reads only the chosen experts' rows, so its
    # bound counts the expert tensors at top-k / n (`deepinfer info`)
    act = re.search(r"^active per token:\s+([0-9.]+) MiB", out, re.M)
    f["all_weight_bytes"] = f["weight_bytes"]
    if act:
        f["weight_bytes"] = float(act.group(1)) * 1024 * 1024
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


# ---- llama.cpp through its own binaries ------------------------------------

class LlamaBins:
    """llama.cpp's llama-bench (ppP, tgN) and llama-batched-bench (batchB),
    each run in a process of its own with llama.cpp's default options, so
    its worker threads exit before our next run. Repacked weights (extra
    buffer types, llama.cpp's default) are tried first; if a binary dies
    with them the crash is recorded and the rest of the run uses
    `--repack 0` / `--no-repack`, the nearest working configuration."""

    def __init__(self, bin_dir, threads):
        self.bench = os.path.join(bin_dir, "llama-bench")
        self.batched = os.path.join(bin_dir, "llama-batched-bench")
        for b in (self.bench, self.batched):
            if not os.access(b, os.X_OK):
                raise SystemExit("%s missing: sh bench/build_llamacpp.sh" % b)
        self.threads = threads
        self.repack = True
        self.crashes = []
        self.version = "?"

    def _run(self, cmd, what):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode < 0 or r.returncode >= 128:
            sig = -r.returncode if r.returncode < 0 else r.returncode - 128
            if self.repack:
                self.crashes.append({"what": what, "cmd": " ".join(cmd), "signal": sig,
                                     "stderr_tail": r.stderr[-600:]})
                log("  llama.cpp %s died (signal %d) with repacked weights; using the no-repack build options"
                    % (what, sig))
                self.repack = False
                return None
        if r.returncode != 0:
            raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stderr[-2000:]))
        return r.stdout

    def pp_tg(self, model, n_prompt, n_gen):
        """{"ppP": tok/s, "tgN": tok/s} from one llama-bench repetition."""
        while True:
            cmd = [self.bench, "-m", model, "-t", str(self.threads), "-p", str(n_prompt), "-n", str(n_gen),
                   "-r", "1", "-o", "json", "--repack", "1" if self.repack else "0"]
            out = self._run(cmd, "llama-bench")
            if out is not None:
                break
        res = {}
        for o in json.loads(out):
            self.version = "%s (%s)" % (o.get("build_number", "?"), o.get("build_commit", "?"))
            if o["n_prompt"] and not o["n_gen"]:
                res["pp%d" % o["n_prompt"]] = o["avg_ts"]
            elif o["n_gen"] and not o["n_prompt"]:
                res["tg%d" % o["n_gen"]] = o["avg_ts"]
        return res

    def batched_tg(self, model, batches, batch_gen):
        """{"batchB": decode tok/s} from one llama-batched-bench run: B
        sequences of a 1-token prompt decoding batch_gen tokens each (our
        batchB test's shape)."""
        n_ctx = max(batches) * (batch_gen + 8) + 16
        while True:
            cmd = [self.batched, "-m", model, "-t", str(self.threads), "-c", str(n_ctx), "-b", "2048",
                   "-ub", "512", "-npp", "1", "-ntg", str(batch_gen), "-npl", ",".join(str(b) for b in batches),
                   "--output-format", "jsonl"] + ([] if self.repack else ["--no-repack"])
            out = self._run(cmd, "llama-batched-bench")
            if out is not None:
                break
        res = {}
        for line in out.splitlines():
            line = line.strip()
            if line.startswith("{") and '"speed_tg"' in line:
                o = json.loads(line)
                res["batch%d" % o["pl"]] = o["speed_tg"]
        return res


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


def measure_model(bin_path, model, a, mib, llama):
    """Reps of: read probe, ours (each kernel mode), llama.cpp (llama-bench
    then llama-batched-bench); then a last probe. Returns the results and
    the probes (len reps + 1: probe i is taken just before rep i, probe i+1
    just after it)."""
    tests = ["pp%d" % a.n_prompt, "tg%d" % a.n_gen] + ["batch%d" % b for b in a.batches]
    ours = {k: {t: [] for t in tests} for k in a.kernels}
    names = {}
    lv = {t: [] for t in tests}
    probes = []
    for rep in range(a.reps):
        probes.append(probe_read(a, mib, full=rep == 0))
        for k in a.kernels:
            r = ours_once(bin_path, model, a, k)
            for t in tests:
                ours[k][t].append(r[t][0])
                names[k] = r[t][1]
        r = llama.pp_tg(model, a.n_prompt, a.n_gen)
        if a.batches:
            r.update(llama.batched_tg(model, list(a.batches), a.batch_gen))
            missing = [t for t in tests if t not in r]
            if missing:  # llama-batched-bench printed no line for some batch: once more
                log("  llama-batched-bench gave no %s; running it again" % ", ".join(missing))
                r.update({k: v for k, v in llama.batched_tg(model, list(a.batches), a.batch_gen).items()
                          if k not in r})
        for t in tests:
            if t not in r:
                sys.exit("llama.cpp gave no %s result for %s twice" % (t, model))
            lv[t].append(r[t])
        log("  rep %d/%d: ours %s | llama.cpp%s %s" % (
            rep + 1, a.reps,
            " ".join("%s=%.0f" % (t, ours[a.kernels[0]][t][-1]) for t in tests),
            "" if llama.repack else " (no repack)", " ".join("%s=%.0f" % (t, lv[t][-1]) for t in tests)))
    probes.append(probe_read(a, mib, full=True))
    return tests, {k: {t: summarize(v) for t, v in ours[k].items()} for k in a.kernels}, names, \
        {t: summarize(v) for t, v in lv.items()}, ours, lv, probes


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
    ap.add_argument("--models", nargs="*",
                    help="GGUF files (default: Q4_1 + our q8_0/q4_0/q4_K/q6_K/f16, then Gemma 3 270M Q4_K_M if fetched)")
    ap.add_argument("--no-gemma", action="store_true", help="leave Gemma 3 out of the default list")
    ap.add_argument("--threads", "-t", type=int, default=2)
    ap.add_argument("--n-prompt", "-p", type=int, default=512)
    ap.add_argument("--n-gen", "-n", type=int, default=128)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--batch-gen", type=int, default=32)
    ap.add_argument("--reps", "-r", type=int, default=3)
    ap.add_argument("--probe-passes", type=int, default=5, help="passes of the read probe between reps")
    ap.add_argument("--kernels", default="default,exact",
                    help="our kernel modes to run (default: int8 activations for quantized GGUF, exact otherwise)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--llama-bin", default=os.path.join(ROOT, "build-llamacpp", "build", "bin"),
                    help="folder of llama.cpp's binaries (sh bench/build_llamacpp.sh)")
    ap.add_argument("--llama-no-repack", action="store_true",
                    help="start llama.cpp without repacked weights (default: its default, repack on)")
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
        if not a.no_gemma:
            if os.path.exists(GEMMA_MODEL):
                a.models.append(GEMMA_MODEL)
            else:
                log("note: %s absent (scripts/fetch-gemma.sh): no Gemma row" % os.path.relpath(GEMMA_MODEL, ROOT))
    os.makedirs(a.out, exist_ok=True)
    # llama.cpp runs as its users run it: no OMP_WAIT_POLICY of ours (its
    # OpenMP default), repack on unless it crashes. Its threads spin between
    # graphs, so a busy machine costs it more than us: warn.
    load1 = (load_avg() or [0.0])[0]
    if load1 > 1.0:
        log("warning: load %.1f: measure on a quiet machine (both engines lose speed to other work, "
            "llama.cpp's spinning threads more)" % load1)
    llama = LlamaBins(a.llama_bin, a.threads)
    llama.repack = not a.llama_no_repack
    cpu = cpu_info()
    log("machine: %s, load %s, %d threads" % (cpu["model"], load_avg(), a.threads))
    results = []
    machine = None
    for m in a.models:
        log("model %s" % os.path.basename(m))
        facts = model_facts(a.bin, m)
        # the read probe at the model's weight size (decode streams it once
        # per token; on this VM it fits the 480 MiB L3), interleaved with
        # the repetitions
        mib = max(16, int(facts["weight_bytes"] / 2 ** 20 + 0.5))
        tests, ours, names, lres, ours_reps, llama_reps, probes = measure_model(a.bin, m, a, mib, llama)
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
                        "llama": lres, "probe": [probe, probe_end], "probes": probes, "probe_mib": mib,
                        "per_rep": {"ours": ours_reps, "llama": llama_reps}, "bandwidth_shares": shares,
                        "read_gbs": statistics.median([p["read_gbs_median"] for p in probes])})
    machine_end = probe_end
    f32_peak = statistics.median([r["probe"][i]["f32_gflops_median"] for r in results for i in (0, 1)]) * 1e9
    i8_peak = statistics.median([r["probe"][i]["int8_gmacs_median"] for r in results for i in (0, 1)]) * 2e9
    # AMX int8 tiles at full rate (0 where the CPU or OS lacks them)
    amx_peak = statistics.median([r["probe"][i].get("amx_int8_gmacs_median", 0) for r in results
                                  for i in (0, 1)]) * 2e9
    repack_note = "repacked weights (its default)" if llama.repack else (
        "no repack (its default crashed: %s)" % "; ".join("%s signal %d" % (c["what"], c["signal"])
                                                         for c in llama.crashes) if llama.crashes
        else "no repack (--llama-no-repack)")
    lines = ["# DeepInfer vs llama.cpp's own binaries (llama-bench, llama-batched-bench, build %s; %s)" % (
                 llama.version, repack_note), "",
             "CPU: %s (%s); %d threads" % (cpu["model"], cpu["flags"], a.threads), "",
             "%s, llama.cpp with its default options, load %s at the end; read bandwidth at each "
             "model's size %s GB/s (median over the probes between its reps); decode shares of the bandwidth bound "
             "(tokens/s x weight bytes / read bandwidth): median [min-max] over reps, each rep against the probes "
             "just before and after it, then against the best probe pass at that size; f32 peak %.0f GFLOP/s, int8 VNNI peak "
             "%.0f GOP/s, AMX int8 peak %.0f GOP/s (medians over the probes)" % (
                 datetime.datetime.now().isoformat(timespec="seconds"),
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
                    name = r["kernel_names"].get(k, "")
                    if not name.endswith("q8"):
                        return f32_peak, "f32"
                    if "amx" in name and amx_peak > 0:
                        return amx_peak, "AMX int8"
                    return i8_peak, "int8"
                # a probe that failed (0: a loaded machine) gives no share
                def pct(x, peak):
                    return "%.0f%%" % (100 * x * flops / peak) if peak > 0 else "n/a"
                share = ", ".join("ours %s %s of %s peak" % (k, pct(o, peak_of(k)[0]), peak_of(k)[1])
                                  for k, o in zip(a.kernels, ov))
                share += ", llama.cpp %s of int8 peak" % pct(lv, i8_peak)
            elif t in r["bandwidth_shares"]:
                sh = r["bandwidth_shares"][t]
                share = "; ".join("%s %.0f%% [%.0f-%.0f], vs best %.0f%%" % (
                    who, 100 * x["median"], 100 * x["min"], 100 * x["max"], 100 * x["vs_best"])
                    for who, x in sh.items())
                share += " (bound at the best read %.1f GB/s: %.1f tok/s)" % (
                    sh["llama.cpp"]["best_read_gbs"], sh["llama.cpp"]["best_read_gbs"] * 1e9 / f["weight_bytes"])
            else:
                share = ""
            if share and not t.startswith("pp") and f["weight_bytes"] != f["all_weight_bytes"]:
                share += " [active experts' bytes only: %.1f of %.1f MiB]" % (
                    f["weight_bytes"] / 2 ** 20, f["all_weight_bytes"] / 2 ** 20)
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
        json.dump({"machine_start": machine, "machine_end": machine_end, "threads": a.threads, "cpu": cpu,
                   "llama_cpp": {"binaries": a.llama_bin, "build": llama.version, "repack": llama.repack,
                                 "crashes": llama.crashes}, "results": results,
                   "load_end": load_avg()}, fj, indent=1)
    with open(base + ".md", "w") as fm:
        fm.write("\n".join(lines) + "\n")
    write_svg(base + ".svg", results, a.kernels)
    print("\n".join(lines))
    log("wrote %s.{json,md,svg}" % base)


if __name__ == "__main__":
    main()
