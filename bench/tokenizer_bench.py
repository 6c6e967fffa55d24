#!/usr/bin/env python3
"""Encode throughput of DeepInfer's tokenizer vs PyPI `tokenizers` (HF).

Builds a few MB of mixed text (English prose and markdown from the design
docs, C source, every tokenizer fixture string: multilingual, emoji,
whitespace runs, digits) and times, on one core, median of several runs,
tokenizer load excluded:
  whole:  one encode of the whole text (HF is very slow on one huge string),
  chunks: the text as ~4 KB documents cut at newlines: HF encode_batch with
          RAYON_NUM_THREADS=1 vs our encode per document - the fair one.
Both must produce the same ids (checked) for a ratio to mean anything.

  .venv/bin/python bench/tokenizer_bench.py [--mb 4] [--runs 5]
"""
import argparse
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.path.join(ROOT, "testdata")  # make testdata
BIN = os.path.join(ROOT, "build", "deepinfer")
CHUNK = 4096

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402


def corpus(mb):
    parts = []
    for pat in ["README.md", "docs/*.md"]:
        parts += [open(p, encoding="utf-8").read() for p in sorted(glob.glob(os.path.join(ROOT, pat)))]
    for p in sorted(glob.glob(os.path.join(ROOT, "src", "**", "*.c"), recursive=True)):
        parts.append(open(p, encoding="utf-8").read())
    for p in sorted(glob.glob(os.path.join(TESTDATA, "tokenizer", "**", "*.inp"), recursive=True)):
        parts.append(open(p, encoding="utf-8").read().replace("\n__ggml_vocab_test__\n", "\n"))
    base = "\n".join(parts)
    reps = max(1, int(mb * 1e6 / len(base.encode())) + 1)
    text = (base + "\n") * reps
    return text[: int(mb * 1e6)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=4)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    text = corpus(args.mb)
    nbytes = len(text.encode())
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as f:
        f.write(text)
        path = f.name
    cases = [("deepseek-v3", os.path.join(TESTDATA, "tokenizer", "deepseek-v3")),
             ("llama3", os.path.join(TESTDATA, "tokenizer", "llama3"))]
    print(f"text: {nbytes / 1e6:.2f} MB mixed; HF tokenizers {tokenizers.__version__}, 1 thread, "
          f"median of {args.runs}")
    for name, d in cases:
        hf = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        times = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            enc = hf.encode(text, add_special_tokens=False)
            times.append(time.perf_counter() - t0)
        hf_mbs = nbytes / statistics.median(times) / 1e6
        docs, off, raw = [], 0, text.encode()
        while off < len(raw):
            end = raw.find(b"\n", off + CHUNK)
            end = len(raw) if end < 0 or off + CHUNK >= len(raw) else end + 1
            docs.append(raw[off:end].decode())
            off = end
        ctimes = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            encs = hf.encode_batch(docs, add_special_tokens=False)
            ctimes.append(time.perf_counter() - t0)
        hf_chunk_mbs = nbytes / statistics.median(ctimes) / 1e6
        out2 = subprocess.run([BIN, "tokenize", "-m", d, "--parse-special", "--file", path, "--bench", str(args.runs),
                               "--chunk", str(CHUNK)], check=True, capture_output=True, text=True).stdout.split()
        ours_chunk_mbs = float(out2[out2.index("MB/s") + 1])
        chunk_tokens = int(out2[out2.index("tokens") + 1])
        hf_chunk_tokens = sum(len(e.ids) for e in encs)
        out = subprocess.run([BIN, "tokenize", "-m", d, "--parse-special", "--file", path, "--bench", str(args.runs)],
                             check=True, capture_output=True, text=True).stdout.split()
        ours_mbs = float(out[out.index("MB/s") + 1])
        ours_tokens = int(out[out.index("tokens") + 1])
        ids = subprocess.run([BIN, "tokenize", "-m", d, "--parse-special", "--file", path],
                             check=True, capture_output=True, text=True).stdout.split()
        same = [int(x) for x in ids] == enc.ids
        print(f"{name:12s} whole:  HF {hf_mbs:7.2f} MB/s  deepinfer {ours_mbs:7.2f} MB/s  "
              f"ratio {ours_mbs / hf_mbs:6.2f}x  tokens {ours_tokens} ids {'identical' if same else 'DIFFER'}")
        print(f"{name:12s} chunks: HF {hf_chunk_mbs:7.2f} MB/s  deepinfer {ours_chunk_mbs:7.2f} MB/s  "
              f"ratio {ours_chunk_mbs / hf_chunk_mbs:6.2f}x  tokens {chunk_tokens} vs HF {hf_chunk_tokens}")
        if not same or chunk_tokens != hf_chunk_tokens:
            sys.exit(1)
    os.unlink(path)


if __name__ == "__main__":
    main()
