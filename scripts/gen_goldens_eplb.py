#!/usr/bin/env python3
# venv: v41
"""Golden EPLB placements for src/dist/eplb.c.

Oracle: DeepInfer 0.1.0's model_executor/eplb/policy.py
(rebalance_experts_global: replication + greedy placement), pure PyTorch on
the CPU, loaded straight from its file (the deepinfer package itself imports
CUDA-only modules). Inputs are synthetic per-step, per-layer, per-expert
token counts (uniform, Zipf-skewed, one hot expert, a hot rank, sparse
steps) over the shapes EP runs with here and at scale, plus counts recorded
from the tiny DeepSeek-V4 checkpoint's own routing
(tests/data/golden/eplb/recorded.txt: one step per line, layers x experts
counts, written by
  scripts/mpirun.sh 2 build/mpi_ep_forward tests/data/golden/deepseek_v4/tiny_fp8 \
      --seqs 16 --decode 24 --record tests/data/golden/eplb/recorded.txt).

Needs Python 3.12 with torch and numpy (/path/to/python3.12 -m pip install
torch numpy; `scripts/venv.sh v41` builds that venv) and DeepInfer's sources:
  DEEPINFER_REF=PATH/deepinfer-0.1.0 python scripts/gen_goldens_eplb.py
Writes tests/data/golden/eplb/cases.json.
"""
import importlib.util
import json
import os
import sys

import numpy as np
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "data", "golden", "eplb")
REF = os.environ.get("DEEPINFER_REF", "")  # an unpacked deepinfer-0.1.0 sdist (scripts/oracle_v41/refs.py)
POLICY = os.path.join(REF, "deepinfer", "model_executor", "eplb", "policy.py")
SEED = 17


def load_policy():
    spec = importlib.util.spec_from_file_location("deepinfer_eplb_policy", POLICY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def synth(rng, kind, steps, layers, experts, ranks):
    if kind == "uniform":
        return rng.integers(0, 64, size=(steps, layers, experts))
    if kind == "zipf":
        w = 1.0 / np.arange(1, experts + 1) ** 1.1
        out = np.zeros((steps, layers, experts), dtype=np.int64)
        for l in range(layers):
            p = rng.permutation(w) / w.sum()
            for s in range(steps):
                out[s, l] = rng.multinomial(int(rng.integers(64, 512)), p)
        return out
    if kind == "hot_expert":
        out = rng.integers(0, 16, size=(steps, layers, experts))
        out[:, :, rng.integers(0, experts)] += 200
        return out
    if kind == "hot_rank":  # the first rank's experts get 3x (the forced-imbalance shape)
        out = rng.integers(0, 32, size=(steps, layers, experts))
        out[:, :, : experts // ranks] *= 3
        return out
    if kind == "sparse":
        out = rng.integers(0, 40, size=(steps, layers, experts))
        out[rng.random(out.shape) < 0.7] = 0
        return out
    raise ValueError(kind)


def main():
    pol = load_policy()
    rng = np.random.default_rng(SEED)
    shapes = [  # steps, layers, experts, ranks, redundant
        (4, 2, 8, 2, 0), (4, 2, 8, 2, 2), (8, 3, 8, 4, 0), (8, 3, 8, 4, 4),
        (16, 2, 16, 4, 4), (12, 2, 32, 8, 8), (6, 1, 64, 8, 8), (10, 2, 8, 1, 2),
        (3, 2, 256, 16, 16), (20, 2, 16, 2, 2),
    ]
    cases = []
    for kind in ["uniform", "zipf", "hot_expert", "hot_rank", "sparse"]:
        for steps, layers, experts, ranks, red in shapes:
            tpe = synth(rng, kind, steps, layers, experts, ranks)
            cases.append((kind, tpe, ranks, red))
    rec = os.path.join(OUT, "recorded.txt")
    if os.path.exists(rec):
        meta = None
        rows = []
        for line in open(rec):
            if line.startswith("#"):
                meta = dict(kv.split("=") for kv in line[1:].split())
                continue
            rows.append([int(x) for x in line.split()])
        L, E = int(meta["layers"]), int(meta["experts"])
        tpe = np.array(rows, dtype=np.int64).reshape(-1, L, E)
        for ranks, red in [(2, 0), (2, 2), (4, 0), (4, 4)]:
            cases.append(("recorded", tpe, ranks, red))
    out = []
    for kind, tpe, ranks, red in cases:
        steps, layers, experts = tpe.shape
        phys = experts + red
        local = phys // ranks
        t = torch.tensor(tpe, dtype=torch.int32)
        p2l, l2p, cnt = pol.rebalance_experts_global(t, phys, local)
        out.append({
            "kind": kind, "steps": steps, "layers": layers, "experts": experts, "ranks": ranks,
            "physical": phys, "local": local, "tokens": tpe.reshape(-1).tolist(),
            "physical_to_logical": p2l.reshape(-1).tolist(),
            "logical_to_physical": l2p.reshape(-1).tolist(),
            "logical_count": cnt.reshape(-1).tolist(),
        })
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump({
            "oracle": "DeepInfer 0.1.0 model_executor/eplb/policy.py rebalance_experts_global (CPU)",
            "script": "scripts/gen_goldens_eplb.py", "seed": SEED,
            "versions": {"python": sys.version.split()[0], "torch": torch.__version__, "numpy": np.__version__},
            "cases": out,
        }, f, separators=(",", ":"))
    print(f"wrote {len(out)} cases to {OUT}/cases.json", file=sys.stderr)


if __name__ == "__main__":
    main()
