#!/usr/bin/env python3
"""DeepSeek-V4.1-Flash CPU oracle built from DeepSeek's own reference functions.

    .venv-v41/bin/python scripts/oracle_v41.py --model DIR --prompt-ids "0 17 42" -n 8 \\
        --mode ideal|deepinfer [--decode] [--logits FILE] [--dump FILE] [--topk FILE]

Prints the greedy continuation (N ids, space separated) on its LAST stdout line and
the oracle's own tokens/s (prefill, decode) on stderr.

--decode     feed the prompt token by token with carried state (window ring, ratio-2
             pending token, compressed KV, index keys) instead of one prefill chunk
--logits F   float32 little-endian, (rows, vocab): every prompt position, then each
             generated step except the last (rows = len(prompt) + N - 1)
--dump F     float32 LE blobs + F.json index {name: {offset (floats), shape}}: per layer
             R_after_attn.L / R_after_ffn.L (n, hc_mult, hidden) = the mHC trunk after the
             sub-layer's output was folded in (post), and final_hidden (n, hidden) = the
             normed input of the LM head; n = prompt positions (prefill) then decode steps
--topk F     JSON {layer: {position: [compressed-entry indices, ascending, -1 fill]}}
             for every index-source layer, plus "ties" flags (k-th == k+1-th score)
Numerics of each mode: scripts/oracle_v41/NUMERICS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oracle_v41.model import Model, run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-ids", required=True)
    ap.add_argument("-n", type=int, default=8)
    ap.add_argument("--mode", choices=["ideal", "deepinfer"], default="ideal")
    ap.add_argument("--decode", action="store_true")
    ap.add_argument("--logits")
    ap.add_argument("--dump")
    ap.add_argument("--topk")
    a = ap.parse_args()
    prompt = [int(x) for x in a.prompt_ids.split()]
    model = Model(Path(a.model), a.mode)
    dump = {} if a.dump else None
    ids, logits, margins, st, tm = run(model, prompt, a.n, a.decode, dump)
    print(f"oracle_v41 {a.mode}: prefill {len(prompt)} tok in {tm['prefill_s']:.2f}s "
          f"({len(prompt) / max(tm['prefill_s'], 1e-9):.1f} tok/s), decode {max(a.n - 1, 0)} tok in {tm['decode_s']:.2f}s "
          f"({max(a.n - 1, 0) / max(tm['decode_s'], 1e-9):.2f} tok/s); min margin {min(margins) if margins else 0:.4g}",
          file=sys.stderr)
    if a.logits:
        logits.float().numpy().astype("<f4").tofile(a.logits)
    if a.dump:
        index, off, blobs = {}, 0, []
        for k, parts in dump.items():
            t = torch.cat(parts).float().numpy().astype("<f4")
            index[k] = {"offset": off, "shape": list(t.shape)}
            off += t.size
            blobs.append(t.ravel())
        np.concatenate(blobs).tofile(a.dump)
        Path(a.dump + ".json").write_text(json.dumps(index, indent=1) + "\n")
    if a.topk:
        Path(a.topk).write_text(json.dumps({"topk": {str(L): {str(p): v for p, v in d.items()} for L, d in st.topk.items()},
                                            "ties": {str(L): {str(p): v for p, v in d.items()} for L, d in st.ties.items()}}) + "\n")
    print(" ".join(map(str, ids)))


if __name__ == "__main__":
    main()
