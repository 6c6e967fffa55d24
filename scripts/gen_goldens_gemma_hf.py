#!/usr/bin/env python3
"""Golden logits for the Gemma 3 variant of the llama-family forward from
HF transformers' own Gemma 3 modeling (Gemma3ForCausalLM), run in float32
on the GGUF's weights dequantized by the `gguf` package: the exact-math
oracle that tests/model/test_gemma.c checks our exact ("f32 activation")
kernels against. (scripts/gen_goldens_gemma.py is the llama.cpp oracle,
whose int8 activation rounding allows only a loose bar.)

The model is built by hand rather than through from_pretrained(gguf_file=)
(the route scripts/gen_goldens_llama.py takes for SmolLM2) so that every
config value and name mapping is written down here; transformers 4.55's
own GGUF loader gives the same logits bit for bit (checked on the first
prompt and the 600-token one: max |diff| 0.0). The steps:
  - every tensor of models/gemma-3-270m-q4_k_m.gguf dequantized to float32
    with gguf.quants.dequantize (Q4_K, Q5_0, Q6_K, Q8_0, F32 ...);
  - names mapped to transformers' (blk.N.attn_q -> model.layers.N.self_attn.
    q_proj, ...); llama.cpp's converter stores every Gemma norm weight as
    (1 + w), Gemma3RMSNorm multiplies by (1 + w): 1 is subtracted back
    (exact in float32 for the values involved);
  - q/k rows left as they are: llama.cpp does not permute Gemma's (NEOX
    rope = transformers' rotate_half);
  - a text-only Gemma3TextConfig from the GGUF metadata (sizes, eps, rope
    base of the global layers, sliding window, softcapping when present);
    what a gemma3 GGUF does not carry is the published google/gemma-3-270m
    config value (rope_local_base_freq 10000, query_pre_attn_scalar =
    head_dim, sliding_window_pattern 6, gelu_pytorch_tanh), which is also
    what llama.cpp fixes for this architecture.
The forward is transformers' eager attention in float32 (no KV cache: the
whole sequence in one call), so it differs from ours only by float32
accumulation order and libm.

Token ids are read from the llama.cpp golden (tests/data/golden/gemma/
gemma3_270m_q4_k_m.json: llama.cpp's tokenization of the same prompts,
BOS first), so both goldens score the same sequences and this script needs
no tokenizer. Its probe ids are reused too. (scripts/make-goldens.sh runs
the generators in name order: gen_goldens_gemma.py first.)

Writes tests/data/golden/gemma/gemma3_270m_q4_k_m_hf.json:
  manifest: oracle and versions, model sha256, the config used;
  probe_ids: the llama.cpp golden's;
  cases[]:  token ids, per position the top-K logits, the logits at
            probe_ids, max and logsumexp of the full row; the greedy
            continuation (GREEDY_STEPS tokens, each recomputed over the whole
            prefix) with its top-1 / top-2 margins;
  long:     the llama.cpp golden's 600-token prompt (longer than the
            512-key window): its last LONG_TAIL positions.

Usage: bash scripts/venv.sh   (torch, transformers, gguf: requirements-tools.txt)
       nice -n 19 .venv/bin/python scripts/gen_goldens_gemma_hf.py
"""
import hashlib
import json
import os
import sys

import numpy as np
import torch
import transformers
import gguf
from gguf import GGUFReader
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_REL = "models/gemma-3-270m-q4_k_m.gguf"
LLAMACPP_GOLDEN = os.path.join(ROOT, "tests", "data", "golden", "gemma", "gemma3_270m_q4_k_m.json")
OUT = os.path.join(ROOT, "tests", "data", "golden", "gemma", "gemma3_270m_q4_k_m_hf.json")
TOP_K = 16
GREEDY_STEPS = 12
LONG_TAIL = 8
SEED = 1234
THREADS = 2
# What a gemma3 GGUF does not carry (published google/gemma-3-270m config;
# llama.cpp fixes the same values for the architecture).
ROPE_LOCAL_BASE = 10000.0
SLIDING_WINDOW_PATTERN = 6

LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.contents()
    return v


def hf_name(gguf_name):
    """transformers' parameter name for a GGUF tensor name, and whether it is
    a Gemma norm weight stored as (1 + w)."""
    base = gguf_name[:-len(".weight")] if gguf_name.endswith(".weight") else None
    if base is None:
        raise SystemExit(f"unexpected tensor {gguf_name}")
    if base == "token_embd":
        return "model.embed_tokens.weight", False
    if base == "output_norm":
        return "model.norm.weight", True
    parts = base.split(".")
    if len(parts) != 3 or parts[0] != "blk" or parts[2] not in LAYER_NAMES:
        raise SystemExit(f"unexpected tensor {gguf_name}")
    return f"model.layers.{int(parts[1])}.{LAYER_NAMES[parts[2]]}.weight", parts[2].endswith("norm")


