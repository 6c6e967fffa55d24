#!/usr/bin/env python3
"""A V4.1-shaped synthetic vision tower for bench/bench_vision.c (not committed).

    .venv-v41/bin/python bench/gen_vision_bench.py OUT_DIR [--depth 2]

tiny_b's text part (scripts/gen_tiny_v41.py) with the real tower's block shape:
width 1024, 16 heads, SwiGLU 2816 (int(1024 * 2.7) to a multiple of 128), patch 14,
downsample 3, random bf16 weights. Every block of the real 32 costs the same, so
the bench runs `--depth` of them and scales; the projector (9216 -> 5120 -> 5120 in
the real model) is sized by tiny_b's hidden here and its cost is added from its
GEMM FLOPs in bench/results/vision.md.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import gen_tiny_v41 as g  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--depth", type=int, default=2)
    a = ap.parse_args()
    s = dict(g.TINY_VL, seed=4199, vision=dict(g.TINY_VL["vision"], hidden_size=1024, num_heads=16,
                                                downsample_ratio=3, max_image_tokens=16384, min_pixels=0,
                                                max_wh_ratio=None, depth=a.depth))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    R = g.refs.setup()
    tok = g.build_tokenizer(s["vocab_size"], (s["image_token"],))
    tok.save(str(out / "tokenizer.json"))
    cvocab = len(R.engram_metadata.CompressedVocabulary(str(out / "tokenizer.json")))
    (out / "config.json").write_text(json.dumps(g.make_config(s, cvocab), indent=1) + "\n")
    g.write_checkpoint(out, g.gen_weights(s, cvocab), 4)
    print(f"bench tower in {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
