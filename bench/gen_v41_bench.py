#!/usr/bin/env python3
"""A synthetic DeepSeek-V4.1-Flash-shaped checkpoint for speed runs (not a test).

Written once into ~/.cache/deepinfer/bench/<NAME>/ (never into git), from a
fixed seed, in the released layout (config.json with nested text_config,
sharded safetensors + index, FP8 e4m3 weights with F8_E8M0 32x32 block
scales, routed experts as packed e2m1 + per-32 F8_E8M0, BF16 compressor /
indexer / router / embedding / head, F32 mHC, sinks and router biases,
Engram tables as F8_E4M3 + F8_E8M0 per 32). Shape (V4.1-Flash's layer kinds
at a width that fits a 24 GiB, 2-core machine while matmuls dominate):

  hidden 1536, 10 layers: window x2, ratio-2 owners 2 and 4 (3, 5 reuse),
  ratio-1 source 6 (candidate source), decoders 7-9 with an indexer on 8;
  16 heads x 512 (64 rotary), q_lora 512, output 4 x 512, window 128;
  indexer 16 x 128 top-128, candidates 64 blocks of 8; 48 routed experts
  top-6 + 1 shared, width 768; mHC x4; vocab 32768; Engram on layers 1 and 4
  (3-grams, 4 heads x 256, tables of 8 x ~1M rows = 2 GiB each, memory-mapped
  at run time, so a token touches 8 rows of each).

Values are random (weights ~ N(0, 1/fan_in) after their scales), so the
model computes nonsense at realistic magnitudes; only speed is measured.
Needs numpy and ml_dtypes (scripts/venv.sh v41 has both).

Usage: python bench/gen_v41_bench.py [--out DIR]   prints the folder
"""
import argparse
import json
import math
import os
import struct
import sys

import ml_dtypes
import numpy as np

NAME = "dsv41_h1536_l10_e48"
SEED = 41
ENGRAM_VOCAB = 1_000_000
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TEXT = dict(
    vocab_size=32768, hidden_size=1536, num_hidden_layers=10, num_attention_heads=16, num_key_value_heads=1,
    head_dim=512, qk_rope_head_dim=64, q_lora_rank=512, o_groups=4, o_lora_rank=512, sliding_window=128,
    max_position_embeddings=65536, rms_norm_eps=1e-20, swiglu_limit=10.0, tie_word_embeddings=False,
    hidden_act="silu", attention_bias=False, attention_dropout=0.0,
    rope_theta=10000.0, compress_rope_theta=160000.0,
    rope_scaling=dict(type="yarn", factor=16, original_max_position_embeddings=65536, beta_fast=32, beta_slow=1),
    hc_mult=4, hc_eps=1e-6, hc_sinkhorn_iters=20,
    compress_ratios=[0, 0, 2, 2, 2, 2, 1, 1, 1, 1],
    kv_source_layer_ids=[2, 4, 6], index_source_layer_ids=[2, 4, 6, 8], candidate_source_layer_id=6,
    candidate_topk_blocks=64, candidate_block_size=8, index_topk=128, index_n_heads=16, index_head_dim=128,
    moe_intermediate_size=768, n_routed_experts=48, n_shared_experts=1, num_experts_per_tok=6,
    routed_scaling_factor=1.5, scoring_func="sqrtsoftplus", norm_topk_prob=True, topk_method="noaux_tc",
    num_nextn_predict_layers=0,
    engram_layer_ids=[1, 4], engram_max_ngram_size=3, engram_n_heads=4, engram_head_dim=256,
    engram_vocab_size=ENGRAM_VOCAB, engram_pad_token_id=2,
)


