#!/usr/bin/env python3
# venv: llamacpp
"""Goldens for the qwen2 variant of the llama-family forward on a real
model, from llama.cpp (PyPI llama-cpp-python 0.3.36, default CPU build)
running the same GGUF: Qwen2.5-Coder-0.5B-Instruct Q4_K_M
(models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf, scripts/fetch-qwen.sh).

llama.cpp's qwen2 graph: q/k/v projections with biases, NEOX RoPE (base
1e6), GQA 14/2, SwiGLU, separate output matrix. Its CPU matmuls quantize
activations (Q8_0 / Q8_K), so its logits differ from an exact float32
forward by that rounding; tests/model/test_qwen.c states the bars.

Writes tests/data/golden/qwen/qwen25_coder_05b_q4_k_m.json:
  manifest: oracle, versions, model sha256;
  probe_ids: a fixed random sample of vocab ids;
  cases[]:  prompt text, llama.cpp's token ids (no BOS: the file says
            add_bos_token false; specials parsed only in the chat prompt),
            per position the top-K logits, the logits at probe_ids and the
            row's max / logsumexp; greedy continuation (GREEDY_STEPS
            tokens, each recomputed over the whole prefix) with margins;
  tokenizer[]: corpus strings with llama.cpp's ids, with and without
            special-token parsing.
(Perplexity / teacher-forced top-1 over a long text: scripts/
gen_goldens_llamacpp.py, tests/cli/perplexity.sh.)

Usage: bash scripts/venv.sh llamacpp
       .venv-llamacpp/bin/python scripts/gen_goldens_qwen.py
"""
import hashlib
import json
import os
import sys

import numpy as np
import llama_cpp
from llama_cpp import Llama

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_REL = "models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
OUT = os.path.join(ROOT, "tests", "data", "golden", "qwen", "qwen25_coder_05b_q4_k_m.json")
TOP_K = 16
N_PROBE = 64
GREEDY_STEPS = 12
SEED = 2025
THREADS = 2
CTX = 512

PROMPTS = [
    "def fibonacci(n):\n    ",
    "The capital of France is",
    "// quicksort in C\nvoid quicksort(int *a, int n) {",
    "SELECT name, COUNT(*) FROM users",
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nWrite a Python function that reverses a string.<|im_end|>\n<|im_start|>assistant\n",
]
# Specials are parsed only in the chat-shaped prompt (as the engine does
# after its template); elsewhere they are plain text.
PARSE_SPECIAL = [False, False, False, False, True]

TOKENIZER_CORPUS = [
    "Hello world",
    " Hello  world   with   spaces ",
    "\n\nTwo newlines\n\n\nthree\t\ttabs",
    "naïve café résumé – “quotes” …",
    "日本語のテキストと中文文本",
    "emoji 🎉🚀 and symbols ©®™ €100",
    "def f(x):\n    return x ** 2  # square\n",
    "{\"key\": [1, 2.5e-3, null, true]}",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|> and <|fim_prefix|> as text",
    "numbers 1234567 3.14159 0x1F 1e-9",
    "    indented\n        more\n",
    "ALL CAPS and MiXeD cAsE I'm you're they'll",
    "Ünïcödé ẞ ǅ ﬁ ½ ²",
    "",
    " ",
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def plain_cpu_buffers():
    """Weights in plain CPU buffers (use_extra_bufts = False), as
    scripts/gen_goldens_llamacpp.py: the AMX buffer type crashes on some of
    this project's CPUs and plain buffers make the golden the same on every x86."""
    import llama_cpp.llama_cpp as lc
    orig = lc.llama_model_default_params

    def params():
        p = orig()
        p.use_extra_bufts = False
        return p
    lc.llama_model_default_params = params


def row_record(row, probe):
    top = np.argsort(-row, kind="stable")[:TOP_K]
    mx = float(row.max())
    return {
        "top_ids": [int(i) for i in top],
        "top_logits": [round(float(row[i]), 5) for i in top],
        "probe_logits": [round(float(row[i]), 5) for i in probe],
        "max": round(mx, 5),
        "lse": round(float(mx + np.log(np.exp(row - mx).sum())), 5),
    }


def run(llm, ids):
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[:len(ids)], dtype=np.float64)


def main():
    plain_cpu_buffers()
    model = os.path.join(ROOT, MODEL_REL)
    llm = Llama(model_path=model, n_ctx=CTX, n_batch=CTX, n_ubatch=CTX, n_threads=THREADS,
                n_threads_batch=THREADS, logits_all=True, verbose=False)
    vocab = llm.n_vocab()
    rng = np.random.default_rng(SEED)
    probe = sorted(int(i) for i in rng.choice(vocab, size=N_PROBE, replace=False))
    cases = []
    for text, special in zip(PROMPTS, PARSE_SPECIAL):
        ids = llm.tokenize(text.encode(), add_bos=True, special=special)
        logits = run(llm, ids)
        positions = [row_record(logits[t], probe) for t in range(len(ids))]
        seq = list(ids)
        greedy, margins = [], []
        for _ in range(GREEDY_STEPS):
            row = run(llm, seq)[-1]
            order = np.argsort(-row, kind="stable")[:2]
            greedy.append(int(order[0]))
            margins.append(round(float(row[order[0]] - row[order[1]]), 5))
            seq.append(int(order[0]))
        cases.append({"prompt": text, "parse_special": special, "tokens": [int(i) for i in ids],
                      "positions": positions, "greedy": greedy, "greedy_margin": margins})
        print(f"{len(ids):3d} tokens, greedy: {llm.detokenize(greedy)!r}", file=sys.stderr)

    corpus = []
    for text in TOKENIZER_CORPUS:
        b = text.encode()
        corpus.append({"text": text,
                       "ids": [int(i) for i in llm.tokenize(b, add_bos=False, special=False)],
                       "ids_special": [int(i) for i in llm.tokenize(b, add_bos=False, special=True)]})

    doc = {
        "manifest": {
            "oracle": "llama.cpp via PyPI llama-cpp-python (default CPU build), Llama(logits_all=True).eval",
            "llama_cpp_python": llama_cpp.__version__,
            "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode().strip(),
            "generator": "scripts/gen_goldens_qwen.py",
            "model": MODEL_REL,
            "model_sha256": sha256(model),
            "top_k": TOP_K,
            "greedy_steps": GREEDY_STEPS,
            "n_threads": THREADS,
            "use_extra_bufts": False,
            "note": "logits of every prompt position (f16 KV cache, llama.cpp's default); greedy "
                    "recomputed over the whole prefix each step; add_bos=True adds none (the file's "
                    "add_bos_token is false)",
        },
        "vocab": vocab,
        "probe_ids": probe,
        "cases": cases,
        "tokenizer": corpus,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(doc, f, separators=(",", ":"), ensure_ascii=False)
        f.write("\n")
    print(f"wrote {os.path.relpath(OUT, ROOT)} ({os.path.getsize(OUT)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
