#!/usr/bin/env python3
# venv: v41
"""Image-preprocessing goldens for DeepSeek-V4.1 image input, from DeepSeek's own code.

    .venv-v41/bin/python scripts/gen_goldens_vision.py

1. Writes test images (fixed seed; several sizes, aspects, formats and pixel
   modes) to tests/data/golden/vision/images/.
2. Runs DeepInfer 0.1.0's image processor on each file, unchanged:
   ve/processor/image_processor.py decode_image (PIL open + convert("RGB")),
   compute_image_layout, ImageProcessorAnyRes._prepare_image (PIL
   ImageOps.contain / stretch resize), load_image_anyres (mm_token_type), and
   tilelang_ops/image_embed_ops.py rgb_pad_to_patches_ref (centre pad +
   normalisation to bf16), with the tiny_vl vision config. Records the layout,
   the decoded RGB and the resized RGB bytes, and the patch values.
3. A table of compute_image_layout over many (width, height) pairs for the
   tiny_vl config and for patch 14 / ratio 3 with other token limits.
4. deepseek-recipe 0.2.0's OpenCvImagePreprocessor + MultiModalData on the
   same files: its output size and token count, and DeepInfer's layout of
   that output (the two stages DeepSeek's serving chains).

Everything lands in tests/data/golden/vision/ with manifest.json naming the
oracle versions. The C tests read only these files.
"""

from __future__ import annotations

import io
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oracle_v41 import refs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "golden" / "vision"
SEED = 1919

# the tiny_vl checkpoint's vision_config (scripts/gen_tiny_v41.py TINY_VL)
TINY = dict(patch_size=14, downsample_ratio=2, max_image_tokens=50, min_pixels=3136, max_wh_ratio=4)


