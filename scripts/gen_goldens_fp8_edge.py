#!/usr/bin/env python3
# venv: deepseek
"""Golden for FP8 block-scaled weights whose sides are not multiples of the
block (partial edge blocks), as the DeepSeek-V4 linear layers read them.

transformers' FP8 dequantizer cannot produce such weights (it requires
whole blocks), so the oracle here is an independent numpy + ml_dtypes
computation:

  W   e4m3fn bytes [200, 300] (random, NaN codes excluded), block B = 128
      -> scale grid [2, 3] of e8m0 bytes; the last block row has 72 rows and
      the last block column 44 columns
  deq float32 [200, 300] = float32(e4m3fn(W)) * float32(e8m0(scale[r//B][c//B]))
      (one f32 multiply of two exactly converted values, ml_dtypes)
  x   float32 [5, 300] random
  y   float32 [5, 200] = x @ deq.T accumulated in float64, then rounded

Written in the DIGOLD format of scripts/gen_goldens_dtype.py (named u8/f32
arrays; tests/tensor/golden.h reads it) to
tests/data/golden/deepseek_v4/fp8_edge/fp8_edge.bin, with a MANIFEST.json
naming the oracle and versions. The test is tests/model/test_deepseek_v4_fp8_edge.c.

Usage: .venv-deepseek/bin/python scripts/gen_goldens_fp8_edge.py
"""
import hashlib
import json
import os

import ml_dtypes
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "golden", "deepseek_v4", "fp8_edge")
ROWS, COLS, BLOCK, N_X = 200, 300, 128, 5
SEED = 20260
MAGIC = b"DIGOLD\0\1"
KIND = {np.dtype(np.uint8): 1, np.dtype(np.float32): 2}


def blob_of(**arrays):
    blob = bytearray(MAGIC) + np.uint32(len(arrays)).tobytes()
    for key, arr in arrays.items():
        arr = np.ascontiguousarray(arr)
        kb = key.encode()
        assert len(kb) < 24
        blob += kb + b"\0" * (24 - len(kb))
        blob += np.array([KIND[arr.dtype], 0], dtype="<u4").tobytes()
        blob += np.uint64(arr.size).tobytes()
        blob += arr.astype(arr.dtype.newbyteorder("<")).tobytes()
    return bytes(blob)


def main():
    rng = np.random.default_rng(SEED)
    w = rng.integers(0, 256, size=(ROWS, COLS), dtype=np.uint8)
    w[(w & 0x7F) == 0x7F] = 0x7E  # no NaN codes: y must be finite
    sr, sc = -(-ROWS // BLOCK), -(-COLS // BLOCK)
    s = rng.integers(112, 132, size=(sr, sc), dtype=np.uint8)
    wf = w.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    sf = s.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    full = np.repeat(np.repeat(sf, BLOCK, axis=0), BLOCK, axis=1)[:ROWS, :COLS]
    deq = (wf * full).astype(np.float32)  # float32 * float32: one rounding
    x = rng.standard_normal((N_X, COLS)).astype(np.float32)
    y = (x.astype(np.float64) @ deq.astype(np.float64).T).astype(np.float32)
    dims = np.array([ROWS, COLS, BLOCK, N_X], dtype=np.float32)
    blob = blob_of(dims=dims, weight=w, scale=s, deq=deq, x=x, y=y)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "fp8_edge.bin"), "wb") as f:
        f.write(blob)
    manifest = {"script": "scripts/gen_goldens_fp8_edge.py",
                "oracle": "numpy + ml_dtypes (float8_e4m3fn, float8_e8m0fnu), float64 matmul",
                "versions": {"numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__},
                "files": {"fp8_edge.bin": {"bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}},
                "shape": {"rows": ROWS, "cols": COLS, "block": BLOCK, "x_rows": N_X}}
    with open(os.path.join(OUT, "MANIFEST.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(f"fp8_edge: {len(blob)} bytes")


if __name__ == "__main__":
    main()
