#!/usr/bin/env python3
"""A real model as an HF folder, and transformers' own forward on it: the
oracle for the HF-folder path on a model that is not random weights.

transformers reads the Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF that
`make model` fetches (its GGUF loader dequantizes every tensor; tokenizer
and chat template from the GGUF's metadata), the weights are rounded to
bf16 and the folder saved with save_pretrained (config.json,
model.safetensors in bf16, tokenizer.json, tokenizer_config.json) into the
git-ignored models/hf-qwen2.5-coder-0.5b-instruct/. The golden,
tests/data/golden/hf/qwen25_coder_05b_real.json, is transformers' float32
forward on exactly those bf16 values (widened), eager attention:

  text / text_ids   a text and the folder's tokenizer.json ids (HF tokenizers)
  prompt            the ids the forward runs
  top               per prompt position, the 32 largest logits (id, value)
  greedy            8 greedy tokens after the prompt, with the top-1 margin

tests/model/test_hf_real.c checks our forward on the folder against it
(skipped when the folder is absent). Needs torch, transformers 4.55.4 and
gguf (pip); about 2 minutes on 2 cores.

  python3 scripts/gen_hf_qwen_real.py
"""
import json
import os

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GGUF_DIR = os.path.join(ROOT, "models")
GGUF = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
OUT = os.path.join(ROOT, "models", "hf-qwen2.5-coder-0.5b-instruct")
GOLD = os.path.join(ROOT, "tests", "data", "golden", "hf", "qwen25_coder_05b_real.json")
TEXT = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n"
TOPK = 32
GREEDY = 8


def main():
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(GGUF_DIR, gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(GGUF_DIR, gguf_file=GGUF, torch_dtype=torch.float32)
    model = model.to(torch.bfloat16)
    model.config.torch_dtype = torch.bfloat16
    os.makedirs(OUT, exist_ok=True)
    model.save_pretrained(OUT, safe_serialization=True)
    tok.save_pretrained(OUT)
    # the oracle: float32 on the saved bf16 values
    model = AutoModelForCausalLM.from_pretrained(OUT, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
        top = []
        for row in logits:
            v, i = torch.topk(row, TOPK)
            top.append([[int(a), round(float(b), 5)] for a, b in zip(i, v)])
        seq, greedy, margin = list(ids), [], []
        for _ in range(GREEDY):
            row = model(torch.tensor([seq])).logits[0, -1]
            v, i = torch.topk(row, 2)
            greedy.append(int(i[0]))
            margin.append(round(float(v[0] - v[1]), 5))
            seq.append(int(i[0]))
    gold = {"manifest": {"oracle": f"transformers {transformers.__version__} Qwen2ForCausalLM float32 (eager) on "
                                   f"the bf16 values of its own GGUF dequantization, torch {torch.__version__}",
                         "gguf": GGUF, "folder": os.path.relpath(OUT, ROOT)},
            "vocab": int(logits.shape[-1]), "text": TEXT, "text_ids": ids, "prompt": ids, "top": top,
            "greedy": greedy, "greedy_margin": margin}
    with open(GOLD, "w") as f:
        json.dump(gold, f, separators=(",", ":"))
        f.write("\n")
    print(f"{OUT}\n{GOLD}: {len(ids)} positions, greedy {greedy}")


if __name__ == "__main__":
    main()
