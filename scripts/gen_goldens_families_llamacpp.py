#!/usr/bin/env python3
# venv: llamacpp
"""llama.cpp's own forward (PyPI llama-cpp-python 0.3.36, default CPU build,
weights in plain CPU buffers) on the quantized tiny checkpoints of
scripts/gen_tiny_families.py: per family and quantization, the prompt's
teacher-forced top-1 and its margin at every position, and a greedy
continuation (each step one more token through llama.cpp's KV cache) with
margins. tests/model/test_families.c compares our forward of the same files.

mistral_swa is left out: llama.cpp's llama graph ignores the sliding window
the file carries (gen_tiny_families.py), so past the window it computes
another model.

Writes tests/data/golden/families/<family>_llamacpp.json:
  manifest: oracle, versions, file sha256s;
  prompt:   the transformers golden's prompt ids;
  quants:   {q8_0|q4_0|q4_k_m: {argmax[t], margin[t], greedy[], greedy_margin[]}}.

Usage: bash scripts/venv.sh llamacpp
       .venv-llamacpp/bin/python scripts/gen_goldens_families_llamacpp.py [FAMILY...]
"""
import hashlib
import json
import os
import sys

import numpy as np
import llama_cpp
from llama_cpp import Llama

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAMILIES = ["qwen2", "qwen3", "qwen3moe", "mistral", "mixtral", "phi3"]
QUANTS = ["q8_0", "q4_0", "q4_k_m"]
GREEDY = 16
THREADS = 2
CTX = 256


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def plain_cpu_buffers():
    import llama_cpp.llama_cpp as lc
    orig = lc.llama_model_default_params

    def params():
        p = orig()
        p.use_extra_bufts = False
        return p
    lc.llama_model_default_params = params


def top2(row):
    order = np.argsort(-row, kind="stable")[:2]
    return int(order[0]), round(float(row[order[0]] - row[order[1]]), 5)


def main():
    plain_cpu_buffers()
    for fam in sys.argv[1:] or FAMILIES:
        gold = json.load(open(os.path.join(ROOT, "tests", "data", "golden", "families", fam + ".json")))
        prompt = gold["prompt"]
        out = {"manifest": {"oracle": "llama.cpp via PyPI llama-cpp-python (default CPU build), "
                                      "Llama(logits_all=True).eval, f16 KV cache",
                            "llama_cpp_python": llama_cpp.__version__,
                            "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode().strip(),
                            "generator": "scripts/gen_goldens_families_llamacpp.py", "files": {}},
               "prompt": prompt, "quants": {}}
        for q in QUANTS:
            rel = f"tests/data/families/{fam}-{q}.gguf"
            path = os.path.join(ROOT, rel)
            out["manifest"]["files"][q] = {"path": rel, "sha256": sha256(path)}
            # phi3: llama.cpp picks LongRoPE's long factors for a context
            # past the original one (256 in the tiny config; llama.cpp pads
            # n_ctx up to 256), transformers for a longer sequence (this one
            # is 40 tokens): at 256 both use the short ones
            llm = Llama(model_path=path, n_ctx=CTX, n_batch=CTX, n_ubatch=CTX, n_threads=THREADS,
                        n_threads_batch=THREADS, logits_all=True, verbose=False)
            llm.reset()
            llm.eval(prompt)
            rows = np.array(llm.scores[:len(prompt)], dtype=np.float64)
            am = [top2(r) for r in rows]
            (tok, m), greedy, margins = am[-1], [], []
            for _ in range(GREEDY):
                greedy.append(tok)
                margins.append(m)
                llm.eval([tok])
                tok, m = top2(np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64))
            out["quants"][q] = {"argmax": [a for a, _ in am], "margin": [m for _, m in am],
                                "greedy": greedy, "greedy_margin": margins}
            del llm
        path = os.path.join(ROOT, "tests", "data", "golden", "families", fam + "_llamacpp.json")
        with open(path, "w") as f:
            json.dump(out, f, separators=(",", ":"))
            f.write("\n")
        print(f"{fam}: {os.path.relpath(path, ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