def load(path):
    reader = GGUFReader(path)
    arch = field(reader, "general.architecture")
    if arch != "gemma3":
        raise SystemExit(f"{path}: architecture {arch!r}, want gemma3")

    def k(name, default=None):
        return field(reader, f"gemma3.{name}", default)

    n_layers = int(k("block_count"))
    head_dim = int(k("attention.key_length"))
    scale = k("attention.scale")
    tensors, dtypes = {}, {}
    for t in reader.tensors:
        name, is_norm = hf_name(t.name)
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(d) for d in reversed(t.shape)])
        if is_norm:
            w = w - np.float32(1.0)
        tensors[name] = torch.from_numpy(np.ascontiguousarray(w))
        dtypes[t.tensor_type.name] = dtypes.get(t.tensor_type.name, 0) + 1
    vocab = tensors["model.embed_tokens.weight"].shape[0]
    layer_types = ["sliding_attention" if (i + 1) % SLIDING_WINDOW_PATTERN else "full_attention"
                   for i in range(n_layers)]
    cfg = dict(
        vocab_size=vocab,
        hidden_size=int(k("embedding_length")),
        intermediate_size=int(k("feed_forward_length")),
        num_hidden_layers=n_layers,
        num_attention_heads=int(k("attention.head_count")),
        num_key_value_heads=int(k("attention.head_count_kv")),
        head_dim=head_dim,
        hidden_activation="gelu_pytorch_tanh",
        max_position_embeddings=int(k("context_length")),
        rms_norm_eps=float(k("attention.layer_norm_rms_epsilon")),
        rope_theta=float(k("rope.freq_base")),
        rope_local_base_freq=ROPE_LOCAL_BASE,
        rope_scaling=None,
        query_pre_attn_scalar=float(1.0 / (float(scale) ** 2)) if scale else head_dim,
        sliding_window=int(k("attention.sliding_window")),
        layer_types=layer_types,
        final_logit_softcapping=k("final_logit_softcapping"),
        attn_logit_softcapping=k("attn_logit_softcapping"),
        attention_bias=False,
        tie_word_embeddings="output.weight" not in [t.name for t in reader.tensors],
    )
    config = Gemma3TextConfig(**cfg, attn_implementation="eager", torch_dtype=torch.float32)
    model = Gemma3ForCausalLM(config).to(torch.float32)
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    missing = [m for m in missing if not (m == "lm_head.weight" and cfg["tie_word_embeddings"])]
    if missing or unexpected:
        raise SystemExit(f"state dict: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.eval()
    return model, cfg, dtypes


def row_record(row, probe):
    top = np.argsort(-row, kind="stable")[:TOP_K]
    mx = float(row.max())
    return {
        "top_ids": [int(i) for i in top],
        "top_logits": [round(float(row[i]), 6) for i in top],
        "probe_logits": [round(float(row[i]), 6) for i in probe],
        "max": round(mx, 6),
        "lse": round(float(mx + np.log(np.exp(row - mx).sum())), 6),
    }


def logits_of(model, ids):
    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=False).logits[0]
    return out.double().numpy()  # (T, vocab)


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(THREADS)
    path = os.path.join(ROOT, MODEL_REL)
    src = json.load(open(LLAMACPP_GOLDEN))
    if src["manifest"]["model_sha256"] != sha256(path):
        raise SystemExit(f"{MODEL_REL} is not the file the llama.cpp golden was made from")
    model, cfg, dtypes = load(path)
    probe = src["probe_ids"]
    cases = []
    for c in src["cases"]:
        ids = c["tokens"]
        logits = logits_of(model, ids)
        positions = [row_record(logits[t], probe) for t in range(len(ids))]
        seq = list(ids)
        greedy, margins = [], []
        for _ in range(GREEDY_STEPS):
            row = logits_of(model, seq)[-1]
            order = np.argsort(-row, kind="stable")[:2]
            greedy.append(int(order[0]))
            margins.append(round(float(row[order[0]] - row[order[1]]), 6))
            seq.append(int(order[0]))
        cases.append({"prompt": c["prompt"], "tokens": ids, "positions": positions, "greedy": greedy,
                      "greedy_margin": margins})
        agree = sum(a == b for a, b in zip(greedy, c["greedy"]))
        print(f"{len(ids):3d} tokens, greedy {greedy[:6]}... ({agree}/{GREEDY_STEPS} as llama.cpp)",
              file=sys.stderr)
    long_ids = src["long"]["tokens"]
    logits = logits_of(model, long_ids)
    long_case = {"tokens": long_ids, "tail": LONG_TAIL,
                 "positions": [row_record(logits[t], probe)
                               for t in range(len(long_ids) - LONG_TAIL, len(long_ids))]}
    doc = {
        "manifest": {
            "oracle": "transformers Gemma3ForCausalLM (eager attention, float32) on the GGUF's tensors "
                      "dequantized by gguf.quants.dequantize, norm weights minus 1",
            "generator": "scripts/gen_goldens_gemma_hf.py",
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "gguf": getattr(gguf, "__version__", None) or "see scripts/requirements-tools.txt",
            "numpy": np.__version__,
            "model": MODEL_REL,
            "model_sha256": src["manifest"]["model_sha256"],
            "tensor_dtypes": dtypes,
            "config": cfg,
            "tokens_from": os.path.relpath(LLAMACPP_GOLDEN, ROOT),
            "top_k": TOP_K,
            "greedy_steps": GREEDY_STEPS,
            "note": "logits of every prompt position; greedy recomputed over the whole prefix each step",
        },
        "vocab": cfg["vocab_size"],
        "probe_ids": probe,
        "cases": cases,
        "long": long_case,
    }
    with open(OUT, "w") as f:
        json.dump(doc, f, separators=(",", ":"), ensure_ascii=False)
        f.write("\n")
    print(f"wrote {os.path.relpath(OUT, ROOT)} ({os.path.getsize(OUT)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
