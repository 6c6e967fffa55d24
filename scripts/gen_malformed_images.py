#!/usr/bin/env python3
# venv: v41
"""Hostile image files for the decoder tests and the fuzz seed corpus.

    .venv-v41/bin/python scripts/gen_malformed_images.py

writes tests/data/malformed/image/*: truncated PNG / JPEG / WebP, wrong magic,
headers declaring huge sizes (valid CRCs), a deflate bomb, a CMYK JPEG, an
animated WebP, a PNG with a bad CRC. Each one must be refused by
di_image_decode with an error (tests/vision/test_image.c); none may crash.
The list of expected outcomes is in tests/data/malformed/image/README.md.
"""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "malformed" / "image"


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_header(w: int, h: int, depth: int = 8, ctype: int = 2) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 0))


def encode(im: Image.Image, fmt: str, **kw) -> bytes:
    b = io.BytesIO()
    im.save(b, format=fmt, **kw)
    return b.getvalue()


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.RandomState(7)
    img = Image.fromarray(rng.randint(0, 255, (40, 50, 3), dtype=np.uint8), "RGB")
    png, jpg, webp = encode(img, "PNG"), encode(img, "JPEG", quality=90), encode(img, "WEBP", quality=80)
    files = {
        "empty.bin": b"",
        "wrong_magic.bin": b"GIF89a" + png[6:200],
        "text.bin": b"not an image at all\n",
        "png_truncated_header.png": png[:20],
        "png_truncated_data.png": png[: len(png) // 2],
        "png_no_iend.png": png[:-12],
        "png_bad_crc.png": png[:40] + bytes([png[40] ^ 0xFF]) + png[41:],
        "png_huge_dims.png": png_header(100000, 100000) + png_chunk(b"IDAT", zlib.compress(b"\0" * 100))
        + png_chunk(b"IEND", b""),
        "png_zero_width.png": png_header(0, 10) + png_chunk(b"IEND", b""),
        # 20000 x 20000 RGB of zeros: a 1.2 GB image in a few hundred KB
        "png_bomb.png": png_header(20000, 20000) + png_chunk(b"IDAT", zlib.compress(b"\0" * (20000 * 3 + 1) * 64, 9))
        + png_chunk(b"IEND", b""),
        "png_bad_depth.png": png_header(10, 10, depth=3) + png_chunk(b"IEND", b""),
        "jpeg_truncated_header.jpg": jpg[:30],
        "jpeg_magic_only.jpg": b"\xff\xd8\xff",
        "jpeg_cmyk.jpg": encode(Image.fromarray(rng.randint(0, 255, (20, 20, 4), dtype=np.uint8), "CMYK"), "JPEG"),
        "webp_truncated.webp": webp[: len(webp) // 2],
        "webp_header_only.webp": webp[:12],
        "webp_animated.webp": encode(img, "WEBP", save_all=True,
                                     append_images=[img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)], duration=50),
    }
    # JPEG that claims 60000 x 60000 (SOF0 patched)
    j = bytearray(jpg)
    sof = j.find(b"\xff\xc0")
    struct.pack_into(">HH", j, sof + 5, 60000, 60000)
    files["jpeg_huge_dims.jpg"] = bytes(j)
    for name, data in files.items():
        (OUT / name).write_bytes(data)
    print(f"{len(files)} malformed images in {OUT}")


if __name__ == "__main__":
    main()
