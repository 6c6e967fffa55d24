#!/usr/bin/env python3
"""TTFT of a one-image chat request through `deepinfer serve` (bench/results/vision.md).

    $(bash scripts/venv.sh test) bench/vision_ttft.py [--bin build/deepinfer] [--reps 7]

Starts the server on the tiny V4.1 vision checkpoint (tests/data/golden/deepseek_v41/tiny_vl),
streams chat requests with the official openai client and prints the median time to the
first content chunk for: a text-only prompt, each image with new text (the tower runs or the
encoded-image cache answers; text differs every time, so no prefix hit), and the same image
and text again (a prefix hit). Loopback only.
"""
import argparse
import base64
import re
import statistics
import subprocess
import time
from pathlib import Path

import openai

ROOT = Path(__file__).resolve().parents[1]
VL = ROOT / "tests/data/golden/deepseek_v41/tiny_vl"
IMAGES = ROOT / "tests/data/golden/vision/images"


def ttft(client, model, content):
    t0 = time.perf_counter()
    stream = client.chat.completions.create(model=model, max_tokens=4, temperature=0, stream=True,
                                            messages=[{"role": "user", "content": content}])
    first = None
    for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - t0
    return first if first is not None else time.perf_counter() - t0


def image_part(name):
    url = "data:image/png;base64," + base64.b64encode((IMAGES / name).read_bytes()).decode()
    return {"type": "image_url", "image_url": {"url": url}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "build/deepinfer"))
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--image-cache-mb", default=None, help="serve --image-cache-mb (0: off)")
    a = ap.parse_args()
    args = [a.bin, "serve", "-m", str(VL), "--port", "0", "-t", "2", "--max-body-bytes", str(4 << 20)]
    if a.image_cache_mb is not None:
        args += ["--image-cache-mb", a.image_cache_mb]
    srv = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        m = re.search(r"listening on http://[^:]+:(\d+)", srv.stdout.readline())
        if not m:
            raise SystemExit("server did not start")
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{m.group(1)}/v1", api_key="x")
        model = client.models.list().data[0].id
        ttft(client, model, "warm up")
        rows = []
        text = [ttft(client, model, f"Describe picture number {i} in a few words please.") for i in range(a.reps)]
        rows.append(("text only, similar length", statistics.median(text)))
        for name in ("rgb_40x30.png", "rgb_300x200.png"):
            new = [ttft(client, model, [image_part(name), {"type": "text", "text": f"What is in image {i}?"}])
                   for i in range(a.reps)]
            again = [ttft(client, model, [image_part(name), {"type": "text", "text": "What is in image 0?"}])
                     for _ in range(a.reps)]
            rows.append((f"{name}, new text each time", statistics.median(new)))
            rows.append((f"{name}, same text again (prefix hit)", statistics.median(again)))
        print(f"| request (median of {a.reps}) | TTFT ms |")
        print("|---|---|")
        for name, t in rows:
            print(f"| {name} | {t * 1e3:.1f} |")
    finally:
        srv.terminate()
        srv.wait(timeout=60)


if __name__ == "__main__":
    main()
