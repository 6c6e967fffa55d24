#!/usr/bin/env python3
"""Golden distributions and logprobs for src/sample/sampler.c.

Oracle: the sampling semantics of HF transformers' logits processors and of
the OpenAI/vLLM penalties, re-expressed in float64 numpy from their
documented formulas (transformers and torch are not in the tools venv):

  bias/mask   z[t] += bias[t]; z[t] = -inf where the mask disallows t
  repetition  RepetitionPenaltyLogitsProcessor over every distinct token of
              the history (prompt + generated): z > 0 ? z / r : z * r
  freq/pres   OpenAI: z[t] -= freq * count[t] + pres * (count[t] > 0), with
              count over the generated tokens only (vLLM does the same)
  logprobs    log_softmax(z) (after bias, mask and penalties, before
              temperature; DeepInfer's DI_LOGPROBS_PROCESSED)
  temperature TemperatureLogitsWarper: s = z / T
  top-k       TopKLogitsWarper: drop s < (k-th largest s)
  top-p       TopPLogitsWarper: sort ascending, cum = cumsum(softmax);
              drop cum <= 1 - top_p, always keep the largest
  min-p       MinPLogitsWarper: p = softmax(s); drop p < min_p * max(p)
  final       softmax over the survivors; T == 0 is a one-hot argmax

Cases whose cuts fall within MARGIN of a decision boundary are redrawn, so
float32 (C) and float64 (here) agree on every kept/dropped decision. Logits
are written with 9 significant digits, which round-trips float32 exactly.

Usage: .venv/bin/python scripts/gen_goldens_sampler.py
Writes tests/data/golden/sampler/cases.txt (numpy version in the header).
"""
import os
import sys

import numpy as np

MARGIN = 1e-4
SEED = 20240611
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                   "golden", "sampler", "cases.txt")


def softmax(x):
    m = np.max(x[np.isfinite(x)])
    e = np.where(np.isfinite(x), np.exp(x - m), 0.0)
    return e / e.sum()


def log_softmax(x):
    m = np.max(x[np.isfinite(x)])
    lse = m + np.log(np.sum(np.where(np.isfinite(x), np.exp(x - m), 0.0)))
    return x - lse


def processed_logits(logits, history, n_prompt, bias, mask, rep, pres, freq):
    z = logits.astype(np.float64).copy()
    for t, b in bias:
        z[t] += b
    if mask is not None:
        z[~mask] = -np.inf
    if rep != 1.0:
        for t in sorted(set(history)):
            z[t] = z[t] / rep if z[t] > 0 else z[t] * rep
    if freq != 0.0 or pres != 0.0:
        gen = history[n_prompt:]
        for t in sorted(set(gen)):
            c = gen.count(t)
            z[t] -= freq * c + pres * (c > 0)
    return z


class Ambiguous(Exception):
    pass


def final_distribution(z, T, top_k, top_p, min_p):
    V = len(z)
    if T == 0.0:
        out = np.zeros(V)
        out[int(np.argmax(z))] = 1.0
        return out
    s = z / T
    finite = np.isfinite(s)
    if 0 < top_k < finite.sum():
        order = np.sort(s[finite])[::-1]
        if order[top_k - 1] - order[top_k] < MARGIN:
            raise Ambiguous("top-k")
        s = np.where(s < order[top_k - 1], -np.inf, s)
    if top_p < 1.0:
        idx = np.argsort(s, kind="stable")  # ascending
        p = softmax(s)[idx]
        cum = np.cumsum(p)
        if np.any(np.abs(cum[p > 0] - (1 - top_p)) < MARGIN):
            raise Ambiguous("top-p")
        remove = cum <= 1 - top_p
        remove[-1] = False
        s = s.copy()
        s[idx[remove]] = -np.inf
    if min_p > 0.0:
        p = softmax(s)
        ratio = p / p.max()
        if np.any((p > 0) & (np.abs(ratio - min_p) < MARGIN)):
            raise Ambiguous("min-p")
        s = np.where(p < min_p * p.max(), -np.inf, s)
    return softmax(s)


def fmt(xs):
    return " ".join("-inf" if x == -np.inf else "%.9g" % x for x in xs)


def make_case(rng, name):
    V = int(rng.choice([8, 50, 257, 1000]))
    while True:
        scale = float(rng.choice([0.5, 2.0, 5.0]))
        logits = (rng.standard_normal(V) * scale).astype(np.float32)
        T = float(rng.choice([0.0, 0.3, 0.7, 1.0, 1.5]))
        top_k = int(rng.choice([0, 0, 1, 3, 10, 40]))
        top_p = float(rng.choice([1.0, 1.0, 0.5, 0.8, 0.95]))
        min_p = float(rng.choice([0.0, 0.0, 0.02, 0.1, 0.3]))
        rep = float(rng.choice([1.0, 1.0, 1.1, 1.5, 0.8]))
        pres = float(rng.choice([0.0, 0.5, -0.5, 1.5]))
        freq = float(rng.choice([0.0, 0.3, -0.2, 1.0]))
        n_tok = int(rng.integers(0, 30))
        n_prompt = int(rng.integers(0, n_tok + 1))
        history = [int(t) for t in rng.integers(0, min(V, 20), n_tok)]
        bias = [(int(rng.integers(0, V)), float(np.float32(rng.uniform(-5, 5))))
                for _ in range(int(rng.integers(0, 4)))]
        mask = None
        if rng.random() < 0.3:
            mask = rng.random(V) < 0.7
            mask[int(rng.integers(0, V))] = True
        z = processed_logits(logits, history, n_prompt, bias, mask, rep, pres, freq)
        if T == 0.0:
            top = np.sort(z[np.isfinite(z)])[::-1]
            if len(top) > 1 and top[0] - top[1] < MARGIN:
                continue
        try:
            probs = final_distribution(z, T, top_k, top_p, min_p)
        except Ambiguous:
            continue
        lp = log_softmax(z)
        lines = [
            "case %s" % name,
            "vocab %d" % V,
            "params %.9g %d %.9g %.9g %.9g %.9g %.9g" % (T, top_k, top_p, min_p, rep, pres, freq),
            "logits " + fmt(logits),
            "history %d %d %s" % (n_tok, n_prompt, " ".join(map(str, history))),
            "bias %d %s" % (len(bias), " ".join("%d %.9g" % b for b in bias)),
            "mask %d %s" % (0 if mask is None else 1,
                            "" if mask is None else " ".join("1" if m else "0" for m in mask)),
            "probs " + fmt(probs),
            "logprobs " + fmt(lp),
        ]
        return "\n".join(lines) + "\n"


def main():
    rng = np.random.default_rng(SEED)
    n = 40
    with open(OUT, "w") as f:
        f.write("# generated by scripts/gen_goldens_sampler.py (numpy %s, python %s)\n"
                % (np.__version__, sys.version.split()[0]))
        f.write("cases %d\n" % n)
        for i in range(n):
            f.write(make_case(rng, "c%02d" % i))
    print("wrote", os.path.normpath(OUT))


if __name__ == "__main__":
    main()
