#!/usr/bin/env python3
"""Tiny random-weight checkpoints of the llama-family variants, made by HF
transformers, converted to GGUF by llama.cpp's own convert_hf_to_gguf.py and
quantized by llama.cpp's own llama-quantize; plus the transformers golden
(float32 logits) every file's exact forward is checked against
(tests/model/test_families.c).

Families (transformers 4.55 class -> GGUF architecture):
  qwen2     Qwen2ForCausalLM      qwen2     q/k/v biases, NEOX RoPE
  qwen3     Qwen3ForCausalLM      qwen3     per-head q/k RMSNorm
  qwen3moe  Qwen3MoeForCausalLM   qwen3moe  8 experts, top 2, normalized
  mistral   MistralForCausalLM    llama     (GQA; no window: see below)
  mixtral   MixtralForCausalLM    llama     llama.expert_count = 8, top 2
  phi3      Phi3ForCausalLM       phi3      fused qkv / gate-up, LongRoPE
Sizes: hidden 64, 2 layers, 4 heads of 16, 2 KV heads (phi3: 4), FFN 128,
vocabulary 320, so every file is a few hundred KB.

Steps per family, all from SEED:
  1. the HF model built from its config, every parameter drawn from a
     seeded normal (norm weights 1 + 0.1 N, biases 0.1 N, matrices
     N / sqrt(fan_in)) and rounded to float16, so the f16 GGUF holds the
     model's exact values and transformers' float32 forward is the oracle of
     our exact kernels on it;
  2. saved (safetensors) with a byte-level BPE tokenizer (the 256 byte
     symbols, 8 merges, <|endoftext|> <|im_start|> <|im_end|>, <think> and
     </think> added as non-special tokens as Qwen3 has them; qwen3 also a chat template with <think>): the converter needs
     a tokenizer, the model tests feed token ids, the server test
     (tests/server/test_think.py) chats with the qwen3 file;
  3. convert_hf_to_gguf.py --outtype f16, run in this process with one
     patch: its pre-tokenizer detection hashes a known tokenizer's output
     and refuses unknown ones, so get_vocab_base_pre answers "qwen2" (the
     regex our tiny vocab is meant for; nothing here tokenizes text);
  4. llama-quantize to Q8_0, Q4_0 and Q4_K_M. With rows of 64 the K-quants
     fall back to llama-quantize's own substitutes (Q5_0 / Q8_0: K blocks
     are 256 wide): Q4_K and Q6_K are covered by the real Qwen2.5 file;
  5. the golden: transformers (eager attention, float32, no cache) on
     PROMPT_LEN seeded token ids: every position's full logits, and a
     GREEDY-token continuation, each step recomputed over the whole prefix.

Mistral: transformers applies MistralConfig.sliding_window; llama.cpp's
converter does not write one for the llama architecture (and llama.cpp's
llama graph ignores it). "mistral" keeps the window (null) that Mistral 7B
v0.2 / v0.3 ship; "mistral_swa" has Mistral 7B v0.1's kind (8 keys here),
and for it alone the converter is patched to also write llama.cpp's key
llama.attention.sliding_window (the one value it drops): its llama.cpp
golden is therefore not comparable past the window and is not made.

Writes tests/data/families/<family>-{f16,q8_0,q4_0,q4_k_m}.gguf and
tests/data/golden/families/<family>.json.

Usage: bash scripts/venv.sh            (torch, transformers 4.55, gguf)
       sh bench/build_llamacpp.sh llama-quantize   (and the converter's sdist)
       nice -n 19 .venv/bin/python scripts/gen_tiny_families.py [FAMILY...]
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMACPP = os.path.join(ROOT, "build-llamacpp")
SRC = os.path.join(LLAMACPP, "llama_cpp_python-0.3.36", "vendor", "llama.cpp")
QUANTIZE = os.path.join(LLAMACPP, "build", "bin", "llama-quantize")
OUT_DIR = os.path.join(ROOT, "tests", "data", "families")
GOLD_DIR = os.path.join(ROOT, "tests", "data", "golden", "families")
SEED = 31
PROMPT_LEN = 24
GREEDY = 8
VOCAB = 320
QUANTS = ["q8_0", "q4_0", "q4_k_m"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# added but not special, as in Qwen3's tokenizer.json: the reply's text keeps them
THINK_TOKENS = ["<think>", "</think>"]
# qwen3's chat template: Qwen3's shape cut to what a test needs (ChatML
# turns; enable_thinking false closes an empty thought), so the server's
# <think> path (src/server/think_out.c) runs on the tiny file
QWEN3_TEMPLATE = (
    "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}{%- endif %}")
# a few merges (GGUF BPE vocabularies carry a merge list; ours must not be
# empty): byte-level symbols, "Ġ" = space
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("o", "n"), ("Ġ", "s")]
BOS = 256 + len(MERGES)  # <|endoftext|>, after the bytes and the merged symbols

COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
              bos_token_id=BOS, eos_token_id=BOS, attn_implementation="eager")
FAMILIES = {
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Config", dict(COMMON, rope_theta=1000000.0, use_sliding_window=False)),
    "qwen3": ("Qwen3ForCausalLM", "Qwen3Config", dict(COMMON, head_dim=16, use_sliding_window=False)),
    "qwen3moe": ("Qwen3MoeForCausalLM", "Qwen3MoeConfig",
                 dict(COMMON, head_dim=16, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                      norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], use_sliding_window=False)),
    "mistral": ("MistralForCausalLM", "MistralConfig", dict(COMMON, head_dim=16, sliding_window=None)),
    # Mistral 7B v0.1's sliding window, at 8 keys (the prompt is 24)
    "mistral_swa": ("MistralForCausalLM", "MistralConfig", dict(COMMON, head_dim=16, sliding_window=8)),
    "mixtral": ("MixtralForCausalLM", "MixtralConfig",
                dict(COMMON, num_local_experts=8, num_experts_per_tok=2, intermediate_size=32,
                     sliding_window=None)),
    # LongRoPE as Phi-3-mini-128k has it, at toy scale: 4x the original
    # context (so attn_factor = sqrt(1 + ln 4 / ln 256)), one factor per
    # rotary pair; the test's sequences stay within the original context,
    # which is 256 because llama.cpp pads its context to 256 and picks the
    # long factors for a context past the original one
    "phi3": ("Phi3ForCausalLM", "Phi3Config",
             dict(COMMON, num_key_value_heads=4, pad_token_id=BOS + 1, sliding_window=None,
                  max_position_embeddings=1024, original_max_position_embeddings=256,
                  rope_scaling={"type": "longrope",
                                "short_factor": [1.0, 1.02, 1.05, 1.1, 1.2, 1.35, 1.5, 1.7],
                                "long_factor": [1.0, 1.3, 1.8, 2.5, 3.4, 4.6, 6.0, 8.0]})),
}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def randomize(model, seed):
    """Every parameter from a seeded normal, rounded to float16 values."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            z = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if p.dim() == 1 and "norm" in name:
                v = 1.0 + 0.1 * z
            elif p.dim() == 1:
                v = 0.1 * z  # biases
            else:
                v = z / np.sqrt(p.shape[-1])
            p.copy_(v.half().float())


