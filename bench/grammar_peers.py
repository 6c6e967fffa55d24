#!/usr/bin/env python3
"""Grammar masks: DeepInfer next to llguidance and XGrammar, one run.

For every schema of each jsonschemabench subset: compile (time), then a
token walk of up to --tokens tokens in which each step computes the allowed
token mask (timed), samples an allowed token and advances. Sampling is the
one `deepinfer grammar --bench` uses: xorshift64, and half of the steps
restricted to tokens that contain a quote, so walks leave strings and move
through the structure. Each engine samples from its own mask (walks are
alike in distribution, not token for token).

Same schemas, same tokenizer, same core: run the whole script under
`taskset -c N` (the script pins itself to one core when --core is given).
Times are the thread CPU clock (time.thread_time_ns; deepinfer uses
CLOCK_THREAD_CPUTIME_ID) so that a loaded machine does not turn preemption
into p99. Settings: compact whitespace everywhere; XGrammar with
strict_mode=False (otherwise it forbids properties the schema allows);
llguidance with whitespace_flexible=False; single-threaded compilers.

Usage:
  $(scripts/venv.sh grammar) bench/grammar_peers.py \\
      --tokenizer testdata/tokenizer/deepseek-v3/tokenizer.json --data JSONSCHEMABENCH_DATA \\
      --subsets Github_easy Github_medium --limit 100 --core 1 [--baseline OLD/deepinfer --reps 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pct(v, p):
    if not v:
        return float("nan")
    v = sorted(v)
    return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))]


class Rng:
    """xorshift64, as in tools/cmd_grammar.c."""

    def __init__(self, seed):
        self.s = (0x2545F4914F6CDD1D ^ seed) & 0xFFFFFFFFFFFFFFFF

    def next(self):
        s = self.s
        s ^= (s << 13) & 0xFFFFFFFFFFFFFFFF
        s ^= s >> 7
        s ^= (s << 17) & 0xFFFFFFFFFFFFFFFF
        self.s = s
        return s


def load_hf_tokenizer(path):
    """A transformers fast tokenizer for a tokenizer.json (or its folder) or
    a GGUF file (converted by transformers' GGUF loader)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if path.endswith(".gguf"):
        return AutoTokenizer.from_pretrained(os.path.dirname(path) or ".", gguf_file=os.path.basename(path))
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    return PreTrainedTokenizerFast(tokenizer_file=path)


def walk(fill, accept, terminated, allowed_of, quote_ids, n_tokens, rng, times):
    for _ in range(n_tokens):
        t0 = time.thread_time_ns()
        mask = fill()
        times.append((time.thread_time_ns() - t0) / 1e3)
        allowed = allowed_of(mask)
        if len(allowed) == 0:
            return
        pick = int(allowed[rng.next() % len(allowed)])
        if rng.next() & 1:
            q = allowed[quote_ids[allowed]]
            if len(q):
                pick = int(q[rng.next() % len(q)])
        if not accept(pick) or terminated():
            return


def bits_to_ids(words, n_vocab):
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")[:n_vocab]
    return np.flatnonzero(bits)


def run_xgrammar(hf, schemas, n_tokens, seed, quote_ids):
    import torch
    import xgrammar as xgr

    torch.set_num_threads(1)
    n_vocab = len(quote_ids)
    info = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=n_vocab)
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
    ctimes, mtimes, ok = [], [], 0
    rng = Rng(seed)
    for text in schemas:
        try:
            t0 = time.thread_time_ns()
            cg = compiler.compile_json_schema(text, any_whitespace=False, strict_mode=False)
            ctimes.append((time.thread_time_ns() - t0) / 1e3)
            m = xgr.GrammarMatcher(cg)
        except Exception:  # unsupported schema: counts against coverage
            continue
        ok += 1

        def fill():
            m.fill_next_token_bitmask(bitmask)
            return bitmask

        walk(fill, m.accept_token, m.is_terminated,
             lambda b: bits_to_ids(b[0].numpy(), n_vocab), quote_ids, n_tokens, rng, mtimes)
    return ok, ctimes, mtimes


def run_llguidance(hf, schemas, n_tokens, seed, quote_ids):
    import llguidance
    import llguidance.hf
    import llguidance.numpy

    n_vocab = len(quote_ids)
    lltok = llguidance.hf.from_tokenizer(hf, n_vocab=n_vocab)
    bitmask = llguidance.numpy.allocate_token_bitmask(1, lltok.vocab_size)
    ctimes, mtimes, ok = [], [], 0
    rng = Rng(seed)
    for text in schemas:
        try:
            t0 = time.thread_time_ns()
            grm = llguidance.LLMatcher.grammar_from_json_schema(text, defaults={"whitespace_flexible": False})
            if llguidance.LLMatcher.validate_grammar(grm, lltok):  # an error message
                continue
            m = llguidance.LLMatcher(lltok, grm)
            ctimes.append((time.thread_time_ns() - t0) / 1e3)
            if m.is_error():
                ctimes.pop()
                continue
        except Exception:
            continue
        ok += 1

        def fill():
            llguidance.numpy.fill_next_token_bitmask(m, bitmask, 0)
            return bitmask

        walk(fill, m.consume_token, lambda: m.is_stopped() or m.is_error(),
             lambda b: bits_to_ids(b[0], n_vocab), quote_ids, n_tokens, rng, mtimes)
    return ok, ctimes, mtimes


