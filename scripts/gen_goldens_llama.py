#!/usr/bin/env python3
"""Golden logits for the llama-family forward, from an oracle we did not write.

Oracle: HF transformers loading the default GGUF with `gguf_file=` (it
dequantizes every tensor to float32 with the `gguf` package and undoes the
q/k row permutation of llama GGUFs, then runs modeling_llama in float32).
Our C forward reads the same quantized file, so the two differ only by
float32 accumulation order (and an FMA in our dequantizer).

Writes tests/data/golden/llama/smollm2_q4_1.json:
  manifest: oracle names and versions, model sha256, what was stored;
  probe_ids: a fixed random sample of vocab ids (same for every position);
  cases[]: prompt text, token ids, and for each position the top-K logits,
           the logits at probe_ids, and full-vocab sum / sum of squares / max;
           plus the greedy continuation (GREEDY_STEPS tokens, each recomputed
           from scratch over the whole prefix) with the top-1 vs top-2 margin
           at each step, so the test can tell a real mismatch from a near tie.

Usage: .venv/bin/python scripts/gen_goldens_llama.py [model.gguf]
(`bash scripts/venv.sh` makes the venv; torch and transformers are in
scripts/requirements-tools.txt.)
"""
import hashlib
import json
import os
import sys

import numpy as np
import torch
import transformers
import gguf
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
OUT = os.path.join(ROOT, "tests", "data", "golden", "llama", "smollm2_q4_1.json")

TOP_K = 20
N_PROBE = 64
GREEDY_STEPS = 16
SEED = 1234

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Once upon a time, in a small village by the sea,",
    "1, 2, 3, 4, 5,",
    "<|im_start|>user\nWhat is the boiling point of water?<|im_end|>\n<|im_start|>assistant\n",
    "Photosynthesis converts light energy into",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "Q: Why is the sky blue?\nA:",
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    d, name = os.path.dirname(MODEL), os.path.basename(MODEL)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, torch_dtype=torch.float32)
    model.eval()
    vocab = model.config.vocab_size
    rng = np.random.default_rng(SEED)
    probe = sorted(int(i) for i in rng.choice(vocab, size=N_PROBE, replace=False))

    cases = []
    with torch.no_grad():
        for text in PROMPTS:
            ids = tok(text, add_special_tokens=False)["input_ids"]
            logits = model(torch.tensor([ids])).logits[0].double().numpy()  # (T, vocab)
            positions = []
            for t in range(len(ids)):
                row = logits[t]
                top = np.argsort(-row, kind="stable")[:TOP_K]
                positions.append({
                    "top_ids": [int(i) for i in top],
                    "top_logits": [float(row[i]) for i in top],
                    "probe_logits": [float(row[i]) for i in probe],
                    "sum": float(row.sum()),
                    "sumsq": float((row * row).sum()),
                    "max": float(row.max()),
                })
            seq = list(ids)
            greedy, margins = [], []
            for _ in range(GREEDY_STEPS):
                row = model(torch.tensor([seq])).logits[0, -1].double().numpy()
                order = np.argsort(-row, kind="stable")[:2]
                greedy.append(int(order[0]))
                margins.append(float(row[order[0]] - row[order[1]]))
                seq.append(int(order[0]))
            cases.append({"prompt": text, "tokens": ids, "positions": positions,
                          "greedy": greedy, "greedy_margin": margins})
            print(f"{len(ids):3d} tokens, greedy: {tok.decode(greedy)!r}", file=sys.stderr)

    doc = {
        "manifest": {
            "oracle": "transformers AutoModelForCausalLM.from_pretrained(gguf_file=...), float32",
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "gguf": getattr(gguf, "__version__", "0.17.1"),
            "numpy": np.__version__,
            "model": name,
            "model_sha256": sha256(MODEL),
            "top_k": TOP_K,
            "greedy_steps": GREEDY_STEPS,
            "note": "logits of every prompt position; greedy recomputed over the full prefix each step",
        },
        "vocab": vocab,
        "probe_ids": probe,
        "cases": cases,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
