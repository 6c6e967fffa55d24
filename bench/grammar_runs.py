#!/usr/bin/env python3
"""Mask and compile timings of one or more deepinfer builds on
jsonschemabench, interleaved pair by pair and run by run, medians of the
runs (the tables of bench/results/grammar.md).

    bench/grammar_runs.py [-r RUNS] [--limit 50] NAME=BIN [NAME=BIN ...]

Each run is `BIN grammar --tokenizer TOK --bench SUBSET --limit N --json`
for the SmolLM2 tokenizer (the default model) and DeepSeek-V3's
(testdata/, `make testdata`), over jsonschemabench's data/ folder named by
--data or $JSONSCHEMABENCH. Prints a markdown table; nothing is asserted."""
import argparse, json, os, statistics, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.environ.get("JSONSCHEMABENCH", "")
TOKENIZERS = [("smollm2", os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")),
              ("deepseek-v3", os.path.join(ROOT, "testdata", "tokenizer", "deepseek-v3"))]
SUBSETS = ["Github_easy", "Github_medium", "Github_hard", "Glaiveai2K", "Snowplow"]


def run_once(binary, tok, subset, limit):
    p = subprocess.run([binary, "grammar", "--tokenizer", tok, "--bench",
                        os.path.join(DATA, subset), "--limit", str(limit), "--json"],
                       capture_output=True, text=True)
    if p.returncode != 0 or not p.stdout.strip():
        sys.exit("%s failed on %s: %s" % (binary, subset, p.stderr.strip()[-300:]))
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-r", "--runs", type=int, default=5)
    ap.add_argument("--limit", type=int, default=50)
    ap.add_argument("builds", nargs="+", help="NAME=BIN")
    a = ap.parse_args()
    builds = [b.split("=", 1) for b in a.builds]
    res = {}
    for r in range(a.runs):
        for tn, tp in TOKENIZERS:
            for s in SUBSETS:
                for bn, bp in builds:
                    res.setdefault((tn, s, bn), []).append(run_once(bp, tp, s, a.limit))
        print("run %d/%d done, load %s" % (r + 1, a.runs, os.getloadavg()), file=sys.stderr)
    print("| tokenizer | subset | build | compiled | compile p50 | mask p50 | mask p99 (runs) | p99 median | p99 <= 200 us |")
    print("|---|---|---|---|---|---|---|---|---|")
    for tn, _ in TOKENIZERS:
        for s in SUBSETS:
            for bn, _ in builds:
                js = res[(tn, s, bn)]
                p99 = [j["mask_p99_us"] for j in js]
                m = statistics.median(p99)
                print("| %s | %s | %s | %d/%d | %.0f us | %.1f us | %s | %.0f us | %s |" % (
                    tn, s, bn, js[0]["compiled"], js[0]["schemas"], statistics.median(j["compile_p50_us"] for j in js),
                    statistics.median(j["mask_p50_us"] for j in js), " / ".join("%.0f" % x for x in p99), m,
                    "met" if m <= 200 else "missed"))


if __name__ == "__main__":
    main()