def run_deepinfer(tokenizer, subset_dir, limit, n_tokens, seed, exe=None):
    exe = exe or os.path.join(ROOT, "build", "deepinfer")
    out = subprocess.run([exe, "grammar", "--tokenizer", tokenizer, "--bench", subset_dir, "--limit", str(limit),
                          "--tokens", str(n_tokens), "--seed", str(seed), "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--data", required=True, help="jsonschemabench's data/ folder (the whole corpus)")
    ap.add_argument("--subsets", nargs="+", default=["Github_easy", "Github_medium", "Github_hard", "Glaiveai2K",
                                                     "Snowplow"])
    ap.add_argument("--limit", type=int, default=100, help="schemas per subset (sorted by name)")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--core", type=int, default=None, help="pin to this CPU core")
    ap.add_argument("--json-out", default=None)
    ap.add_argument("--baseline", default=None,
                    help="another deepinfer binary (an older build) measured in the same run as 'baseline'")
    ap.add_argument("--reps", type=int, default=1,
                    help="runs of deepinfer (and the baseline, interleaved); medians of their percentiles")
    args = ap.parse_args()
    if args.core is not None:
        os.sched_setaffinity(0, {args.core})
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("RAYON_NUM_THREADS", "1")

    hf = load_hf_tokenizer(args.tokenizer)
    n_vocab = max(len(hf), hf.vocab_size)
    quote_ids = np.zeros(n_vocab, dtype=bool)
    for tok, i in hf.get_vocab().items():
        if i < n_vocab and '"' in hf.convert_tokens_to_string([tok]):
            quote_ids[i] = True

    rows = []
    for sub in args.subsets:
        d = os.path.join(args.data, sub)
        names = sorted(f for f in os.listdir(d) if f.endswith(".json"))[: args.limit]
        schemas = [open(os.path.join(d, f), encoding="utf-8").read() for f in names]
        r = {"subset": sub, "schemas": len(schemas)}
        runs = {"deepinfer": [], "baseline": []}
        for _ in range(args.reps):  # interleaved, so both see the same machine load
            runs["deepinfer"].append(run_deepinfer(args.tokenizer, d, args.limit, args.tokens, args.seed))
            if args.baseline:
                runs["baseline"].append(run_deepinfer(args.tokenizer, d, args.limit, args.tokens, args.seed, args.baseline))
        for name, rs in runs.items():
            if rs:
                r[name] = {"compiled": rs[0]["compiled"], "masks": rs[0]["masks"]}
                for k in ("compile_p50_us", "mask_p50_us", "mask_p99_us"):
                    r[name][k] = statistics.median(x[k] for x in rs)
        for name, fn in (("llguidance", run_llguidance), ("xgrammar", run_xgrammar)):
            ok, ct, mt = fn(hf, schemas, args.tokens, args.seed, quote_ids)
            r[name] = {"compiled": ok, "compile_p50_us": pct(ct, 0.5), "mask_p50_us": pct(mt, 0.5),
                       "mask_p99_us": pct(mt, 0.99), "masks": len(mt)}
        rows.append(r)
        print_row(r)
        sys.stdout.flush()
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(rows, f, indent=1)


def print_row(r):
    n = r["schemas"]
    print(f"\n{r['subset']} ({n} schemas)")
    print(f"  {'engine':<11} {'compiled':>9} {'compile p50':>12} {'mask p50':>9} {'mask p99':>10} {'masks':>7}"
          f"   ratios peer/deepinfer (compile, p50, p99)")
    us = r["deepinfer"]
    for name in ("deepinfer", "baseline", "llguidance", "xgrammar"):
        if name not in r:
            continue
        e = r[name]
        line = (f"  {name:<11} {100.0 * e['compiled'] / n:8.1f}% {e['compile_p50_us']:10.1f}us "
                f"{e['mask_p50_us']:7.1f}us {e['mask_p99_us']:8.1f}us {e['masks']:7d}")
        if name != "deepinfer":
            line += (f"   {e['compile_p50_us'] / us['compile_p50_us']:6.2f}x {e['mask_p50_us'] / us['mask_p50_us']:6.2f}x "
                     f"{e['mask_p99_us'] / us['mask_p99_us']:6.2f}x")
        print(line)


if __name__ == "__main__":
    main()
