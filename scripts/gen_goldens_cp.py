#!/usr/bin/env python3
# venv: v41
"""Golden zigzag splits for src/dist/cp.c (balanced context parallelism).

Oracle: DeepInfer 0.1.0's prepare_cp_mirror_ref (pure Python) from
model_executor/layers/tilelang_ops/prepare_cp_mirror.py. Its module imports
tilelang (GPU only), so the function is taken out of the file with ast and
run on its own. Cases: batches of sequence lengths (short ones that leave
padding, long ones) at cp 1, 2, 3, 4, 8; mirror_index of every rank and
the reverse index.

Needs Python 3.12 (no packages) and DeepInfer's sources:
  DEEPINFER_REF=PATH/deepinfer-0.1.0 python scripts/gen_goldens_cp.py
Writes tests/data/golden/cp/zigzag.json.
"""
import ast
import json
import os
import random
import sys
from itertools import accumulate

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
REF = os.environ.get("DEEPINFER_REF", "")  # an unpacked deepinfer-0.1.0 sdist (scripts/oracle_v41/refs.py)
SRC = os.path.join(REF, "deepinfer", "model_executor", "layers", "tilelang_ops", "prepare_cp_mirror.py")
OUT = os.path.join(ROOT, "tests", "data", "golden", "cp")


def load_ref():
    tree = ast.parse(open(SRC).read())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "prepare_cp_mirror_ref")
    ns = {"accumulate": accumulate}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), SRC, "exec"), ns)
    return ns["prepare_cp_mirror_ref"]


def main():
    ref = load_ref()
    rng = random.Random(29)
    batches = [[1], [3], [7, 1, 16], [80], [70, 45], [5, 9, 2, 33]]
    batches += [[rng.randint(1, 300) for _ in range(rng.randint(1, 6))] for _ in range(8)]
    cases = []
    for lens in batches:
        for cp in [1, 2, 3, 4, 8]:
            mirrors, rev = [], None
            for rank in range(cp):
                m, r, _, _ = ref(lens, lens, cp, rank, (4,))
                mirrors.append(m)
                rev = r
            cases.append({"seq_lens": lens, "cp": cp, "mirror": mirrors, "reverse": rev})
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "zigzag.json"), "w") as f:
        json.dump({"oracle": "DeepInfer 0.1.0 prepare_cp_mirror.py:prepare_cp_mirror_ref",
                   "script": "scripts/gen_goldens_cp.py", "python": sys.version.split()[0], "cases": cases},
                  f, separators=(",", ":"))
    print(f"wrote {len(cases)} cases to {OUT}/zigzag.json", file=sys.stderr)


if __name__ == "__main__":
    main()