def smooth_image(rng: np.random.RandomState, w: int, h: int, c: int) -> np.ndarray:
    """Gradients + a few sinusoids + noise: resampling has something to average."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    out = np.zeros((h, w, c))
    for ch in range(c):
        fx, fy, ph = rng.uniform(0.02, 0.4), rng.uniform(0.02, 0.4), rng.uniform(0, 6.3)
        out[..., ch] = (127 + 80 * np.sin(fx * x + fy * y + ph) + 40 * (x / max(w - 1, 1)) - 30 * (y / max(h - 1, 1))
                        + rng.normal(0, 12, (h, w)))
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def write_images() -> list[dict]:
    from PIL import Image

    rng = np.random.RandomState(SEED)
    d = OUT / "images"
    d.mkdir(parents=True, exist_ok=True)
    specs = []

    def save(name: str, im: "Image.Image", fmt: str, **kw) -> None:
        b = io.BytesIO()
        im.save(b, format=fmt, **kw)
        (d / name).write_bytes(b.getvalue())
        specs.append(dict(file=name, format=fmt.lower(), mode=im.mode, width=im.width, height=im.height))

    # sizes: small (min_pixels upscale), within limits, over the token limit, wide / tall (max_wh_ratio
    # stretch), extreme aspect (1-pixel side), exact patch multiples
    sizes = [(40, 30), (56, 56), (17, 91), (130, 20), (300, 200), (97, 233), (1, 1), (400, 3), (3, 150), (112, 84)]
    for w, h in sizes:
        save(f"rgb_{w}x{h}.png", Image.fromarray(smooth_image(rng, w, h, 3), "RGB"), "PNG")
    a = smooth_image(rng, 45, 33, 4)
    save("rgba_45x33.png", Image.fromarray(a, "RGBA"), "PNG")
    save("la_29x41.png", Image.fromarray(smooth_image(rng, 29, 41, 2), "LA"), "PNG")
    save("gray_64x20.png", Image.fromarray(smooth_image(rng, 64, 20, 1)[..., 0], "L"), "PNG")
    save("palette_50x37.png", Image.fromarray(smooth_image(rng, 50, 37, 3), "RGB").quantize(colors=61), "PNG")
    g16 = (smooth_image(rng, 33, 27, 1)[..., 0].astype(np.uint16) * 257)
    save("gray16_33x27.png", Image.fromarray(g16), "PNG")
    save("interlaced_31x23.png", Image.fromarray(smooth_image(rng, 31, 23, 3), "RGB"), "PNG", interlace=1)
    for w, h, q in [(80, 60, 90), (123, 45, 75), (16, 16, 95)]:
        save(f"jpeg_{w}x{h}_q{q}.jpg", Image.fromarray(smooth_image(rng, w, h, 3), "RGB"), "JPEG", quality=q)
    save("jpeg_gray_40x52.jpg", Image.fromarray(smooth_image(rng, 40, 52, 1)[..., 0], "L"), "JPEG", quality=85)
    save("jpeg_444_60x40.jpg", Image.fromarray(smooth_image(rng, 60, 40, 3), "RGB"), "JPEG", quality=90,
         subsampling=0)
    save("webp_lossless_70x50.webp", Image.fromarray(smooth_image(rng, 70, 50, 3), "RGB"), "WEBP", lossless=True)
    save("webp_lossy_66x44.webp", Image.fromarray(smooth_image(rng, 66, 44, 3), "RGB"), "WEBP", quality=80)
    save("webp_alpha_38x38.webp", Image.fromarray(smooth_image(rng, 38, 38, 4), "RGBA"), "WEBP", lossless=True)
    return specs


def deepinfer_process(R, ip, data: bytes) -> dict:
    """DeepInfer's own processor on encoded bytes, with the tiny_vl config."""
    import torch
    from deepinfer.ve.processor.common import ImageInput

    img = ip.decode_image(data)
    proc = ip.ImageProcessorAnyRes(image_transform=ip.BasicImageTransform((0.5,) * 3, (0.5,) * 3),
                                   patch_size=TINY["patch_size"], downsample_ratio=TINY["downsample_ratio"],
                                   dtype=torch.bfloat16, max_n_token=TINY["max_image_tokens"],
                                   min_pixels=TINY["min_pixels"], max_wh_ratio=TINY["max_wh_ratio"])
    res = proc.process(ImageInput(width=img.width, height=img.height, binary=data))
    resized = res["images"][0].load().pixels  # (h, w, 3) uint8
    n_tokens = proc.estimate_num_tokens(ImageInput(width=img.width, height=img.height))
    crop = res["images_spatial_crop"][0].tolist()
    lay = ip.compute_image_layout(img.width, img.height, TINY["patch_size"], TINY["downsample_ratio"],
                                  TINY["max_image_tokens"], TINY["min_pixels"], TINY["max_wh_ratio"])
    # rgb_pad_to_patches_ref runs on any device; here CPU tensors
    eo = refs.load_by_path("_di_image_embed_ops", R.roots["deepinfer"] / "deepinfer" / "model_executor" / "layers"
                           / "tilelang_ops" / "image_embed_ops.py")
    raw = resized.reshape(-1)
    patches = eo.rgb_pad_to_patches_ref(raw, torch.tensor([0, raw.numel()]), torch.tensor([[resized.shape[1], resized.shape[0]]]),
                                        torch.tensor([crop]), torch.tensor([0, crop[0] * crop[1]]), crop[0] * crop[1],
                                        TINY["patch_size"], 0.5, 0.5, float(max(0, min(255, int(0.5 * 255)))))
    return dict(decoded=np.asarray(img), resized=resized.numpy(), layout=lay._asdict(), n_tokens=n_tokens,
                mm_token_type=res["mm_token_type"].tolist(), patches=patches.float().numpy(),
                stretch=bool(proc._is_stretched(img.width, img.height)))


