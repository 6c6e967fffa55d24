#!/usr/bin/env python3
# venv: v41
"""Goldens for SWA bounded replay on the tiny DeepSeek-V4.1 checkpoints.

    .venv-v41/bin/python scripts/gen_goldens_bounded_replay_v41.py

Oracle: scripts/oracle_v41 (DeepInfer 0.1.0 / tile-kernels reference functions)
with DeepInfer's YoCo "compact" prefill truncation (v4_modules/yoco.py,
decoder_layer.py, attn.py:_store_yoco_full_kv, the C++ yoco_swa_visibility rule
as docs/BOUNDED_REPLAY.md describes it): layers from n_prefill_layer on run only on the last `keep` prompt rows,
whose window starts at len(prompt) - keep; the source layer's compressed KV and
index keys still come from every row. Per case (checkpoint, numerics, keep):
the logits of every kept prompt row, then N_DECODE greedy decode steps (their
tokens and logits), and the same prompt's exact logits, so the bounded-vs-exact
error is the oracle's own. Writes tests/data/golden/deepseek_v41/bounded/
goldens.json + logits.f32.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oracle_v41 import refs  # noqa: E402
from oracle_v41.model import Model, State  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "tests" / "data" / "golden" / "deepseek_v41"
OUT = SRC / "bounded"
SEED = 16
PROMPT_LEN = 70          # > keep + window: the clipped prefix is long
KEEPS = {"tiny": [22, 16], "tiny_b": [14]}  # window + 6 (the default) and the window itself
N_DECODE = 6


def prompt(vocab: int) -> list[int]:
    rng = random.Random(SEED)
    return [0] + [rng.randrange(4, vocab) for _ in range(PROMPT_LEN - 1)]


def check_exact_unchanged(m: Model, name: str, mode: str) -> None:
    """The refactored oracle (store_compressed split out) still gives the committed
    exact goldens: case 3 of goldens.json bit for bit."""
    g = json.loads((SRC / name / "goldens.json").read_text())
    case = g["cases"][3]
    V = g["vocab_size"]
    want = np.fromfile(SRC / name / f"logits_{mode}.f32", dtype="<f4")
    want = want[case[f"offset_{mode}"]: case[f"offset_{mode}"] + case["n_positions"] * V]
    got = m.forward(case["prompt"], State()).float().numpy().ravel()
    assert np.array_equal(got, want), f"{name} {mode}: exact oracle changed ({np.abs(got - want).max()})"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    blobs, off, cases = [], 0, []
    for name, keeps in KEEPS.items():
        for mode in ("ideal", "deepinfer"):
            m = Model(SRC / name, mode)
            check_exact_unchanged(m, name, mode)
            V = m.cfg.vocab_size
            p = prompt(V)
            exact = m.forward(p, State()).float()
            for keep in keeps:
                st = State(replay_from=len(p) - keep)
                kept = m.forward(p, st).float()  # (keep, V): the rows past the boundary
                assert kept.shape[0] == keep, kept.shape
                rows = [kept]
                toks = []
                last = kept[-1]
                for _ in range(N_DECODE):
                    t = int(torch.argmax(last.double()))
                    toks.append(t)
                    last = m.forward([t], st, decode=True).float()[-1]
                    rows.append(last.unsqueeze(0))
                lg = torch.cat(rows)
                diff = (kept - exact[-keep:]).abs()
                cases.append({
                    "model": name, "numerics": mode, "keep": keep, "prompt": p, "replay_from": len(p) - keep,
                    "n_boundary_layer": m.n_prefill, "offset": off, "n_rows": int(lg.shape[0]),
                    "greedy": toks,
                    "vs_exact": {"last_row_max_abs": float(diff[-1].max()), "kept_rows_max_abs": float(diff.max()),
                                 "logit_max_abs": float(exact.abs().max()),
                                 "last_row_argmax_same": bool(int(kept[-1].argmax()) == int(exact[-1].argmax()))},
                })
                off += lg.numel()
                blobs.append(lg.numpy().astype("<f4").ravel())
                print(f"{name} {mode} keep {keep}: vs exact {cases[-1]['vs_exact']}", file=sys.stderr)
    np.concatenate(blobs).tofile(OUT / "logits.f32")
    g = {
        "oracle": "scripts/oracle_v41 with State(replay_from=len(prompt) - keep): DeepInfer's YoCo compact prefill",
        "script": "scripts/gen_goldens_bounded_replay_v41.py",
        "versions": refs.versions(),
        "seed": SEED,
        "logits_file": "logits.f32",
        "logits_layout": "float32 little-endian; case c: floats [offset, offset + n_rows*vocab) as (n_rows, vocab): "
                         "the keep kept prompt rows, then one row per greedy decode step (after feeding greedy[i])",
        "cases": cases,
    }
    (OUT / "goldens.json").write_text(json.dumps(g, indent=1) + "\n")


if __name__ == "__main__":
    main()