class Writer:
    """Shards of about shard_bytes, written as tensors arrive (header first
    needs all sizes: each shard is buffered as a list of arrays)."""

    def __init__(self, out, shard_bytes=1 << 30):
        self.out, self.shard_bytes = out, shard_bytes
        self.shards, self.cur, self.cur_bytes = [], [], 0
        self.weight_map = {}

    def add(self, name, arr, dtype):
        self.cur.append((name, np.ascontiguousarray(arr), dtype))
        self.cur_bytes += arr.nbytes
        if self.cur_bytes >= self.shard_bytes:
            self.flush()

    def flush(self):
        if self.cur:
            self.shards.append(self.cur)
            path = os.path.join(self.out, "shard-%d.tmp" % len(self.shards))
            self._write(path, self.cur)
            self.cur, self.cur_bytes = [], 0

    def _write(self, path, items):
        header, off = {}, 0
        for name, a, dt in items:
            header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
            off += a.nbytes
        h = json.dumps(header, separators=(",", ":")).encode()
        h += b" " * (-len(h) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(h)))
            f.write(h)
            for _, a, _ in items:
                f.write(a.tobytes())
        for name, _, _ in items:
            self.weight_map[name] = path

    def finish(self):
        self.flush()
        n = len(self.shards)
        rename = {}
        for k in range(n):
            tmp = os.path.join(self.out, "shard-%d.tmp" % (k + 1))
            final = "model-%05d-of-%05d.safetensors" % (k + 1, n)
            os.replace(tmp, os.path.join(self.out, final))
            rename[tmp] = final
        wm = {name: rename[p] for name, p in self.weight_map.items()}
        with open(os.path.join(self.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": wm}, f)


rng = np.random.default_rng(SEED)


def bf16(a):
    return a.astype(ml_dtypes.bfloat16).view(np.uint16)


def fp8_block(n_out, n_in):
    """e4m3 codes of N(0, 1) and per-32x32 scales making W ~ N(0, 1/n_in)."""
    q = rng.standard_normal((n_out, n_in), dtype=np.float32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    e = 127 - int(round(math.log2(math.sqrt(n_in))))
    sc = np.full((math.ceil(n_out / 32), math.ceil(n_in / 32)), e, np.uint8)
    return q, sc


def fp4_rows(n_out, n_in):
    """random e2m1 pairs (rms ~2.9) with per-32 scales making W ~ 1/sqrt(n_in)."""
    q = rng.integers(0, 256, (n_out, n_in // 2), dtype=np.uint8)
    e = 127 - int(round(math.log2(2.9 * math.sqrt(n_in))))
    return q, np.full((n_out, n_in // 32), e, np.uint8)


def next_prime(n):
    def is_prime(x):
        if x < 2:
            return False
        i = 2
        while i * i <= x:
            if x % i == 0:
                return False
            i += 1
        return True
    n += 1
    while not is_prime(n):
        n += 1
    return n


def engram_rows():
    """EngramLayout.from_cfg: per layer, per n-gram order, per head the next
    unused prime above engram_vocab_size - 1; rows = their sum."""
    seen, rows = set(), {}
    for lid in TEXT["engram_layer_ids"]:
        total = 0
        for _ in range(TEXT["engram_max_ngram_size"] - 1):
            start = ENGRAM_VOCAB - 1
            for _ in range(TEXT["engram_n_heads"]):
                p = next_prime(start)
                while p in seen:
                    p = next_prime(p)
                seen.add(p)
                total += p
                start = p
        rows[lid] = total
    return rows


def linear(w, name, n_out, n_in):
    q, sc = fp8_block(n_out, n_in)
    w.add(name + ".weight", q, "F8_E4M3")
    w.add(name + ".scale", sc, "F8_E8M0")


def plain(w, name, n_out, n_in, std=None):
    std = std if std is not None else 1.0 / math.sqrt(n_in)
    w.add(name, bf16(rng.standard_normal((n_out, n_in), dtype=np.float32) * std), "BF16")


def ones(w, name, n):
    w.add(name, bf16(np.ones(n, np.float32)), "BF16")


def layer(w, l, t):
    D, H, hd, N = t["hidden_size"], t["num_attention_heads"], t["head_dim"], t["hc_mult"]
    M = (2 + N) * N
    p = "layers.%d." % l
    ratio = t["compress_ratios"][l]
    for s in ("attn", "ffn"):
        w.add(p + "hc_%s_fn" % s, rng.standard_normal((M, N * D), dtype=np.float32) * 0.02, "F32")
        w.add(p + "hc_%s_base" % s, rng.standard_normal(M, dtype=np.float32) * 0.1, "F32")
        w.add(p + "hc_%s_scale" % s, np.array([0.5, 0.5, 0.5], np.float32), "F32")
    ones(w, p + "attn_norm.weight", D)
    ones(w, p + "ffn_norm.weight", D)
    w.add(p + "attn.attn_sink", np.zeros(H, np.float32), "F32")
    linear(w, p + "attn.wq_a", t["q_lora_rank"], D)
    ones(w, p + "attn.q_norm.weight", t["q_lora_rank"])
    linear(w, p + "attn.wq_b", H * hd, t["q_lora_rank"])
    linear(w, p + "attn.wkv", hd, D)
    ones(w, p + "attn.kv_norm.weight", hd)
    linear(w, p + "attn.wo_a", t["o_groups"] * t["o_lora_rank"], H * hd // t["o_groups"])
    linear(w, p + "attn.wo_b", D, t["o_groups"] * t["o_lora_rank"])
    kv_src = ratio and l in t["kv_source_layer_ids"]
    idx_src = ratio and l in t["index_source_layer_ids"]
    if kv_src:
        plain(w, p + "attn.compressor.wkv.weight", hd, D)
        if ratio == 2:
            plain(w, p + "attn.compressor.wgate.weight", hd, D)
        ones(w, p + "attn.compressor.norm.weight", hd)
    if idx_src:
        IH, ihd = t["index_n_heads"], t["index_head_dim"]
        linear(w, p + "attn.indexer.wq_b", IH * ihd, t["q_lora_rank"])
        plain(w, p + "attn.indexer.weights_proj.weight", IH, D)
        if kv_src:
            plain(w, p + "attn.indexer.wk.weight", ihd, hd)
            ones(w, p + "attn.indexer.k_norm.weight", ihd)
    E, F = t["n_routed_experts"], t["moe_intermediate_size"]
    plain(w, p + "ffn.gate.weight", E, D)
    w.add(p + "ffn.gate.bias", np.zeros(E, np.float32), "F32")
    w.add(p + "ffn.gate.bias_vl", np.zeros(E, np.float32), "F32")
    for e in range(E):
        for nm, o, i in (("w1", F, D), ("w2", D, F), ("w3", F, D)):
            q, sc = fp4_rows(o, i)
            w.add(p + "ffn.experts.%d.%s.weight" % (e, nm), q, "I8")
            w.add(p + "ffn.experts.%d.%s.scale" % (e, nm), sc, "F8_E8M0")
    linear(w, p + "ffn.shared_experts.w1", F, D)
    linear(w, p + "ffn.shared_experts.w2", D, F)
    linear(w, p + "ffn.shared_experts.w3", F, D)


def engram(w, l, t, rows):
    D, N, ehd = t["hidden_size"], t["hc_mult"], t["engram_head_dim"]
    cols = (t["engram_max_ngram_size"] - 1) * t["engram_n_heads"]
    p = "layers.%d.engram." % l
    w.add(p + "q_weight", bf16(np.ones((N, D), np.float32)), "BF16")
    w.add(p + "k_weight", bf16(np.ones((N, D), np.float32)), "BF16")
    linear(w, p + "wkv", (N + 1) * D, cols * ehd)
    w.flush()  # the table goes into shards of its own
    chunk = 1 << 18
    # one tensor per table (a safetensors tensor cannot span shards): build it in place
    table = np.empty((rows, ehd), np.uint8)
    for r0 in range(0, rows, chunk):
        r1 = min(rows, r0 + chunk)
        table[r0:r1] = rng.standard_normal((r1 - r0, ehd), dtype=np.float32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    w.add(p + "embed.weight", table, "F8_E4M3")
    w.add(p + "embed.scale", np.full((rows, ehd // 32), 127 - 4, np.uint8), "F8_E8M0")
    w.flush()
    del table


def tokenizer(out, vocab):
    src = os.path.join(ROOT, "tests", "data", "golden", "deepseek_v41", "tiny", "tokenizer.json")
    with open(src, encoding="utf-8") as f:
        tok = json.load(f)
    v = tok["model"]["vocab"]
    i = max(v.values()) + 1
    while i < vocab:  # unreachable filler pieces up to the model's vocab
        v["zq%06d" % i] = i
        i += 1
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.expanduser("~/.cache/deepinfer/bench/" + NAME))
    a = ap.parse_args()
    done = os.path.join(a.out, ".complete")
    if os.path.exists(done):
        print(a.out)
        return
    os.makedirs(a.out, exist_ok=True)
    t = TEXT
    rows = engram_rows()
    cfg = dict(architectures=["DeepseekV41ForCausalLM"], model_type="deepseek_v41", dtype="bfloat16",
               bos_token_id=0, eos_token_id=1, pad_token_id=2, text_config=t,
               quantization_config=dict(quant_method="fp8", expert_dtype="fp4", activation_scheme="dynamic",
                                        weight_block_size=[32, 32], scale_fmt="ue8m0"))
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    tokenizer(a.out, t["vocab_size"])
    w = Writer(a.out)
    D, V = t["hidden_size"], t["vocab_size"]
    plain(w, "embed.weight", V, D, std=1.0)
    plain(w, "head.weight", V, D)
    ones(w, "norm.weight", D)
    for l in range(t["num_hidden_layers"]):
        print("layer", l, file=sys.stderr)
        if l in t["engram_layer_ids"]:
            engram(w, l, t, rows[l])
        layer(w, l, t)
    w.finish()
    open(done, "w").close()
    print(a.out)


if __name__ == "__main__":
    main()
