#!/usr/bin/env python3
# venv: v41
"""Goldens for the tiny DeepSeek-V4.1-Flash checkpoints (scripts/gen_tiny_v41.py).

    .venv-v41/bin/python scripts/gen_goldens_deepseek_v41.py [--only tiny|tiny_b|tiny_ne]

Oracle: scripts/oracle_v41.py (DeepInfer 0.1.0 / tile-kernels 2.1.0 / deepinfer-gemm
2.8.2 reference functions). Writes into tests/data/golden/deepseek_v41/<name>/:
goldens.json, logits_ideal.f32, logits_deepinfer.f32 (format: ../README.md).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oracle_v41 import refs  # noqa: E402
from oracle_v41.model import Model, State, run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "golden" / "deepseek_v41"
SEED = 41
LENGTHS = [1, 5, 17, 40, 100, 600]
GREEDY = [1, 2]  # case indices (5 and 17 tokens) that also get 32-token greedy runs
N_GREEDY = 32
TOPK_CASES = [4, 5]  # 100 and 600 tokens
DECODE_CHECK_CASE = 3  # 40 tokens: crosses the window (16 / 8) and several ratio-2 blocks


def prompts(vocab: int) -> list[list[int]]:
    rng = random.Random(SEED)
    out = []
    for n in LENGTHS:
        ids = [0] + [rng.randrange(4, vocab) for _ in range(n - 1)]  # bos, then non-special ids
        out.append(ids[:n])
    return out


def engram_golden(m: Model) -> dict | None:
    if not m.engram_layers:
        return None  # tiny_ne: no Engram layer
    R = refs.setup()
    ng = m.ngram
    rng = random.Random(SEED + 1)
    cases = []
    V = m.cfg.vocab_size
    for n in (1, 4, 9):
        ids = [rng.randrange(0, V) for _ in range(n)]
        h = m.hashes(ids, list(range(n)))
        cases.append({"ids": ids, "ngram_ids": m.ngram_ids(ids, list(range(n))).tolist(),
                      "hashes": {str(L): h[i].tolist() for i, L in enumerate(m.engram_layers)}})
    return {
        "source": "v4m/engram_metadata.py: CompressedVocabulary, EngramLayout, NgramHashMapping; TK engram_hash_ref",
        "compressed_vocab_size": len(m.cvocab),
        "pad_compressed_id": int(m.comp[2]),
        "lookup": m.cvocab.lookup_table.tolist(),
        "layers": {str(L): {"multipliers": ng.ngram_multipliers[i].tolist(), "primes": ng.ngram_vocab_sizes[i].tolist(),
                            "offsets": ng.ngram_offsets[i].tolist()} for i, L in enumerate(m.engram_layers)},
        "hash_cases": cases,
    }


TRACE_CASE = 3  # the 40-token prompt


def write_trace(name: str) -> None:
    """trace_<mode>.f32 + goldens.json "trace_<mode>": every sublayer boundary of one
    prefill of case TRACE_CASE (the oracle's --dump points: xn_attn, attn_out,
    R_after_attn, xn_ffn, moe_out, R_after_ffn per layer), so a C port can
    teacher-force each sublayer with the oracle's own inputs and compare its
    output: in deepinfer mode that isolates rounding-boundary flips from the
    cascade an fp8-activation network turns them into."""
    d = OUT / name
    g = json.loads((d / "goldens.json").read_text())
    p = g["cases"][TRACE_CASE]["prompt"]
    for mode in ("ideal", "deepinfer"):
        m = Model(d, mode)
        dump: dict = {}
        m.forward(p, State(), dump=dump)
        blobs, index, off = [], {}, 0
        for k, v in dump.items():
            t = torch.cat(v).float().contiguous().numpy().astype("<f4").ravel()
            index[k] = {"offset": off, "n_rows": len(p), "row_floats": int(t.size // len(p))}
            off += t.size
            blobs.append(t)
        np.concatenate(blobs).tofile(d / f"trace_{mode}.f32")
        g[f"trace_{mode}"] = {"file": f"trace_{mode}.f32", "case": TRACE_CASE, "points": index}
    (d / "goldens.json").write_text(json.dumps(g, indent=1) + "\n")
    print(f"{name}: trace written", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only")
    ap.add_argument("--quick", action="store_true", help="skip the 600-token case (debugging)")
    ap.add_argument("--trace-only", action="store_true", help="only (re)write the sublayer traces")
    a = ap.parse_args()
    names = [a.only] if a.only else ["tiny", "tiny_b", "tiny_ne"]
    if a.trace_only:
        for name in names:
            write_trace(name)
        return
    for name in names:
        d = OUT / name
        t_start = time.perf_counter()
        models = {mode: Model(d, mode) for mode in ("ideal", "deepinfer")}
        V = models["ideal"].cfg.vocab_size
        P = prompts(V)
        if a.quick:
            P = P[:5]
        cases = [{"prompt": p, "n_positions": len(p)} for p in P]
        timing = {}
        checks = {}
        for mode, m in models.items():
            blobs, off = [], 0
            t0 = time.perf_counter()
            for i, p in enumerate(P):
                st = State()
                lg = m.forward(p, st).float()
                cases[i][f"offset_{mode}"] = off
                off += lg.numel()
                blobs.append(lg.numpy().astype("<f4").ravel())
                if mode == "ideal":
                    cases[i]["logit_max_abs"] = float(lg.abs().max())
                    if i in TOPK_CASES:
                        cases[i]["topk_ideal"] = {str(L): [v[q] for q in range(len(p))] for L, v in st.topk.items()}
                        cases[i]["topk_ideal_ties"] = {str(L): [i_ for i_ in range(len(p)) if st.ties[L][i_]]
                                                       for L in st.ties}
                if i == DECODE_CHECK_CASE:
                    st2 = State()
                    dec = torch.cat([m.forward([t], st2, decode=True) for t in p]).float()
                    checks[f"decode_vs_prefill_max_abs_{mode}"] = float((dec - lg).abs().max())
                    checks["decode_check_case"] = i
                    if mode == "ideal":
                        assert checks["decode_vs_prefill_max_abs_ideal"] < 1e-6, checks
            timing[f"prefill_all_cases_s_{mode}"] = round(time.perf_counter() - t0, 1)
            np.concatenate(blobs).tofile(d / f"logits_{mode}.f32")
            t0 = time.perf_counter()
            for i in GREEDY:
                ids, _, margins, _, tm = run(m, P[i], N_GREEDY)
                cases[i][f"greedy_{mode}"] = ids
                cases[i][f"greedy_{mode}_margins"] = [round(x, 6) for x in margins]
            timing[f"greedy_s_{mode}"] = round(time.perf_counter() - t0, 1)
        ideal = np.fromfile(d / "logits_ideal.f32", dtype="<f4")
        deep = np.fromfile(d / "logits_deepinfer.f32", dtype="<f4")
        checks["deepinfer_vs_ideal_max_abs"] = float(np.abs(ideal - deep).max())
        checks["deepinfer_vs_ideal_rms"] = float(np.sqrt(np.mean((ideal - deep) ** 2)))
        checks["argmax_agreement_deepinfer_vs_ideal"] = float(
            np.mean(ideal.reshape(-1, V).argmax(1) == deep.reshape(-1, V).argmax(1)))
        g = {
            "oracle": "scripts/oracle_v41.py (scripts/oracle_v41/, numerics in scripts/oracle_v41/NUMERICS.md)",
            "script": "scripts/gen_goldens_deepseek_v41.py",
            "checkpoint_script": "scripts/gen_tiny_v41.py",
            "versions": refs.versions(),
            "seed": SEED,
            "vocab_size": V,
            "logits_files": {"ideal": "logits_ideal.f32", "deepinfer": "logits_deepinfer.f32"},
            "logits_layout": "float32 little-endian; case c occupies floats [offset_<mode>, offset_<mode> + n_positions*vocab) "
                             "as (n_positions, vocab), one row per prompt position (prefill)",
            "logit_scale": {"max_abs": float(np.abs(ideal).max()), "std": float(ideal.std())},
            "checks": checks,
            "timing": timing,
            "cases": cases,
            "engram": engram_golden(models["ideal"]),
        }
        (d / "goldens.json").write_text(json.dumps(g, indent=1) + "\n")
        write_trace(name)
        print(f"{name}: {time.perf_counter() - t_start:.0f}s, checks {checks}", file=sys.stderr)


if __name__ == "__main__":
    main()
