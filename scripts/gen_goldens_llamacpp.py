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

One golden per model of MODELS (the default SmolLM2 Q4_1, Gemma 3 270M
Q4_K_M, whose vocabulary of 262144 makes each window's logits 1 GiB in
float64: a window is scored in float32 slices, and Qwen2.5-Coder-0.5B-
Instruct Q4_K_M); argv names a subset.

Writes tests/data/golden/llamacpp/<name>.json:
  manifest: oracle, llama-cpp-python version, llama.cpp system info, model
            and text (path relative to the repo root) with sha256, CTX, BOS;
  tokens:   the text's token ids as llama.cpp tokenized them;
  windows:  per window, argmax[j], logprob[j] (of the true next token) and
            margin[j] (top-1 minus top-2 logit) for j in [0, CTX-1);
  ppl:      llama.cpp's PPL for both scoring schemes over all windows and over
            the first TEST_CHUNKS windows (what tests/cli/perplexity.sh runs).

Usage: bash scripts/venv.sh llamacpp
       .venv-llamacpp/bin/python scripts/gen_goldens_llamacpp.py [NAME...]
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
# Public text with a permissive licence (MIT), committed under tests/data/text
# (its README says what it is); ~5,200 tokens with SmolLM2.
TEXT_REL = "tests/data/text/json-schema-test-suite-README.md"
CTX = 512          # llama-perplexity's default window
THREADS = 2
# name -> (model, windows the ctest scores). Gemma's output projection
# (262144 x 640 per scored token) makes a window ~4x SmolLM2's: 2 windows.
MODELS = {
    "smollm2_q4_1_jsts_readme": ("models/SmolLM2-135M-Instruct.Q4_1.gguf", 4),
    "gemma3_270m_q4_k_m_jsts_readme": ("models/gemma-3-270m-q4_k_m.gguf", 2),
    # Qwen2.5-Coder-0.5B-Instruct (scripts/fetch-qwen.sh): 151936-row output
    "qwen25_coder_05b_q4_k_m_jsts_readme": ("models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", 2),
}
SLICE = 64         # logits rows converted to float64 at a time


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


def score_window(llm, toks):
    """argmax, log-prob of the next token and top-1/top-2 margin at window
    positions 0..CTX-2, in float64, SLICE rows at a time."""
    llm.reset()
    llm.eval(toks)
    scores = llm.scores  # (n_ctx, n_vocab) float32, llama-cpp-python's buffer
    argmax, lps, margins = [], [], []
    for r0 in range(0, CTX - 1, SLICE):
        r1 = min(r0 + SLICE, CTX - 1)
        x = np.array(scores[r0:r1], dtype=np.float64)
        mx = x.max(axis=1)
        lse = mx + np.log(np.exp(x - mx[:, None]).sum(axis=1))
        target = np.array(toks[r0 + 1:r1 + 1])
        lps += list(x[np.arange(r1 - r0), target] - lse)
        top2 = np.partition(x, -2, axis=1)[:, -2:]
        margins += list(np.abs(top2[:, 1] - top2[:, 0]))
        argmax += list(x.argmax(axis=1))
    return {
        "argmax": [int(a) for a in argmax],
        "logprob": [round(float(v), 6) for v in lps],
        # top-1 minus top-2 logit: how decisive llama.cpp's argmax is
        "margin": [round(float(v), 4) for v in margins],
    }


def main():
    plain_cpu_buffers()
    names = sys.argv[1:] or list(MODELS)
    for name in names:
        if name not in MODELS:
            sys.exit(f"unknown golden {name!r}: one of {', '.join(MODELS)}")
        make(name, *MODELS[name])


def make(name, model_rel, test_chunks):
    model = os.path.join(ROOT, model_rel)
    out_path = os.path.join(ROOT, "tests", "data", "golden", "llamacpp", name + ".json")
    text_path = os.path.join(ROOT, TEXT_REL)
    with open(text_path, "rb") as f:
        text = f.read()
    llm = Llama(model_path=model, n_ctx=CTX, n_batch=CTX, n_ubatch=CTX, n_threads=THREADS,
                n_threads_batch=THREADS, logits_all=True, verbose=False)
    tokens = llm.tokenize(text, add_bos=True, special=False)
    empty = llm.tokenize(b"", add_bos=True, special=False)
    bos = empty[0] if empty and tokens and tokens[0] == empty[0] else -1
    n_windows = len(tokens) // CTX
    if n_windows < test_chunks:
        sys.exit(f"{TEXT_REL}: {len(tokens)} tokens, fewer than {test_chunks} windows of {CTX}")
    windows = []
    t0 = time.time()
    for w in range(n_windows):
        toks = list(tokens[w * CTX:(w + 1) * CTX])
        if bos >= 0:
            toks[0] = bos
        windows.append(score_window(llm, toks))
        print(f"window {w + 1}/{n_windows} ({time.time() - t0:.1f}s)", file=sys.stderr)
    half, n_half = ppl(windows, CTX // 2, n_windows)
    full, n_full = ppl(windows, 0, n_windows)
    half_t, n_half_t = ppl(windows, CTX // 2, test_chunks)
    full_t, n_full_t = ppl(windows, 0, test_chunks)
    out = {
        "manifest": {
            "oracle": "llama.cpp via PyPI llama-cpp-python (default CPU build), "
                      "Llama(logits_all=True).eval per window",
            "llama_cpp_python": llama_cpp.__version__,
            "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode().strip(),
            "generator": "scripts/gen_goldens_llamacpp.py",
            "model": model_rel,
            "model_sha256": sha256(model),
            "text": TEXT_REL,
            "text_sha256": sha256(text_path),
            "ctx": CTX,
            "bos": bos,
            "n_tokens": len(tokens),
            "n_windows": n_windows,
            "test_chunks": test_chunks,
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
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {os.path.relpath(out_path, ROOT)}: PPL half {half:.4f} ({n_half}), all {full:.4f} "
          f"({n_full}); first {test_chunks} windows: half {half_t:.4f}, all {full_t:.4f}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