def write_tokenizer(d, template=None, extra_specials=()):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)}
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=MERGES))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS + list(extra_specials))
    tok.add_tokens(THINK_TOKENS)
    tok.save(os.path.join(d, "tokenizer.json"))
    cfg = {"tokenizer_class": "GPT2Tokenizer", "bos_token": SPECIALS[0], "eos_token": SPECIALS[0],
           "model_max_length": 256}
    if template:
        cfg["chat_template"] = template
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f)


def convert(hf_dir, out, window=None):
    """llama.cpp's converter in this process (see the docstring's step 3);
    window: also write llama.attention.sliding_window (mistral_swa)."""
    # the converter puts its own gguf-py (the sdist's, version 0.19.0 too)
    # first on the path: PyPI's gguf 0.19.0 lacks architectures it names
    sys.path.insert(0, SRC)
    import convert_hf_to_gguf
    from conversion import base
    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
    from conversion import llama
    if not hasattr(llama.LlamaModel, "_plain_params"):
        llama.LlamaModel._plain_params = llama.LlamaModel.set_gguf_parameters
    def params(self):
        self._plain_params()
        if window:
            self.gguf_writer.add_sliding_window(window)
    llama.LlamaModel.set_gguf_parameters = params
    argv = sys.argv
    # a fixed general.name (the default is the folder's, a random temp name)
    name = "tiny-" + os.path.basename(out).split("-f16")[0]
    sys.argv = ["convert_hf_to_gguf.py", hf_dir, "--outtype", "f16", "--outfile", out, "--model-name", name]
    try:
        convert_hf_to_gguf.main()
    finally:
        sys.argv = argv