def layout_table(ip) -> list[dict]:
    rng = np.random.RandomState(SEED + 1)
    pairs = [(1, 1), (1, 100000), (100000, 1), (14, 14), (27, 28), (4096, 4096), (13, 4000), (4000, 13), (5, 7)]
    pairs += [(int(rng.randint(1, 3000)), int(rng.randint(1, 3000))) for _ in range(150)]
    pairs += [(int(rng.randint(1, 60)), int(rng.randint(1, 2000))) for _ in range(40)]
    configs = [dict(TINY),
               dict(patch_size=14, downsample_ratio=3, max_image_tokens=1024, min_pixels=0, max_wh_ratio=None),
               dict(patch_size=14, downsample_ratio=3, max_image_tokens=4096, min_pixels=401408, max_wh_ratio=8),
               dict(patch_size=16, downsample_ratio=2, max_image_tokens=300, min_pixels=100, max_wh_ratio=2)]
    rows = []
    for ci, c in enumerate(configs):
        for w, h in pairs:
            lay = ip.compute_image_layout(w, h, c["patch_size"], c["downsample_ratio"], c["max_image_tokens"],
                                          c["min_pixels"], c["max_wh_ratio"])
            rows.append(dict(cfg=ci, w=w, h=h, **lay._asdict()))
    return configs, rows


def recipe_rows(files: list[dict], ip) -> list[dict]:
    import deepseek_recipe as dr
    from PIL import Image

    pp = dr.OpenCvImagePreprocessor()
    out = []
    for spec in files:
        data = (OUT / "images" / spec["file"]).read_bytes()
        for detail in ("high", "low"):
            row = dict(file=spec["file"], detail=detail)
            try:
                info = pp.preprocess(data, dr.PreprocessOptions(detail, 2048, 512))
                md = dr.MultiModalData([info])
                row.update(width=info.width, height=info.height, tokens=md.image_token_adjustment() + 1,
                           out_format=Image.open(io.BytesIO(info.data)).format.lower())
            except Exception as e:  # noqa: BLE001  (recorded: the recipe refuses some inputs)
                row.update(error=f"{type(e).__name__}: {e}")
            out.append(row)
    return out


def main() -> None:
    R = refs.setup()
    ip = refs.load_by_path("_di_image_processor", R.roots["deepinfer"] / "deepinfer" / "ve" / "processor" / "image_processor.py")
    OUT.mkdir(parents=True, exist_ok=True)
    files = [s for s in write_images() if s]
    pre = OUT / "pre"
    pre.mkdir(exist_ok=True)
    for old in pre.glob("*"):
        old.unlink()
    for spec in files:
        data = (OUT / "images" / spec["file"]).read_bytes()
        r = deepinfer_process(R, ip, data)
        stem = spec["file"].rsplit(".", 1)[0]
        r["decoded"].astype(np.uint8).tofile(pre / f"{stem}.decoded.u8")
        r["resized"].astype(np.uint8).tofile(pre / f"{stem}.resized.u8")
        r["patches"].astype(np.float32).tofile(pre / f"{stem}.patches.f32")
        spec.update(layout=r["layout"], n_tokens=r["n_tokens"], stretch=r["stretch"],
                    resized_w=int(r["resized"].shape[1]), resized_h=int(r["resized"].shape[0]),
                    mm_token_type=r["mm_token_type"], n_patches=int(r["patches"].shape[0]))
    configs, table = layout_table(ip)
    rec = recipe_rows(files, ip)
    for row in rec:
        if "width" in row:
            lay = ip.compute_image_layout(row["width"], row["height"], 14, 3, 1 << 30, 0, None)
            row["deepinfer_tokens_p14_r3"] = lay.num_tokens
    from importlib.metadata import version
    manifest = dict(
        oracle="DeepInfer 0.1.0 ve/processor/image_processor.py + tilelang_ops/image_embed_ops.py "
               "rgb_pad_to_patches_ref (PIL decode/resize); deepseek-recipe OpenCvImagePreprocessor",
        versions=dict(refs.versions(), pillow=version("pillow"), deepseek_recipe=version("deepseek-recipe")),
        seed=SEED, tiny=TINY, files=files, layout_configs=configs, layout=table, recipe=rec)
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"vision goldens: {len(files)} images, {len(table)} layouts, {len(rec)} recipe rows", file=sys.stderr)


if __name__ == "__main__":
    main()
