#!/usr/bin/env python3
"""Golden data for the dtype library (tests/tensor/test_dtype.c, test_quant.c).

Oracles (code we did not write):
  - gguf.quants (PyPI `gguf`): dequantization of every GGUF type it knows, and
    quantization where it has a quantizer (BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
    MXFP4);
  - numpy: f16 <-> f32 (astype);
  - ml_dtypes: float8_e4m3fn, float8_e8m0fnu, float4_e2m1fn element values,
    used for the e4m3 / e8m0 / e2m1 tables, the FP8 block-scaled layout and the
    HF split MXFP4 layout (whose nibble order -- element 2i in the low nibble --
    is transformers' convention, spelled out in src/tensor/mxfp4.h).
Q8_1 and Q8_K have no gguf dequantizer; their goldens use the format's
definition in numpy and are marked so in the manifest.

Every input comes from fixed seeds, so rerunning with the pinned packages
(scripts/requirements-tools.txt) reproduces the files byte for byte.

File format (little endian), read by tests/tensor/golden.h:
  8 bytes  magic b"DIGOLD\\0\\1"
  u32      number of arrays
  per array: 24-byte NUL-padded name, u32 element kind (1 = u8, 2 = f32,
             3 = i64), u32 zero, u64 element count, then the elements.
"""
import hashlib
import json
import os
import platform
import sys

import gguf
import ml_dtypes
import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "golden", "dtype")
SEED = 20260101
MAGIC = b"DIGOLD\0\1"
KIND = {np.dtype(np.uint8): 1, np.dtype(np.float32): 2, np.dtype(np.int64): 3}

manifest_files = {}


def write_golden(name, oracle, **arrays):
    blob = bytearray(MAGIC)
    blob += np.uint32(len(arrays)).tobytes()
    for key, arr in arrays.items():
        arr = np.ascontiguousarray(arr)
        if arr.dtype not in KIND:
            raise TypeError(f"{name}.{key}: dtype {arr.dtype}")
        kb = key.encode()
        assert len(kb) < 24
        blob += kb + b"\0" * (24 - len(kb))
        blob += np.array([KIND[arr.dtype], 0], dtype="<u4").tobytes()
        blob += np.uint64(arr.size).tobytes()
        blob += arr.astype(arr.dtype.newbyteorder("<")).tobytes()
    path = os.path.join(OUT, name + ".bin")
    with open(path, "wb") as f:
        f.write(blob)
    manifest_files[name + ".bin"] = {
        "oracle": oracle,
        "bytes": len(blob),
        "sha256": hashlib.sha256(blob).hexdigest(),
    }