def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy().astype(np.float64)


def make(family, index):
    cls_name, cfg_name, kw = FAMILIES[family]
    cfg = getattr(transformers, cfg_name)(**kw)
    torch.manual_seed(SEED + index)
    model = getattr(transformers, cls_name)(cfg).eval()
    randomize(model, SEED * 100 + index)
    tmp = tempfile.mkdtemp(prefix="tiny-" + family + "-")
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        # phi3: Phi-3's SentencePiece specials too (llama.cpp's vocab loader
        # looks them up for a model named phi3)
        write_tokenizer(tmp, QWEN3_TEMPLATE if family == "qwen3" else None,
                        ("<unk>", "<s>", "</s>") if family == "phi3" else ())
        f16 = os.path.join(OUT_DIR, f"{family}-f16.gguf")
        convert(tmp, f16, kw.get("sliding_window") if family == "mistral_swa" else None)
    finally:
        shutil.rmtree(tmp)
    files = {"f16": f16}
    if not os.path.exists(QUANTIZE):
        print(f"{family}: no {QUANTIZE}: quantized files not made", file=sys.stderr)
    # mistral_swa: Q4_0 only (the batch-invariance test's); no llama.cpp golden
    quants = ["q4_0"] if family == "mistral_swa" else QUANTS
    for q in quants if os.path.exists(QUANTIZE) else []:
        out = os.path.join(OUT_DIR, f"{family}-{q}.gguf")
        subprocess.run([QUANTIZE, f16, out, q.upper(), "1"], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        files[q] = out

    rng = np.random.default_rng(SEED + index)
    prompt = [int(t) for t in rng.integers(0, 256, size=PROMPT_LEN)]
    logits = hf_logits(model, prompt)
    seq, margins = list(prompt), []
    for _ in range(GREEDY):
        row = hf_logits(model, seq)[-1]
        top2 = np.argsort(-row, kind="stable")[:2]
        margins.append(round(float(row[top2[0]] - row[top2[1]]), 5))
        seq.append(int(top2[0]))
    return {
        "manifest": {
            "oracle": f"transformers {transformers.__version__} {cls_name}, float32, eager attention, "
                      "no KV cache; weights float16-rounded (the f16 GGUF holds them exactly)",
            "converter": "llama.cpp convert_hf_to_gguf.py (llama-cpp-python 0.3.36 sdist), --outtype f16",
            "quantizer": "llama.cpp llama-quantize (same sources)",
            "torch": torch.__version__,
            "seed": SEED,
            "config": {k: v for k, v in kw.items() if k != "attn_implementation"},
            "files": {k: {"path": os.path.relpath(v, ROOT), "sha256": sha256(v)} for k, v in files.items()},
        },
        "vocab": VOCAB,
        "prompt": prompt,
        "logits": [[round(float(x), 5) for x in row] for row in logits],
        "greedy": seq[PROMPT_LEN:],
        "greedy_margin": margins,
    }


def main():
    names = sys.argv[1:] or list(FAMILIES)
    os.makedirs(OUT_DIR, exist_ok=True)
    os.makedirs(GOLD_DIR, exist_ok=True)
    for name in names:
        index = list(FAMILIES).index(name)
        gold = make(name, index)
        path = os.path.join(GOLD_DIR, f"{name}.json")
        with open(path, "w") as f:
            json.dump(gold, f, separators=(",", ":"))
            f.write("\n")
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
