#!/usr/bin/env python3
"""How far llama.cpp's logits are from the transformers goldens that
tests/model/test_llama.c checks ours against (the same top-k and probe
logits of every position of every case), to put the error of our int8
activation tables ("-q8") next to the peer that also quantizes activations
to 8 bits (Q8_0/Q8_1 blocks of 32).

  $(scripts/venv.sh llamacpp) bench/llamacpp_logit_error.py [--extra-bufts]

Prints one JSON object: max |diff|, max |diff|/(|x|+1) and the rms over the
checked logits. Ours, from test_llama's output on the same goldens: exact
tables max |diff| 7.1e-5; -q8 tables max |diff| 1.15."""
import argparse
import ctypes
import json
import math
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--golden", default=os.path.join(ROOT, "tests", "data", "golden", "llama", "smollm2_q4_1.json"))
    ap.add_argument("--extra-bufts", action="store_true", help="AMX/repack buffers (segfault on the dev VM)")
    a = ap.parse_args()
    import llama_cpp as L
    import numpy as np
    cb = L.llama_log_callback(lambda level, text, user: None)
    L.llama_log_set(cb, None)
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.use_extra_bufts = a.extra_bufts
    model = L.llama_model_load_from_file(a.model.encode(), mp)
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_threads, cp.n_threads_batch = 256, 64, 64, 1, 1
    ctx = L.llama_init_from_model(model, cp)
    V = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    g = json.load(open(a.golden))
    probe = g["probe_ids"]
    batch = L.llama_batch_init(64, 0, 1)
    max_abs = max_rel = ss = 0.0
    n = 0
    for c in g["cases"]:
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        toks = c["tokens"]
        for i, t in enumerate(toks):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = t, i, 1, 1
            batch.seq_id[i][0] = 0
        batch.n_tokens = len(toks)
        assert L.llama_decode(ctx, batch) == 0
        logits = np.ctypeslib.as_array(ctypes.cast(L.llama_get_logits(ctx), ctypes.POINTER(ctypes.c_float)),
                                       shape=(len(toks), V))
        for t, p in enumerate(c["positions"]):
            pairs = list(zip(p["top_ids"], p["top_logits"])) + list(zip(probe, p["probe_logits"]))
            for tid, want in pairs:
                d = abs(float(logits[t, tid]) - want)
                max_abs = max(max_abs, d)
                max_rel = max(max_rel, d / (abs(want) + 1))
                ss += d * d
                n += 1
    print(json.dumps({"peer": "llama.cpp (llama-cpp-python %s)" % getattr(L, "__version__", "?"),
                      "n_logits": n, "max_abs": max_abs, "max_rel": max_rel, "rms": math.sqrt(ss / n)}))
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)


if __name__ == "__main__":
    main()
