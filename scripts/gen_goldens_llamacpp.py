#!/usr/bin/env python3
# venv: llamacpp
"""Teacher-forced golden from llama.cpp (through PyPI llama-cpp-python) for
`deepinfer perplexity` on the same GGUF, the same quant and the same text.

Oracle: llama.cpp's own forward of the quantized GGUF (default CPU build of
llama-cpp-python, f16 KV cache like ours; weights in plain CPU buffers, see
plain_cpu_buffers). The scheme is exactly the one
documented in tools/cmd_perplexity.c (llama-perplexity's):
  - tokenize the whole text once: add_special per the model (llama-cpp-python
    add_bos=True means llama_tokenize(add_special=True)), special tokens not
    parsed;
  - non-overlapping windows of CTX tokens, a short tail dropped; when the model
    adds BOS, each window's first token is replaced by BOS;
  - each window evaluated alone from an empty KV cache with logits for every
    position (logits_all=True); logits at window position j predict token j+1;
    log-softmax in float64; argmax = lowest id among the maxima.
Every prediction j in [0, CTX-1) of every window is stored, so a test can
score any subset: the default scheme scores j >= CTX/2 ("half"), --score-all
every j ("all").

Writes tests/data/golden/llamacpp/<name>.json:
  manifest: oracle, llama-cpp-python version, llama.cpp system info, model
            and text (path relative to the repo root) with sha256, CTX, BOS;
  tokens:   the text's token ids as llama.cpp tokenized them;
  windows:  per window, argmax[j], logprob[j] (of the true next token) and
            margin[j] (top-1 minus top-2 logit) for j in [0, CTX-1);
  ppl:      llama.cpp's PPL for both scoring schemes over all windows and over
            the first TEST_CHUNKS windows (what tests/cli/perplexity.sh runs).

Usage: bash scripts/venv.sh llamacpp; .venv-llamacpp/bin/python scripts/gen_goldens_llamacpp.py
"""
import hashlib
import json
import math
import os
import sys
import time

import numpy as np
import llama_cpp
from llama_cpp import Llama

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_REL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
# Public text with a permissive licence (MIT), read from the shared data
# folder by a path relative to the repo root; ~5,200 tokens with SmolLM2.
TEXT_REL = "../shared/data/json-schema-test-suite/UPSTREAM_README.md"
NAME = "smollm2_q4_1_jsts_readme"
CTX = 512          # llama-perplexity's default window
TEST_CHUNKS = 4    # windows the ctest scores: 4 x 512 = 2,048 tokens
THREADS = 2
OUT = os.path.join(ROOT, "tests", "data", "golden", "llamacpp", NAME + ".json")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def ppl(windows, first, n_windows):
    nll = [-lp for w in windows[:n_windows] for lp in w["logprob"][first:]]
    return math.exp(sum(nll) / len(nll)), len(nll)


def plain_cpu_buffers():
    """Loads weights into plain CPU buffers (llama_model_params.use_extra_bufts
    = False): the AMX buffer type segfaults in ggml_backend_amx_mul_mat on this
    project's CPUs (ggml-org/llama.cpp#20824), and plain buffers (no AMX, no
    CPU_REPACK layouts) make the golden the same on every x86 machine.
    Llama() takes no such argument, so wrap the default-params function it calls."""
    import llama_cpp.llama_cpp as lc
    orig = lc.llama_model_default_params

    def params():
        p = orig()
        p.use_extra_bufts = False
        return p
    lc.llama_model_default_params = params


def main():
    plain_cpu_buffers()
    model = os.path.join(ROOT, MODEL_REL)
    text_path = os.path.normpath(os.path.join(ROOT, TEXT_REL))
    with open(text_path, "rb") as f:
        text = f.read()
    llm = Llama(model_path=model, n_ctx=CTX, n_batch=CTX, n_ubatch=CTX, n_threads=THREADS,
                n_threads_batch=THREADS, logits_all=True, verbose=False)
    tokens = llm.tokenize(text, add_bos=True, special=False)
    empty = llm.tokenize(b"", add_bos=True, special=False)
    bos = empty[0] if empty and tokens and tokens[0] == empty[0] else -1
    n_windows = len(tokens) // CTX
    if n_windows < TEST_CHUNKS:
        sys.exit(f"{TEXT_REL}: {len(tokens)} tokens, fewer than {TEST_CHUNKS} windows of {CTX}")
    windows = []
    t0 = time.time()
    for w in range(n_windows):
        toks = list(tokens[w * CTX:(w + 1) * CTX])
        if bos >= 0:
            toks[0] = bos
        llm.reset()
        llm.eval(toks)
        logits = np.array(llm.scores[:CTX], dtype=np.float64)  # (CTX, n_vocab)
        x = logits[:-1]
        mx = x.max(axis=1)
        lse = mx + np.log(np.exp(x - mx[:, None]).sum(axis=1))
        target = np.array(toks[1:])
        lp = x[np.arange(CTX - 1), target] - lse
        top2 = np.sort(x, axis=1)[:, -2:]
        windows.append({
            "argmax": [int(a) for a in x.argmax(axis=1)],
            "logprob": [round(float(v), 6) for v in lp],
            # top-1 minus top-2 logit: how decisive llama.cpp's argmax is
            "margin": [round(float(v), 4) for v in top2[:, 1] - top2[:, 0]],
        })
        print(f"window {w + 1}/{n_windows} ({time.time() - t0:.1f}s)", file=sys.stderr)
    half, n_half = ppl(windows, CTX // 2, n_windows)
    full, n_full = ppl(windows, 0, n_windows)
    half_t, n_half_t = ppl(windows, CTX // 2, TEST_CHUNKS)
    full_t, n_full_t = ppl(windows, 0, TEST_CHUNKS)
    out = {
        "manifest": {
            "oracle": "llama.cpp via PyPI llama-cpp-python (default CPU build), "
                      "Llama(logits_all=True).eval per window",
            "llama_cpp_python": llama_cpp.__version__,
            "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode().strip(),
            "generator": "scripts/gen_goldens_llamacpp.py",
            "model": MODEL_REL,
            "model_sha256": sha256(model),
            "text": TEXT_REL,
            "text_sha256": sha256(text_path),
            "ctx": CTX,
            "bos": bos,
            "n_tokens": len(tokens),
            "n_windows": n_windows,
            "test_chunks": TEST_CHUNKS,
            "n_threads": THREADS,
            "use_extra_bufts": False,
            "scheme": "non-overlapping windows of ctx tokens, each from an empty KV cache; "
                      "windows[w].argmax/logprob[j] is the prediction of token w*ctx+j+1 "
                      "from window positions 0..j; 'half' scores j >= ctx/2 "
                      "(llama-perplexity), 'all' scores every j",
        },
        "ppl": {
            "half": half, "half_scored": n_half,
            "all": full, "all_scored": n_full,
            "test_half": half_t, "test_half_scored": n_half_t,
            "test_all": full_t, "test_all_scored": n_full_t,
        },
        "tokens": [int(t) for t in tokens],
        "windows": windows,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {os.path.relpath(OUT, ROOT)}: PPL half {half:.4f} ({n_half}), all {full:.4f} "
          f"({n_full}); first {TEST_CHUNKS} windows: half {half_t:.4f}, all {full_t:.4f}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