def rng_for(name):
    # One stream per golden so adding a golden never changes the others.
    return np.random.default_rng([SEED, int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")])


def finite_f16(rng, n, lo=-8.0, hi=8.0):
    """Random finite f16 scales spread over magnitudes (2^lo .. 2^hi)."""
    mag = np.exp2(rng.uniform(lo, hi, size=n))
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return (mag * sign).astype(np.float16)


def random_blocks(rng, qtype, n_blocks, f16_fields):
    """Random bytes for n_blocks blocks with the f16 fields at the given byte
    offsets overwritten by finite values (random bytes there would give
    inf/NaN scales, which say nothing about the layout)."""
    _, type_size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for off in f16_fields:
        raw[:, off:off + 2] = finite_f16(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    return raw


def dequant_golden(name, qtype, n_blocks, f16_fields):
    rng = rng_for(name)
    raw = random_blocks(rng, qtype, n_blocks, f16_fields)
    out = quants.dequantize(raw.reshape(-1), qtype).astype(np.float32).reshape(-1)
    write_golden(name, f"gguf {gguf_version()} quants.dequantize", input=raw.reshape(-1), expected=out)


def gguf_version():
    from importlib.metadata import version
    return version("gguf")


def test_floats(rng, n_blocks, block):
    """Blocks of normal values with per-block scales over many magnitudes, plus
    the awkward blocks: all zero, constant, one outlier, all negative."""
    x = rng.standard_normal((n_blocks, block)).astype(np.float32)
    x *= np.exp2(rng.uniform(-10, 6, size=(n_blocks, 1))).astype(np.float32)
    x[0] = 0.0
    x[1] = 0.25
    x[2] = 0.0
    x[2, 5] = -3.0
    x[3] = -np.abs(x[3])
    x[4] = np.abs(x[4]) + 1.0
    return x.astype(np.float32)


def quant_golden(name, qtype, n_blocks):
    block, _ = gguf.GGML_QUANT_SIZES[qtype]
    x = test_floats(rng_for(name), n_blocks, block).reshape(-1)
    q = quants.quantize(x.reshape(1, -1), qtype).reshape(-1)
    write_golden(name, f"gguf {gguf_version()} quants.quantize", input=x, expected=q)


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        if f.endswith(".bin"):
            os.remove(os.path.join(OUT, f))

    # --- plain 16-bit floats: every bit pattern --------------------------------
    all16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    write_golden("dequant_f16", f"numpy {np.__version__} float16.astype(float32) (= gguf F16)",
                 input=all16.view(np.uint8),
                 expected=quants.dequantize(all16.view(np.uint8), T.F16).astype(np.float32))
    write_golden("dequant_bf16", f"gguf {gguf_version()} quants.dequantize BF16",
                 input=all16.view(np.uint8),
                 expected=quants.dequantize(all16.view(np.uint8), T.BF16).astype(np.float32))

    # f32 -> f16 / bf16 on values that hit every rounding path.
    rng = rng_for("quant_f16")
    specials = np.array([0.0, -0.0, 1.0, -1.0, 65504.0, 65519.99, 65520.0, -65520.0, 1e30, np.inf, -np.inf,
                         2.0**-14, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 2.0**-26, 1e-30, -2.0**-24 * 1.5,
                         2.0**-24 * 2.5, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, 2.0**-14 - 2.0**-25,
                         np.nan], dtype=np.float32)
    rnd = (rng.standard_normal(4000) * np.exp2(rng.uniform(-30, 18, 4000))).astype(np.float32)
    # Exact f16 midpoints: f16 value + half an ulp, in the normal and subnormal range.
    h = rng.integers(0, 0x7bff, size=1000).astype(np.uint16)
    lo = h.view(np.float16).astype(np.float32)
    hi = (h + 1).view(np.float16).astype(np.float32)
    mid = ((lo.astype(np.float64) + hi) / 2).astype(np.float32)
    x = np.concatenate([specials, rnd, mid, -mid])
    write_golden("quant_f16", f"numpy {np.__version__} float32.astype(float16)",
                 input=x, expected=x.astype(np.float16).view(np.uint8))
    xb = np.concatenate([specials, rnd, rng.integers(0, 2**32, 2000, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    xb = xb.astype(np.float32)
    write_golden("quant_bf16", f"gguf {gguf_version()} quants.quantize BF16",
                 input=xb, expected=quants.quantize(xb.reshape(1, -1), T.BF16).reshape(-1))

    # --- GGUF block types: random blocks through gguf's dequantizers -----------
    legacy_blocks, k_blocks = 64, 16
    dequant_golden("dequant_q4_0", T.Q4_0, legacy_blocks, [0])
    dequant_golden("dequant_q4_1", T.Q4_1, legacy_blocks, [0, 2])
    dequant_golden("dequant_q5_0", T.Q5_0, legacy_blocks, [0])
    dequant_golden("dequant_q5_1", T.Q5_1, legacy_blocks, [0, 2])
    dequant_golden("dequant_q8_0", T.Q8_0, legacy_blocks, [0])
    dequant_golden("dequant_q2_K", T.Q2_K, k_blocks, [80, 82])
    dequant_golden("dequant_q3_K", T.Q3_K, k_blocks, [108])
    dequant_golden("dequant_q4_K", T.Q4_K, k_blocks, [0, 2])
    dequant_golden("dequant_q5_K", T.Q5_K, k_blocks, [0, 2])
    dequant_golden("dequant_q6_K", T.Q6_K, k_blocks, [208])
    # MXFP4: every scale byte including 0, 1 (subnormal scales) and 254/255.
    rng = rng_for("dequant_mxfp4")
    raw = rng.integers(0, 256, size=(256, 17), dtype=np.uint8)
    raw[:, 0] = np.arange(256, dtype=np.uint8)
    write_golden("dequant_mxfp4", f"gguf {gguf_version()} quants.dequantize MXFP4",
                 input=raw.reshape(-1), expected=quants.dequantize(raw.reshape(-1), T.MXFP4).reshape(-1))

    # Q8_1 / Q8_K: gguf.quants has no dequantizer; the definition in numpy.
    rng = rng_for("dequant_q8_1")
    raw = rng.integers(0, 256, size=(legacy_blocks, 36), dtype=np.uint8)
    raw[:, 0:2] = finite_f16(rng, legacy_blocks).view(np.uint8).reshape(-1, 2)
    raw[:, 2:4] = finite_f16(rng, legacy_blocks).view(np.uint8).reshape(-1, 2)
    d = raw[:, 0:2].copy().view(np.float16).astype(np.float32)
    out = raw[:, 4:].view(np.int8).astype(np.float32) * d
    write_golden("dequant_q8_1", "numpy formula d * q (gguf.quants has no Q8_1 dequantizer)",
                 input=raw.reshape(-1), expected=out.reshape(-1))
    rng = rng_for("dequant_q8_K")
    raw = rng.integers(0, 256, size=(k_blocks, 292), dtype=np.uint8)
    raw[:, 0:4] = (rng.standard_normal(k_blocks) * 0.01).astype(np.float32).view(np.uint8).reshape(-1, 4)
    d = raw[:, 0:4].copy().view(np.float32)
    out = raw[:, 4:260].view(np.int8).astype(np.float32) * d
    write_golden("dequant_q8_K", "numpy formula d * q (gguf.quants has no Q8_K dequantizer)",
                 input=raw.reshape(-1), expected=out.reshape(-1))

    # --- quantizers gguf implements: byte-for-byte targets ---------------------
    for name, qt in [("q8_0", T.Q8_0), ("q4_0", T.Q4_0), ("q4_1", T.Q4_1), ("q5_0", T.Q5_0),
                     ("q5_1", T.Q5_1), ("mxfp4", T.MXFP4)]:
        quant_golden("quant_" + name, qt, 64)

    # --- FP8 / FP4 element formats (ml_dtypes) ---------------------------------
    all8 = np.arange(256, dtype=np.uint8)
    write_golden("dequant_f8_e4m3", f"ml_dtypes {ml_dtypes.__version__} float8_e4m3fn",
                 input=all8, expected=all8.view(ml_dtypes.float8_e4m3fn).astype(np.float32))
    write_golden("dequant_f8_e8m0", f"ml_dtypes {ml_dtypes.__version__} float8_e8m0fnu",
                 input=all8, expected=all8.view(ml_dtypes.float8_e8m0fnu).astype(np.float32))
    all4 = np.arange(16, dtype=np.uint8)
    write_golden("dequant_e2m1", f"ml_dtypes {ml_dtypes.__version__} float4_e2m1fn",
                 input=all4, expected=all4.view(ml_dtypes.float4_e2m1fn).astype(np.float32))
    # f32 -> e4m3 inside the non-saturating range (ml_dtypes turns overflow
    # into NaN where we saturate): random values, exact midpoints, subnormals.
    rng = rng_for("quant_f8_e4m3")
    e4_vals = all8.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    finite = np.sort(np.unique(e4_vals[np.isfinite(e4_vals) & (e4_vals >= 0)]))
    mids = ((finite[:-1].astype(np.float64) + finite[1:]) / 2).astype(np.float32)
    rnd = (rng.standard_normal(3000) * np.exp2(rng.uniform(-12, 8, 3000))).astype(np.float32)
    rnd = np.clip(rnd, -447.0, 447.0).astype(np.float32)
    x = np.concatenate([finite, -finite, mids, -mids, rnd, np.array([np.nan], np.float32)]).astype(np.float32)
    write_golden("quant_f8_e4m3", f"ml_dtypes {ml_dtypes.__version__} float32.astype(float8_e4m3fn)",
                 input=x, expected=x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8))

    # FP8 block-scaled weights: e4m3 [rows, cols] * scale[r // B, c // B].
    for name, rows, cols, block, scale_kind in [
            ("fp8_block_b32_f32", 40, 72, 32, "f32"),
            ("fp8_block_b32_e8m0", 40, 72, 32, "e8m0"),
            ("fp8_block_b128_e8m0", 136, 160, 128, "e8m0"),
            ("fp8_block_b128_bf16", 136, 160, 128, "bf16")]:
        rng = rng_for(name)
        w = rng.integers(0, 256, size=(rows, cols), dtype=np.uint8)
        sr, sc = -(-rows // block), -(-cols // block)
        if scale_kind == "f32":
            s = (rng.standard_normal((sr, sc)) * 0.01).astype(np.float32)
            s_bytes, s_f32 = s.view(np.uint8), s
        elif scale_kind == "bf16":
            s = (rng.standard_normal((sr, sc)) * 0.01).astype(ml_dtypes.bfloat16)
            s_bytes, s_f32 = s.view(np.uint8), s.astype(np.float32)
        else:
            s = rng.integers(100, 140, size=(sr, sc), dtype=np.uint8)
            s_bytes, s_f32 = s, s.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
        full = np.repeat(np.repeat(s_f32, block, axis=0), block, axis=1)[:rows, :cols]
        out = w.view(ml_dtypes.float8_e4m3fn).astype(np.float32) * full
        write_golden(name, f"ml_dtypes {ml_dtypes.__version__} float8_e4m3fn * scale (f32 multiply)",
                     shape=np.array([rows, cols, block], np.int64), weight=w.reshape(-1),
                     scale=s_bytes.reshape(-1), expected=out.astype(np.float32).reshape(-1))

    # HF split MXFP4: blocks [rows, cols/2], scales [rows, cols/32].
    rng = rng_for("mxfp4_split")
    rows, cols = 6, 96
    blocks = rng.integers(0, 256, size=(rows, cols // 2), dtype=np.uint8)
    scales = rng.integers(100, 150, size=(rows, cols // 32), dtype=np.uint8)
    scales[0, 0], scales[1, 1], scales[2, 2] = 0, 254, 255  # 2^-127, 2^127, NaN
    codes = np.empty((rows, cols), np.uint8)
    codes[:, 0::2] = blocks & 0x0F
    codes[:, 1::2] = blocks >> 4
    vals = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    sf = np.repeat(scales.view(ml_dtypes.float8_e8m0fnu).astype(np.float32), 32, axis=1)
    write_golden("mxfp4_split", f"ml_dtypes {ml_dtypes.__version__} float4_e2m1fn * float8_e8m0fnu, "
                 "element 2i = low nibble (transformers convention)",
                 shape=np.array([rows, cols], np.int64), blocks=blocks.reshape(-1),
                 scales=scales.reshape(-1), expected=(vals * sf).astype(np.float32).reshape(-1))

    manifest = {
        "generator": "scripts/gen_goldens_dtype.py",
        "seed": SEED,
        "python": platform.python_version(),
        "packages": {"numpy": np.__version__, "gguf": gguf_version(), "ml_dtypes": ml_dtypes.__version__},
        "files": manifest_files,
    }
    with open(os.path.join(OUT, "MANIFEST.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    total = sum(v["bytes"] for v in manifest_files.values())
    print(f"gen_goldens_dtype: {len(manifest_files)} files, {total} bytes in {OUT}", file=sys.stderr)


if __name__ == "__main__":
    # Some goldens overflow to inf / NaN on purpose (huge MXFP4 scales, f16
    # overflow); numpy's warnings about that are expected.
    with np.errstate(over="ignore", invalid="ignore"):
        main()
