#!/usr/bin/env python3
"""Tiny DeepSeek-V4.1-Flash checkpoints in the released HF layout, from fixed seeds.

    .venv-v41/bin/python scripts/gen_tiny_v41.py [--only tiny|tiny_b|tiny_vl|tiny_ne] [--no-validate]

writes tests/data/golden/deepseek_v41/<name>/:
  config.json                     nested text_config, quantization_config at the root
  model.safetensors.index.json    weight_map over model-0000K-of-0000N.safetensors
  model-0000K-of-0000N.safetensors
  tokenizer.json                  byte-level BPE (tokenizers library), vocab = vocab_size,
                                  0 bos, 1 eos, 2 <｜▁pad▁｜>, 3 noise
Dtypes as the release: FP8 e4m3 weights with F8_E8M0 32x32 block `.scale`; routed
experts I8 packed e2m1 (low nibble = even element) + F8_E8M0 per-32 `.scale`;
HC fn/base/scale and attn_sink F32; gate.bias/bias_vl F32; compressor,
indexer weights_proj/wk, gate, norms BF16; Engram tables F8_E4M3 + F8_E8M0
[rows, head_dim/32]; mtp.0-2 incl. main_proj/main_norm/markov_head/confidence_head.
Quantization uses tile-kernels' own torch reference casts (TK torch/cast.py:cast).

After writing, the checkpoint is validated with DeepInfer's OWN loader
(hf/config.py:load_hf_model_config, V41Builder on meta, prepare_hf_coverage,
cover_tied_parameters, coverage completeness, validate_hf_shapes, and a CPU
load_covered_params); the script exits non-zero if DeepInfer rejects it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oracle_v41 import refs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "golden" / "deepseek_v41"

# ---------------------------------------------------------------- specs
TINY = dict(
    seed=4101,
    n_shards=3,
    vocab_size=512,
    hidden_size=256,
    num_hidden_layers=10,
    num_attention_heads=4,
    head_dim=512,
    qk_rope_head_dim=64,
    q_lora_rank=128,
    o_groups=2,
    o_lora_rank=128,
    sliding_window=16,
    compress_ratios=[0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0],
    kv_source_layer_ids=[2, 4, 6],
    index_source_layer_ids=[2, 4, 6, 8],
    index_k_source_layer_ids=None,  # default = kv sources
    candidate_source_layer_id=6,
    candidate_topk_blocks=64,
    candidate_block_size=8,
    index_topk=32,
    index_n_heads=4,
    index_head_dim=128,
    n_routed_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=128,
    n_shared_experts=1,
    routed_scaling_factor=1.5,
    hc_mult=4,
    hc_sinkhorn_iters=20,
    hc_eps=1e-6,
    rms_norm_eps=1e-20,
    swiglu_limit=10.0,
    rope_theta=10000.0,
    compress_rope_theta=160000.0,
    rope_scaling=dict(type="yarn", factor=16, original_max_position_embeddings=65536, beta_fast=32, beta_slow=1),
    max_position_embeddings=4096,
    engram_layer_ids=[1, 4],
    engram_max_ngram_size=3,
    engram_n_heads=2,
    engram_head_dim=128,
    engram_vocab_size=1000,
    num_nextn_predict_layers=3,
    dspark_block_size=5,
    dspark_target_layer_ids=[7, 8, 9],
    dspark_markov_rank=32,
    dspark_n_routed_experts=4,
    dspark_num_experts_per_tok=2,
)

# tiny_b: another seed and topology. 8 layers, window 8; layer 1 is the ratio-2 KV owner
# (2-3 reuse it), layer 3 is an index source that is NOT a kv source (own indexer q over
# layer 1's index keys), layer 4 the ratio-1 kv/index/candidate source (block 16 x 32 blocks),
# layer 6 a ratio-1 decoder indexer with the candidate stage over layer 4's index keys;
# Engram (4-grams) on layer 0 (window-only, first layer: no post before it) and on layer 5
# (a ratio-1 decoder); 2 DSpark layers.
TINY_B = dict(
    seed=4102,
    n_shards=2,
    vocab_size=384,
    hidden_size=128,
    num_hidden_layers=8,
    num_attention_heads=2,
    head_dim=512,
    qk_rope_head_dim=64,
    q_lora_rank=128,
    o_groups=1,
    o_lora_rank=128,
    sliding_window=8,
    compress_ratios=[0, 2, 2, 2, 1, 1, 1, 1, 0, 0],
    kv_source_layer_ids=[1, 4],
    index_source_layer_ids=[1, 3, 4, 6],
    index_k_source_layer_ids=None,
    candidate_source_layer_id=4,
    candidate_topk_blocks=32,
    candidate_block_size=16,
    index_topk=16,
    index_n_heads=2,
    index_head_dim=128,
    n_routed_experts=8,
    num_experts_per_tok=3,
    moe_intermediate_size=128,
    n_shared_experts=1,
    routed_scaling_factor=2.0,
    hc_mult=4,
    hc_sinkhorn_iters=10,
    hc_eps=1e-6,
    rms_norm_eps=1e-20,
    swiglu_limit=7.0,
    rope_theta=10000.0,
    compress_rope_theta=40000.0,
    rope_scaling=dict(type="yarn", factor=8, original_max_position_embeddings=4096, beta_fast=32, beta_slow=1),
    max_position_embeddings=8192,
    engram_layer_ids=[0, 5],
    engram_max_ngram_size=4,
    engram_n_heads=2,
    engram_head_dim=128,
    engram_vocab_size=500,
    num_nextn_predict_layers=2,
    dspark_block_size=4,
    dspark_target_layer_ids=[5, 6, 7],
    dspark_markov_rank=16,
    dspark_n_routed_experts=4,
    dspark_num_experts_per_tok=1,
)
# tiny_vl: tiny_b's text topology (another seed) plus a tiny random vision tower in the
# released names (vision.*, aligner.*, image_start/end/newline, gate.bias_vl everywhere):
# patch 14, 2 blocks of width 128 (2 heads of 64: the ViT rotary covers a whole head),
# SwiGLU width 384 (int(128 * 2.7) to a multiple of 128), downsample 2, projector depth 2.
# The geometry keys are DeepInfer's (hugging_face/processor.py); depth / num_heads /
# mlp_ratio / multiple_of are ours: DeepInfer's vit.py fixes them as constants
# (1024 wide, 32 deep, 16 heads, 2.7, 128), and they are the defaults when absent.
TINY_VL = dict(TINY_B, seed=4103, image_token="<｜deepseek_image｜>", vision=dict(
    hidden_size=128, patch_size=14, downsample_ratio=2, max_image_tokens=50, min_pixels=3136, max_wh_ratio=4,
    depth=2, num_heads=2, mlp_ratio=2.7, multiple_of=128))
# tiny_ne: tiny_b's topology (another seed, one shard) without Engram: `engram_layer_ids: []`
# and no other engram_* key (hf/config.py:_build_engram returns None for an empty list and
# reads nothing else), no engram.* tensors.
TINY_NE = dict(TINY_B, seed=4104, n_shards=1, engram_layer_ids=[])
SPECS = {"tiny": TINY, "tiny_b": TINY_B, "tiny_vl": TINY_VL, "tiny_ne": TINY_NE}

BOS, EOS, PAD, NOISE = 0, 1, 2, 3
SPECIALS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>", "<｜dspark▁noise｜>"]


# ---------------------------------------------------------------- tokenizer
def corpus_lines() -> list[str]:
    """Text with case variants, accents, leading-space variants and whitespace runs, so BPE
    learns pieces that collapse under the Engram normalizer (v4m/engram_metadata.py)."""
    words = ["the", "hello", "world", "cafe", "café", "naïve", "naive", "résumé", "resume", "über", "uber",
             "straße", "strasse", "déjà", "vu", "fiancé", "coöperate", "token", "engram", "model", "deep",
             "seek", "attention", "window", "expert", "Ångström", "angstrom", "ﬁne", "fine", "①", "1"]
    lines = []
    for w in words:
        for v in (w, w.capitalize(), w.upper()):
            lines.append(" ".join([v] * 6))
            lines.append((v + " ") * 3 + v)
            lines.append("\t".join([v] * 3))
    lines += ["a  b   c    d", "x\n\ny", "tab\t\there", "  lead", "   ", "\n\n\n", "\t\t", "e\u0301t\u00e9",
              "ＡＢＣ ａｂｃ abc", "日本語 日本", "ä ö ü Ä Ö Ü", "ñ Ñ n N"] * 4
    return lines


def build_tokenizer(vocab_size: int, extra_specials: tuple[str, ...] = ()):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=SPECIALS + list(extra_specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus_lines(), trainer=trainer)
    if tok.get_vocab_size() < vocab_size:
        # pad with whitespace-run / case variant tokens as added (non-special) tokens
        extra = [" " * k for k in range(2, 40)] + ["\n" * k for k in range(2, 20)] + ["\t" * k for k in range(2, 20)]
        extra += [f"X{i}" for i in range(vocab_size)]
        for t in extra:
            if tok.get_vocab_size() >= vocab_size:
                break
            if tok.token_to_id(t) is None:
                tok.add_tokens([t])
    assert tok.get_vocab_size() == vocab_size, tok.get_vocab_size()
    for i, s in enumerate(SPECIALS + list(extra_specials)):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    return tok


# ---------------------------------------------------------------- config
def make_config(s: dict, compressed_vocab_size: int) -> dict:
    text = dict(
        hidden_act="silu",
        attention_bias=False,
        attention_dropout=0.0,
        num_key_value_heads=1,
        tie_word_embeddings=False,
        scoring_func="sqrtsoftplus",
        norm_topk_prob=True,
        topk_method="noaux_tc",
        hc_shifted=True,
        use_fp4_sparse_kv=True,
        dspark_target_attn_input=True,
        dspark_noise_token_id=NOISE,
        engram_pad_token_id=PAD,
        engram_compressed_vocab_size=compressed_vocab_size,
        model_type="deepseek_v41",
    )
    for k in ("vocab_size hidden_size num_hidden_layers num_attention_heads head_dim qk_rope_head_dim q_lora_rank "
              "o_groups o_lora_rank sliding_window compress_ratios kv_source_layer_ids index_source_layer_ids "
              "candidate_source_layer_id candidate_topk_blocks candidate_block_size index_topk index_n_heads "
              "index_head_dim n_routed_experts num_experts_per_tok moe_intermediate_size n_shared_experts "
              "routed_scaling_factor hc_mult hc_sinkhorn_iters hc_eps rms_norm_eps swiglu_limit rope_theta "
              "compress_rope_theta rope_scaling max_position_embeddings engram_layer_ids engram_max_ngram_size "
              "engram_n_heads engram_head_dim engram_vocab_size num_nextn_predict_layers dspark_block_size "
              "dspark_target_layer_ids dspark_markov_rank dspark_n_routed_experts dspark_num_experts_per_tok").split():
        text[k] = s[k]
    if s.get("index_k_source_layer_ids") is not None:
        text["index_k_source_layer_ids"] = s["index_k_source_layer_ids"]
    if not s["engram_layer_ids"]:
        for k in [k for k in text if k.startswith("engram_") and k != "engram_layer_ids"]:
            del text[k]
    vision = dict(s["vision"]) if "vision" in s else dict(hidden_size=64, downsample_ratio=2)
    extra = {"image_token_id": len(SPECIALS)} if "vision" in s else {}
    return dict(
        **extra,
        architectures=["DeepseekV41ForCausalLM"],
        model_type="deepseek_v41",
        dtype="bfloat16",
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
        text_config=text,
        vision_config=vision,
        quantization_config=dict(
            quant_method="fp8",
            expert_dtype="fp4",
            activation_scheme="dynamic",
            weight_block_size=[32, 32],
            scale_fmt="ue8m0",
            fmt="e4m3",
        ),
    )


# ---------------------------------------------------------------- topology helpers
def source_map(ids: list[int], n_layer: int) -> dict[int, int]:
    # the rule of hf/config.py:_source_map (nearest source <= layer)
    return {layer: max(x for x in ids if x <= layer) for layer in range(min(ids), n_layer)}


def engram_rows(s: dict, cvocab: int) -> dict[int, int]:
    if not s["engram_layer_ids"]:
        return {}
    R = refs.setup()
    from deepinfer import AttrDict

    cfg = AttrDict(
        engram_max_ngram_size=s["engram_max_ngram_size"],
        engram_layer_ids=s["engram_layer_ids"],
        vocab_size=[s["engram_vocab_size"]] * (s["engram_max_ngram_size"] - 1),
        n_head_per_ngram=[s["engram_n_heads"]] * (s["engram_max_ngram_size"] - 1),
        n_embed_per_ngram=[s["engram_n_heads"] * s["engram_head_dim"]] * (s["engram_max_ngram_size"] - 1),
    )
    layout = R.engram_metadata.EngramLayout.from_cfg(cfg)
    return {lid: sum(sum(x) for x in layout.layer_vocab_sizes[lid]) for lid in s["engram_layer_ids"]}


# ---------------------------------------------------------------- quantization (TK torch/cast.py refs)
def _e8m0(sf: torch.Tensor) -> torch.Tensor:
    """fp32 power-of-two scales -> F8_E8M0 tensor (exponent byte)."""
    bits = (sf.float().contiguous().view(torch.int32) >> 23) & 0xFF
    return bits.to(torch.uint8).view(torch.float8_e8m0fnu)


def quant_fp8_block(w: torch.Tensor):
    TK = refs.setup().TK
    q, sf = TK.cast(w.float().contiguous(), "e4m3", block_size=(32, 32), round_sf=True)
    return q.contiguous(), _e8m0(sf)


def quant_fp4_rows(w: torch.Tensor):
    TK = refs.setup().TK
    q, sf = TK.cast(w.float().contiguous(), "e2m1", block_size=(1, 32), round_sf=True)
    return q.contiguous(), _e8m0(sf)


def quant_fp8_rows(w: torch.Tensor):
    TK = refs.setup().TK
    q, sf = TK.cast(w.float().contiguous(), "e4m3", block_size=(1, 32), round_sf=True)
    return q.contiguous(), _e8m0(sf)


# ---------------------------------------------------------------- weights
class Gen:
    def __init__(self, seed: int) -> None:
        self.g = torch.Generator().manual_seed(seed)
        self.t: dict[str, torch.Tensor] = {}

    def randn(self, *shape) -> torch.Tensor:
        return torch.randn(*shape, generator=self.g)

    def fp8(self, name: str, out: int, inp: int, gain: float = 1.0) -> None:
        q, s = quant_fp8_block(self.randn(out, inp) * (gain / math.sqrt(inp)))
        self.t[name + ".weight"], self.t[name + ".scale"] = q, s

    def bf16(self, name: str, shape, std: float, mean: float = 0.0) -> None:
        self.t[name] = (mean + std * self.randn(*shape)).bfloat16()

    def f32(self, name: str, shape, std: float, mean: float = 0.0) -> None:
        self.t[name] = (mean + std * self.randn(*shape)).float()

    def norm(self, name: str, dim: int) -> None:
        self.bf16(name, (dim,), 0.2, 1.0)

    def fp4(self, name: str, out: int, inp: int, gain: float = 1.0) -> None:
        q, s = quant_fp4_rows(self.randn(out, inp) * (gain / math.sqrt(inp)))
        self.t[name + ".weight"], self.t[name + ".scale"] = q, s


def gen_layer(G: Gen, s: dict, pfx: str, *, ratio: int, is_kv: bool, is_idx: bool, is_idxk: bool,
              n_experts: int, engram_rows_n: int | None) -> None:
    d, H, D = s["hidden_size"], s["num_attention_heads"], s["head_dim"]
    m = s["hc_mult"]
    for sub in ("attn", "ffn"):
        G.f32(f"{pfx}.hc_{sub}_fn", (m * (2 + m), m * d), 1.0 / math.sqrt(m * d))
        G.f32(f"{pfx}.hc_{sub}_base", (m * (2 + m),), 0.5)
        G.t[f"{pfx}.hc_{sub}_scale"] = (0.5 + torch.rand(3, generator=G.g)).float()
    G.norm(f"{pfx}.attn_norm.weight", d)
    G.norm(f"{pfx}.ffn_norm.weight", d)
    a = f"{pfx}.attn"
    G.f32(f"{a}.attn_sink", (H,), 1.0)
    G.fp8(f"{a}.wq_a", s["q_lora_rank"], d)
    G.norm(f"{a}.q_norm.weight", s["q_lora_rank"])
    G.fp8(f"{a}.wq_b", H * D, s["q_lora_rank"])
    G.fp8(f"{a}.wkv", D, d)
    G.norm(f"{a}.kv_norm.weight", D)
    G.fp8(f"{a}.wo_a", s["o_groups"] * s["o_lora_rank"], (H // s["o_groups"]) * D)
    G.fp8(f"{a}.wo_b", d, s["o_groups"] * s["o_lora_rank"])
    if is_kv:
        G.bf16(f"{a}.compressor.wkv.weight", (D, d), 1.0 / math.sqrt(d))
        if ratio == 2:
            G.bf16(f"{a}.compressor.wgate.weight", (D, d), 1.0 / math.sqrt(d))
        G.norm(f"{a}.compressor.norm.weight", D)
    if is_idx:
        nh, hd = s["index_n_heads"], s["index_head_dim"]
        G.fp8(f"{a}.indexer.wq_b", nh * hd, s["q_lora_rank"])
        G.bf16(f"{a}.indexer.weights_proj.weight", (nh, d), 1.0 / math.sqrt(d))
        if is_idxk:
            G.bf16(f"{a}.indexer.wk.weight", (hd, D), 1.0 / math.sqrt(D))
            G.norm(f"{a}.indexer.k_norm.weight", hd)
    f = f"{pfx}.ffn"
    G.bf16(f"{f}.gate.weight", (n_experts, d), 1.0 / math.sqrt(d))
    G.f32(f"{f}.gate.bias", (n_experts,), 0.3)
    G.f32(f"{f}.gate.bias_vl", (n_experts,), 0.3)
    inter = s["moe_intermediate_size"]
    G.fp8(f"{f}.shared_experts.w1", inter, d)
    G.fp8(f"{f}.shared_experts.w3", inter, d)
    G.fp8(f"{f}.shared_experts.w2", d, inter)
    for e in range(n_experts):
        G.fp4(f"{f}.experts.{e}.w1", inter, d)
        G.fp4(f"{f}.experts.{e}.w3", inter, d)
        G.fp4(f"{f}.experts.{e}.w2", d, inter)
    if engram_rows_n is not None:
        e = f"{pfx}.engram"
        hd = s["engram_head_dim"]
        width = (s["engram_max_ngram_size"] - 1) * s["engram_n_heads"] * hd
        G.norm(f"{e}.q_weight", m * d) if False else G.bf16(f"{e}.q_weight", (m, d), 0.2, 1.0)
        G.bf16(f"{e}.k_weight", (m, d), 0.2, 1.0)
        G.fp8(f"{e}.wkv", (m + 1) * d, width)
        q, sc = quant_fp8_rows(G.randn(engram_rows_n, hd))
        G.t[f"{e}.embed.weight"], G.t[f"{e}.embed.scale"] = q, sc


def gen_vision(G: Gen, s: dict) -> None:
    """The tower (vision.*), the projector (aligner.*) in the HF names DeepInfer's
    hugging_face/names.py maps (wqkv / wo / w1 / w2 / vision.norm)."""
    v, D = s["vision"], s["hidden_size"]
    E, p, r = v["hidden_size"], v["patch_size"], v["downsample_ratio"]
    F = v["multiple_of"] * ((int(E * v["mlp_ratio"]) + v["multiple_of"] - 1) // v["multiple_of"])
    G.bf16("vision.patch_embed.proj.weight", (E, 3 * p * p), 1.0 / math.sqrt(3 * p * p))
    G.bf16("vision.patch_embed.proj.bias", (E,), 0.1)
    for i in range(v["depth"]):
        b = f"vision.blocks.{i}"
        G.norm(f"{b}.norm1.weight", E)
        G.norm(f"{b}.norm2.weight", E)
        G.bf16(f"{b}.attn.wqkv.weight", (3 * E, E), 1.0 / math.sqrt(E))
        G.bf16(f"{b}.attn.wqkv.bias", (3 * E,), 0.1)
        G.bf16(f"{b}.attn.wo.weight", (E, E), 1.0 / math.sqrt(E))
        G.bf16(f"{b}.attn.wo.bias", (E,), 0.1)
        G.bf16(f"{b}.mlp.w1.weight", (2 * F, E), 1.0 / math.sqrt(E))
        G.bf16(f"{b}.mlp.w2.weight", (E, F), 1.0 / math.sqrt(F))
    G.norm("vision.norm.weight", E)
    G.bf16("aligner.w1.weight", (D, E * r * r), 1.0 / math.sqrt(E * r * r))
    G.bf16("aligner.w1.bias", (D,), 0.1)
    G.bf16("aligner.w2.weight", (D, D), 1.0 / math.sqrt(D))
    G.bf16("aligner.w2.bias", (D,), 0.1)


def gen_weights(s: dict, cvocab: int) -> dict[str, torch.Tensor]:
    G = Gen(s["seed"])
    d, V, L = s["hidden_size"], s["vocab_size"], s["num_hidden_layers"]
    ratios = s["compress_ratios"]
    kv_ids = s["kv_source_layer_ids"]
    idx_ids = s["index_source_layer_ids"]
    idxk_ids = s.get("index_k_source_layer_ids") or kv_ids
    rows = engram_rows(s, cvocab)
    G.bf16("embed.weight", (V, d), 1.0)
    for nm in ("image_start", "image_end", "image_newline"):
        G.bf16(nm, (d,), 1.0)
    for L_ in range(L):
        gen_layer(G, s, f"layers.{L_}", ratio=ratios[L_], is_kv=L_ in kv_ids, is_idx=L_ in idx_ids,
                  is_idxk=L_ in idxk_ids, n_experts=s["n_routed_experts"], engram_rows_n=rows.get(L_))
    G.norm("norm.weight", d)
    G.bf16("head.weight", (V, d), 2.0 / math.sqrt(d))
    nextn = s["num_nextn_predict_layers"]
    r = s["dspark_markov_rank"]
    for i in range(nextn):
        gen_layer(G, s, f"mtp.{i}", ratio=0, is_kv=False, is_idx=False, is_idxk=False,
                  n_experts=s["dspark_n_routed_experts"], engram_rows_n=None)
        if i == 0:
            G.fp8("mtp.0.main_proj", d, d * len(s["dspark_target_layer_ids"]))
            G.norm("mtp.0.main_norm.weight", d)
        if i == nextn - 1:
            G.norm(f"mtp.{i}.norm.weight", d)
            G.bf16(f"mtp.{i}.markov_head.embed.weight", (V, r), 1.0 / math.sqrt(r))
            G.bf16(f"mtp.{i}.markov_head.head.weight", (V, r), 1.0 / math.sqrt(r))
            G.bf16(f"mtp.{i}.confidence_head.proj.weight", (1, d + r), 1.0 / math.sqrt(d + r))
    if "vision" in s:
        gen_vision(G, s)
    return G.t


def write_checkpoint(out: Path, tensors: dict[str, torch.Tensor], n_shards: int) -> None:
    from safetensors.torch import save_file

    names = list(tensors)
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    per = total / n_shards
    shards: list[list[str]] = [[]]
    acc = 0
    for nm in names:
        sz = tensors[nm].numel() * tensors[nm].element_size()
        # keep each weight and its .scale (Engram: must share a shard) together
        if acc >= per * len(shards) and len(shards) < n_shards and not nm.endswith(".scale"):
            shards.append([])
        shards[-1].append(nm)
        acc += sz
    n = len(shards)
    weight_map = {}
    for k, group in enumerate(shards):
        fname = f"model-{k + 1:05d}-of-{n:05d}.safetensors"
        save_file({nm: tensors[nm].contiguous() for nm in group}, str(out / fname), metadata={"format": "pt"})
        for nm in group:
            weight_map[nm] = fname
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1) + "\n")


# ---------------------------------------------------------------- validation with DeepInfer's loader
def validate(out: Path) -> dict:
    R = refs.setup()
    from deepinfer.model_executor.model_loader import build_model_on_meta
    from deepinfer.hugging_face.parameters import model_params

    model_cfg = R.hf_config.load_hf_model_config(out / "config.json")
    gpt = model_cfg.gpt
    gpt.runtime_max_model_len = gpt.max_position_embeddings
    gpt.max_num_seqs = 1
    gpt.max_num_batched_tokens = 4096
    gpt.max_num_decoding_tokens = 8
    gpt.max_num_prefilling_tokens = 4096
    gpt.engine_type = None
    coverage = R.hf_loading.prepare_hf_coverage(gpt, hf_dir=out)
    meta = build_model_on_meta(model_cfg)
    params = model_params(meta)
    coverage = R.hf_loading.cover_tied_parameters(coverage, set(params), n_layer=gpt.num_hidden_layers)
    missing = sorted(set(params) - coverage.model_names())
    if missing:
        raise SystemExit(f"DeepInfer: checkpoint does not cover {len(missing)} params: {missing[:20]}")
    # the vision tower is replaced by a stub in oracle_v41/refs.py (it allocates on CUDA):
    # its tensors are checked by scripts/gen_goldens_vision_tower.py, which loads them
    # into DeepInfer's own VisionTransformer / MlpProjector
    unused = sorted(n for n in set(coverage.model_names()) - set(params) if not n.startswith("vision_pipeline."))
    if unused:
        raise SystemExit(f"DeepInfer: HF tensors without a model param: {unused[:20]}")
    R.hf_loading.validate_hf_shapes(params, coverage, hf_dir=out)
    stats = cpu_load(meta, coverage, out)
    return {"params": len(params), "hf_tensors": len(coverage.weight_map), **stats}


def cpu_load(meta, coverage, out: Path) -> dict:
    """Materialize the meta tree on CPU (containers.materialize_hf_parameter) and run
    hf/weights.py:load_covered_params into it."""
    R = refs.setup()
    from deepinfer.model_executor.models.v4_modules import containers

    for nm, mod in meta.named_modules():
        for pn, p in list(mod.named_parameters(recurse=False)):
            packed = "experts.linear1" in nm or "experts.linear2" in nm
            if getattr(p, "is_engram", False):
                q = torch.nn.Parameter(torch.empty(p.shape, dtype=p.dtype), requires_grad=False)
                q.sf = torch.empty(p.sf.shape, dtype=p.sf.dtype)
            else:
                q = containers.materialize_hf_parameter(p, device="cpu", packed_fp4=packed)
            for k in set(p.__dict__) - set(q.__dict__) - {"sf"}:
                setattr(q, k, getattr(p, k))
            setattr(mod, pn, q)
    stats = R.hf_weights.load_covered_params(meta, coverage, hf_dir=out)
    return stats


# ---------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=list(SPECS))
    ap.add_argument("--no-validate", action="store_true")
    args = ap.parse_args()
    R = refs.setup()
    for name, s in SPECS.items():
        if args.only and name != args.only:
            continue
        out = OUT / name
        out.mkdir(parents=True, exist_ok=True)
        for f in out.glob("model-*.safetensors"):
            f.unlink()
        tok = build_tokenizer(s["vocab_size"], (s["image_token"],) if "image_token" in s else ())
        tok.save(str(out / "tokenizer.json"))
        cvocab = len(R.engram_metadata.CompressedVocabulary(str(out / "tokenizer.json")))
        cfg = make_config(s, cvocab)
        (out / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
        tensors = gen_weights(s, cvocab)
        write_checkpoint(out, tensors, s["n_shards"])
        size = sum(f.stat().st_size for f in out.iterdir() if f.is_file() and f.name.startswith(("model", "config", "tokenizer")))
        print(f"{name}: {len(tensors)} tensors, compressed vocab {cvocab}, {size / 1e6:.2f} MB", file=sys.stderr)
        if not args.no_validate:
            st = validate(out)
            print(f"{name}: DeepInfer loader OK: {st}", file=sys.stderr)


if __name__ == "__main__":
    main()
