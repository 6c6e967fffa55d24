#!/usr/bin/env python3
"""Speculative decoding on workloads whose output repeats its input.

Decode tokens/s of `deepinfer run` with the default model, greedy:
  plain          --spec off
  ngram          --spec ngram          (prompt lookup)
  draft Q4_0     --spec draft:Q4_0     (the default model quantized to Q4_0)
against the same target without speculation, and llama.cpp's own
llama-lookup (n-gram) and llama-speculative (draft model) built from the
llama.cpp sources of the pinned llama-cpp-python sdist
(bench/build_llamacpp.sh), on the same prompt text and models.

Targets: the shipped Q4_1 default model and its Q8_0 requantization
(`deepinfer quantize`); the draft is its Q4_0 requantization. Greedy output
must be unchanged by speculation (checked: the text of every run is compared
with the plain run's). Each figure is the median of --runs runs; the load
average is recorded with each, because the machine is shared.

  python3 bench/spec_bench.py [--runs 3] [-n 160] [--threads 2]
Writes bench/results/spec.md (and prints it).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
CHATML = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


def workloads():
    text = open(os.path.join(ROOT, "bench", "data", "spec_edit.txt")).read().strip()
    code = open(os.path.join(ROOT, "src", "spec", "drafter_ngram.c")).read()
    code = code[: code.index("static di_status ngram_propose")]
    return [
        ("edit a text", CHATML.format("Copy the following text exactly, changing only 1871 to 1872:\n\n" + text)),
        ("summarize a text", CHATML.format("Summarize this text, reusing its own words:\n\n" + text)),
        ("code completion", code),
    ]


def quantize(deepinfer, kind):
    out = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.%s.gguf" % kind)
    if not os.path.exists(out):
        subprocess.run([deepinfer, "quantize", DEFAULT, out, kind.lower()], check=True,
                       stdout=subprocess.DEVNULL)
    return out


DECODE_RE = re.compile(r"generated (\d+) tok \| prefill [\d.]+ tok/s \| decode ([\d.]+) tok/s")
SPEC_RE = re.compile(r"accepted (\d+) \(([\d.]+)%\), ([\d.]+) tokens per verify step")


def run_deepinfer(deepinfer, model, prompt, n, threads, spec, k):
    cmd = [deepinfer, "run", "-m", model, "--raw", "--temp", "0", "-n", str(n), "-t", str(threads),
           "--spec", spec, "--spec-k", str(k), "-p", prompt]
    load = os.getloadavg()[0]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode:
        raise RuntimeError("%s: %s" % (" ".join(cmd[:12]), p.stderr[-2000:]))
    m = DECODE_RE.search(p.stderr)
    s = SPEC_RE.search(p.stderr)
    return {"tok_s": float(m.group(2)), "n": int(m.group(1)), "text": p.stdout, "load": load,
            "rate": float(s.group(2)) if s else None, "per_step": float(s.group(3)) if s else None}


LLAMA_RE = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s")
LLAMA_ACC_RE = re.compile(r"accept\s*=\s*([\d.]+)%")


def run_llama(binary, args, prompt, n, threads, k):
    cmd = [binary] + args + ["-p", prompt, "-n", str(n), "-t", str(threads), "--spec-draft-n-max", str(k),
                             "--temp", "0", "--top-k", "1", "-c", "4096",
                             # its default repacked weights crash on the AMX VM (signal 11,
                             # bench/results/compare-20261202-051244.md)
                             "--no-repack"]
    load = os.getloadavg()[0]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    out = p.stdout + p.stderr
    ms = LLAMA_RE.findall(out)
    if p.returncode or not ms:
        raise RuntimeError("%s: rc %d %s" % (os.path.basename(binary), p.returncode, out[-1500:]))
    # the last "decoded" line is the target's (llama-speculative prints the draft's too)
    n_dec, sec, tps = ms[-1]
    a = LLAMA_ACC_RE.search(out)
    return {"tok_s": float(tps), "n": int(n_dec), "load": load, "rate": float(a.group(1)) if a else None}


def median_of(fn, runs):
    rs = [fn() for _ in range(runs)]
    rs.sort(key=lambda r: r["tok_s"])
    mid = rs[len(rs) // 2]
    mid = dict(mid)
    mid["all"] = [r["tok_s"] for r in rs]
    mid["loads"] = [r["load"] for r in rs]
    return mid


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deepinfer", default=os.path.join(ROOT, "build", "deepinfer"))
    ap.add_argument("--llama-bin", default=os.path.join(ROOT, "build-llamacpp", "build", "bin"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("-n", type=int, default=160)
    ap.add_argument("-k", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "spec.md"))
    a = ap.parse_args()
    q4_0 = quantize(a.deepinfer, "Q4_0")
    q8_0 = quantize(a.deepinfer, "Q8_0")
    lookup = os.path.join(a.llama_bin, "llama-lookup")
    specul = os.path.join(a.llama_bin, "llama-speculative")
    have_llama = os.path.exists(lookup) and os.path.exists(specul)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    rows = []
    for target_name, target in (("Q4_1 (default)", DEFAULT), ("Q8_0", q8_0)):
        for wname, prompt in workloads():
            res = {}
            res["plain"] = median_of(lambda: run_deepinfer(a.deepinfer, target, prompt, a.n, a.threads, "off", a.k),
                                     a.runs)
            res["ngram"] = median_of(lambda: run_deepinfer(a.deepinfer, target, prompt, a.n, a.threads, "ngram", a.k),
                                     a.runs)
            res["draft Q4_0"] = median_of(
                lambda: run_deepinfer(a.deepinfer, target, prompt, a.n, a.threads, "draft:" + q4_0, a.k), a.runs)
            if have_llama:
                try:
                    res["llama-lookup"] = median_of(
                        lambda: run_llama(lookup, ["-m", target], prompt, a.n, a.threads, a.k), a.runs)
                    res["llama-speculative"] = median_of(
                        lambda: run_llama(specul, ["-m", target, "-md", q4_0, "--spec-draft-n-min", "0"], prompt, a.n,
                                          a.threads, a.k), a.runs)
                except RuntimeError as e:
                    print("llama.cpp failed:", e, file=sys.stderr)
            same = all(res[m]["text"] == res["plain"]["text"] for m in ("ngram", "draft Q4_0"))
            rows.append((target_name, wname, res, same))
            print(target_name, wname, {k: v["tok_s"] for k, v in res.items()}, "same" if same else "DIFFERENT",
                  file=sys.stderr)
    lines = ["# Speculative decoding: decode tok/s on repeating workloads", "",
             "`python3 bench/spec_bench.py --runs %d -n %d -k %d --threads %d`, %s, CPU: %s." %
             (a.runs, a.n, a.k, a.threads, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), cpu),
             "Greedy; medians of %d runs (all runs and the 1-minute load average at each start in brackets). "
             "The machine is shared: absolute numbers move with the load; compare within a row." % a.runs, "",
             "| target | workload | mode | decode tok/s | x plain | tokens | acceptance | runs [tok/s] | load |",
             "|---|---|---|---|---|---|---|---|---|"]
    for target_name, wname, res, same in rows:
        base = res["plain"]["tok_s"]
        for mode, r in res.items():
            acc = "" if r.get("rate") is None else "%.0f%%" % r["rate"]
            if r.get("per_step"):
                acc += ", %.2f tok/verify" % r["per_step"]
            lines.append("| %s | %s | %s | %.1f | %.2f | %d | %s | %s | %s |" % (
                target_name, wname, mode, r["tok_s"], r["tok_s"] / base if base else 0, r["n"], acc,
                " ".join("%.1f" % x for x in r["all"]), " ".join("%.1f" % x for x in r["loads"])))
        lines.append("| | | greedy text with speculation | %s | | | | | |" % ("identical" if same else "DIFFERS"))
    if not have_llama:
        lines += ["", "llama.cpp's tools were not built (sh bench/build_llamacpp.sh)."]
    md = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    open(a.out, "w").write(md)
    print(md)


if __name__ == "__main__":
    main()
