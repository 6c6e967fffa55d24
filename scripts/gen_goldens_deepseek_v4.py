#!/usr/bin/env python3
# venv: deepseek
"""Golden logits for the DeepSeek-V4 forward, from an oracle we did not write.

Oracle: HF transformers 5.24 `models/deepseek_v4` (DeepseekV4ForCausalLM),
run in float32 on the CPU. The script builds tiny random V4 models from fixed
seeds that keep every block kind of the real model:

  tiny_bf16   6 layers: window-only x2, CSA (ratio 4, overlapping groups,
              lightning indexer top-3), HCA (ratio 8), CSA, HCA; mHC with 4
              copies; 3 hash-routed MoE layers then top-k routed ones; BF16
              weights with F32 norms / mHC / sinks / biases as the real
              checkpoint keeps them. config.json in the legacy spelling the
              released checkpoints use (compress_ratios, num_hash_layers,
              qk_rope_head_dim, rope_scaling).
  tiny_fp8    5 layers: window, CSA, HCA (ratio 32), CSA, window; mHC with 2
              copies; FP8 e4m3 linears with ue8m0 (F8_E8M0) 128x128 block
              scales under `<name>.scale`, routed experts in MXFP4 (I8 packed
              e2m1 pairs + F8_E8M0 scale per 32), compressor / indexer
              projections, router, embedding and head in BF16 -- the layout
              of DeepSeek-V4-Flash. config.json in the modern spelling
              (layer_types, compress_rates, rope_parameters) plus a
              quantization_config.

Checkpoints are written with the ORIGINAL DeepSeek tensor names
(layers.N.attn.wq_a.weight, layers.N.ffn.experts.E.w1.weight, ...), which is
how the released checkpoints store them; the script then reloads each folder
with `from_pretrained` (transformers' own renaming and FP8/FP4 dequantizing
loader) and checks the reloaded model gives the same logits, so the files are
proven readable by the oracle as real checkpoints are.

Weights are rounded to what the checkpoint stores (BF16, or FP8/FP4 times
their scales) before the oracle runs, so the oracle computes in float32 from
exactly the numbers in the files.

Outputs per model, under tests/data/golden/deepseek_v4/<name>/:
  config.json, model.safetensors           the checkpoint
  goldens.json                             manifest + cases (prompt ids,
                                           logits offsets, greedy ids, margins)
  logits.f32                               little-endian float32, every
                                           position of every prompt, full vocab

Checks before writing (the script fails otherwise):
  - the oracle's own cached (token by token) path agrees with its full
    prefill within 1e-4, so decode goldens are the prefill goldens;
  - no lightning-indexer top-k decision is a near tie (|k-th - (k+1)-th|
    score gap > 1e-3), so an exact C implementation must pick the same set;
  - greedy continuations have a top-1/top-2 margin recorded per step.

Usage: .venv-deepseek/bin/python scripts/gen_goldens_deepseek_v4.py
(`bash scripts/venv.sh deepseek` makes the venv from
scripts/requirements-deepseek.txt.)
"""
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers
import safetensors
import ml_dtypes
from safetensors.torch import save_file
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as mdv4

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "golden", "deepseek_v4")
GREEDY_STEPS = 32
PROMPT_LENS = [1, 3, 8, 9, 16, 23, 33, 41]
INDEXER_TIE_GAP = 1e-3

# ---- model definitions ---------------------------------------------------

COMMON = dict(
    vocab_size=256, num_key_value_heads=1, num_attention_heads=4, head_dim=64,
    n_shared_experts=1, scoring_func="sqrtsoftplus", norm_topk_prob=True,
    routed_scaling_factor=1.5, max_position_embeddings=1048576, rope_theta=10000.0,
    compress_rope_theta=160000.0, hc_sinkhorn_iters=20, hc_eps=1e-6, rms_norm_eps=1e-6,
    index_head_dim=32, index_n_heads=8, bos_token_id=0, eos_token_id=1,
    tie_word_embeddings=False, hidden_act="silu", num_nextn_predict_layers=0,
)
YARN = {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536,
        "beta_fast": 32, "beta_slow": 1}

MODELS = {
    "tiny_bf16": dict(
        seed=11, quant=False, tid_dtype=torch.int64,
        cfg=dict(COMMON, hidden_size=64, moe_intermediate_size=32, num_hidden_layers=6,
                 q_lora_rank=32, num_experts_per_tok=3, n_routed_experts=8, hc_mult=4,
                 swiglu_limit=1.5, sliding_window=8, o_groups=2, o_lora_rank=16, index_topk=3),
        legacy=dict(compress_ratios=[0, 0, 4, 128, 4, 128], compress_rate_csa=4,
                    compress_rate_hca=8, num_hash_layers=3, qk_rope_head_dim=16,
                    rope_scaling=YARN),
    ),
    "tiny_fp8": dict(
        seed=23, quant=True, tid_dtype=torch.int32,
        cfg=dict(COMMON, hidden_size=128, moe_intermediate_size=64, num_hidden_layers=5,
                 q_lora_rank=64, num_experts_per_tok=2, n_routed_experts=8, hc_mult=2,
                 swiglu_limit=2.0, sliding_window=16, o_groups=2, o_lora_rank=128, index_topk=4,
                 layer_types=["sliding_attention", "compressed_sparse_attention",
                              "heavily_compressed_attention", "compressed_sparse_attention",
                              "sliding_attention"],
                 mlp_layer_types=["hash_moe", "hash_moe", "moe", "moe", "moe"],
                 compress_rates={"compressed_sparse_attention": 4,
                                 "heavily_compressed_attention": 32},
                 partial_rotary_factor=0.25,
                 rope_parameters=dict(YARN)),
        legacy=None,
    ),
}

FP8_BLOCK = 128
QUANT_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                "scale_fmt": "ue8m0", "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}

# ---- names: HF module names -> the original checkpoint names -------------

ATTN = {"q_a_proj": "wq_a", "q_a_norm": "q_norm", "q_b_proj": "wq_b", "kv_proj": "wkv",
        "kv_norm": "kv_norm", "o_a_proj": "wo_a", "o_b_proj": "wo_b"}
COMP = {"kv_proj": "wkv", "gate_proj": "wgate", "kv_norm": "norm"}
SHARED = {"gate_proj": "w1", "down_proj": "w2", "up_proj": "w3"}


def original_name(hf):
    """One HF parameter name -> its name in a released V4 checkpoint."""
    n = hf[len("model."):] if hf.startswith("model.") else hf
    fixed = {"embed_tokens.weight": "embed.weight", "lm_head.weight": "head.weight",
             "norm.weight": "norm.weight", "hc_head.hc_fn": "hc_head_fn",
             "hc_head.hc_base": "hc_head_base", "hc_head.hc_scale": "hc_head_scale"}
    if n in fixed:
        return fixed[n]
    p = n.split(".")
    assert p[0] == "layers", hf
    pre, rest = f"layers.{p[1]}", p[2:]
    head = rest[0]
    if head == "input_layernorm":
        return f"{pre}.attn_norm.weight"
    if head == "post_attention_layernorm":
        return f"{pre}.ffn_norm.weight"
    if head in ("attn_hc", "ffn_hc"):
        return f"{pre}.hc_{head[:-3]}_{rest[1]}"
    if head == "self_attn":
        if rest[1] == "sinks":
            return f"{pre}.attn.attn_sink"
        if rest[1] != "compressor":
            return f"{pre}.attn.{ATTN[rest[1]]}.{rest[2]}"
        if rest[2] == "position_bias":
            return f"{pre}.attn.compressor.ape"
        if rest[2] != "indexer":
            return f"{pre}.attn.compressor.{COMP[rest[2]]}.{rest[3]}"
        if rest[3] == "position_bias":
            return f"{pre}.attn.indexer.compressor.ape"
        if rest[3] == "q_b_proj":
            return f"{pre}.attn.indexer.wq_b.{rest[4]}"
        if rest[3] == "scorer":
            return f"{pre}.attn.indexer.weights_proj.{rest[5]}"
        return f"{pre}.attn.indexer.compressor.{COMP[rest[3]]}.{rest[4]}"
    if head == "mlp":
        if rest[1] == "gate":
            leaf = {"weight": "weight", "e_score_correction_bias": "bias", "tid2eid": "tid2eid"}[rest[2]]
            return f"{pre}.ffn.gate.{leaf}"
        if rest[1] == "shared_experts":
            return f"{pre}.ffn.shared_experts.{SHARED[rest[2]]}.weight"
    raise KeyError(hf)


# Tensors the released checkpoint keeps in float32 (transformers'
# _keep_in_fp32_modules_strict) and the linears it leaves in BF16.
def keeps_f32(hf):
    return any(k in hf for k in ("attn_hc.", "ffn_hc.", "hc_head.", "sinks", "position_bias",
                                 "e_score_correction_bias", "q_a_norm", "kv_norm",
                                 "input_layernorm", "post_attention_layernorm")) or hf == "model.norm.weight"


def stays_bf16_when_quantized(hf):
    return any(k in hf for k in ("compressor.kv_proj", "compressor.gate_proj",
                                 "indexer.kv_proj", "indexer.gate_proj", "weights_proj",
                                 "embed_tokens", "lm_head", "mlp.gate.weight"))


# ---- quantizers (reference numerics of the released checkpoints) ---------

def bf16_round(t):
    return t.to(torch.bfloat16).to(torch.float32)


def fp8_block_quant(w):
    """float32 [R, C] -> (e4m3 [R, C], e8m0 scale [ceil(R/B), ceil(C/B)], dequantized f32)."""
    R, C = w.shape
    sr, sc = -(-R // FP8_BLOCK), -(-C // FP8_BLOCK)
    q = torch.empty(R, C, dtype=torch.float8_e4m3fn)
    s = torch.empty(sr, sc, dtype=torch.float32)
    for i in range(sr):
        for j in range(sc):
            blk = w[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK]
            amax = float(blk.abs().max())
            scale = 2.0 ** math.ceil(math.log2(amax / 448.0)) if amax > 0 else 1.0
            s[i, j] = scale
            q[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK] = (blk / scale).to(torch.float8_e4m3fn)
    deq = q.to(torch.float32) * s.repeat_interleave(FP8_BLOCK, 0)[:R].repeat_interleave(FP8_BLOCK, 1)[:, :C]
    return q, s.to(torch.float8_e8m0fnu), deq


E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)


def mxfp4_quant(w):
    """float32 [R, C] -> (int8 packed [R, C/2], e8m0 scale [R, C/32], dequantized f32).
    Scale 2^(floor(log2(amax)) - 2) (OCP), nearest e2m1 code; byte i holds column
    2i in its low nibble and 2i+1 in its high nibble."""
    a = w.numpy().astype(np.float32)
    R, C = a.shape
    g = a.reshape(R, C // 32, 32)
    amax = np.abs(g).max(axis=2)
    e = np.where(amax > 0, np.floor(np.log2(np.maximum(amax, 1e-30))) - 2, -127).astype(np.int32)
    scale = np.exp2(e.astype(np.float64)).astype(np.float32)
    x = g / scale[..., None]
    mag = np.abs(x)
    code = np.abs(mag[..., None] - E2M1).argmin(axis=-1).astype(np.uint8)
    code |= (np.signbit(x) & (code != 0)).astype(np.uint8) << 3
    code = code.reshape(R, C)
    packed = (code[:, 0::2] | (code[:, 1::2] << 4)).astype(np.uint8)
    deq = (np.where(code & 8, -1.0, 1.0) * E2M1[code & 7]).reshape(R, C // 32, 32) * scale[..., None]
    sbytes = (e + 127).astype(np.uint8)
    return (torch.from_numpy(packed.view(np.int8).copy()),
            torch.from_numpy(sbytes.copy()).view(torch.float8_e8m0fnu),
            torch.from_numpy(deq.reshape(R, C).astype(np.float32)))


# ---- building a model ----------------------------------------------------

def make_config(spec):
    cfg = dict(spec["cfg"])
    if spec["legacy"]:
        cfg.update(spec["legacy"])
    return DeepseekV4Config(**cfg)


def randomize(model, cfg, gen, tid_dtype):
    """Random weights with the scales that keep activations O(1), and the
    parameters transformers initializes to constants (sinks, biases, mHC
    base/scale, tid2eid) made random so every term is exercised."""
    sd = model.state_dict()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("position_bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            elif name.endswith("sinks"):
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name.endswith((".base", "hc_base")):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            elif name.endswith((".scale", "hc_scale")):
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
            elif name.endswith((".fn", "hc_fn")):
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
            elif "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith("gate_up_proj") or name.endswith("down_proj") and p.dim() == 3:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
        for i, layer in enumerate(model.model.layers):
            g = layer.mlp.gate
            if hasattr(g, "e_score_correction_bias"):
                g.e_score_correction_bias.copy_(torch.randn(g.e_score_correction_bias.shape, generator=gen) * 0.3)
            if hasattr(g, "tid2eid"):
                rows = [torch.randperm(cfg.n_routed_experts, generator=gen)[:cfg.num_experts_per_tok]
                        for _ in range(cfg.vocab_size)]
                g.tid2eid.copy_(torch.stack(rows).to(g.tid2eid.dtype))


def to_checkpoint(model, cfg, quant, tid_dtype):
    """Rounds the model's weights to what the checkpoint stores (in place) and
    returns {original name: tensor} to save."""
    out = {}
    E, I = cfg.n_routed_experts, cfg.moe_intermediate_size
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + [
                (n, b) for n, b in model.named_buffers() if n.endswith(("tid2eid", "e_score_correction_bias"))]:
            if name.endswith("tid2eid"):
                out[original_name(name)] = p.to(tid_dtype).contiguous()
                continue
            if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
                base = original_name(name.replace("experts.gate_up_proj", "gate.weight").replace(
                    "experts.down_proj", "gate.weight")).replace(".gate.weight", ".experts")
                for e in range(E):
                    if name.endswith("gate_up_proj"):
                        parts = [("w1", p[e, :I]), ("w3", p[e, I:])]
                    else:
                        parts = [("w2", p[e])]
                    for wname, w in parts:
                        key = f"{base}.{e}.{wname}"
                        if quant:
                            packed, scale, deq = mxfp4_quant(w.clone())
                            out[key + ".weight"], out[key + ".scale"] = packed, scale
                            w.copy_(deq)
                        else:
                            w.copy_(bf16_round(w))
                            out[key + ".weight"] = w.to(torch.bfloat16).contiguous()
                continue
            key = original_name(name)
            if keeps_f32(name):
                out[key] = p.detach().to(torch.float32).contiguous()
            elif quant and p.dim() == 2 and not stays_bf16_when_quantized(name):
                q, s, deq = fp8_block_quant(p.detach().clone())
                out[key], out[key[:-len(".weight")] + ".scale"] = q, s
                p.copy_(deq)
            else:
                p.copy_(bf16_round(p))
                out[key] = p.detach().to(torch.bfloat16).contiguous()
    return out


def write_config(path, spec, cfg):
    if spec["legacy"]:
        d = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4"}
        d.update(spec["cfg"])
        d.update(spec["legacy"])
        d["torch_dtype"] = "bfloat16"
    else:
        d = json.loads(cfg.to_json_string())
        d["architectures"] = ["DeepseekV4ForCausalLM"]
        d["quantization_config"] = dict(QUANT_CONFIG)
        d["expert_dtype"] = "fp4"
        d["torch_dtype"] = "bfloat16"
        d.pop("transformers_version", None)
    with open(path, "w") as f:
        json.dump(d, f, indent=2, sort_keys=True)
        f.write("\n")


# ---- checks --------------------------------------------------------------

class IndexerProbe:
    """Records the lightning indexer's scores to check that no top-k choice
    is a near tie (the C side must select the same set)."""

    def __init__(self):
        self.worst = float("inf")
        self.active = False
        self.orig = mdv4.DeepseekV4Indexer.forward
        probe = self

        def forward(mod, hidden_states, q_residual, position_ids, cache, layer_idx):
            saved = mod.scorer.forward
            def scorer_fwd(q, ckv, hs):
                s = saved(q, ckv, hs)
                if probe.active:
                    probe.check(s, position_ids, mod.compress_rate, mod.index_topk)
                return s
            mod.scorer.forward = scorer_fwd
            try:
                return probe.orig(mod, hidden_states, q_residual, position_ids, cache, layer_idx)
            finally:
                mod.scorer.forward = saved
        mdv4.DeepseekV4Indexer.forward = forward

    def check(self, scores, position_ids, ratio, topk):
        s = scores[0].double()
        for t in range(s.shape[0]):
            valid = int((position_ids[0, t] + 1) // ratio)
            if valid <= topk:
                continue
            v = torch.sort(s[t, :valid], descending=True).values
            self.worst = min(self.worst, float(v[topk - 1] - v[topk]))


def full_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids]), use_cache=False).logits[0].double()


def cached_logits(model, ids):
    """Token by token through transformers' DynamicCache (its decode path)."""
    with torch.no_grad():
        out = model(torch.tensor([ids[:1]]), use_cache=True)
        cache, rows = out.past_key_values, [out.logits[0, -1]]
        for t in ids[1:]:
            out = model(torch.tensor([[t]]), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            rows.append(out.logits[0, -1])
    return torch.stack(rows).double()


def greedy(model, ids, steps):
    with torch.no_grad():
        g = model.generate(torch.tensor([ids]), max_new_tokens=steps, do_sample=False,
                           output_scores=True, return_dict_in_generate=True,
                           eos_token_id=None, pad_token_id=0)
    new = g.sequences[0, len(ids):].tolist()
    margins = []
    for sc in g.scores:
        top2 = torch.topk(sc[0].double(), 2).values
        margins.append(float(top2[0] - top2[1]))
    return new, margins


def write_tokenizer(d, vocab_size):
    """A byte-level BPE tokenizer.json with one token per byte and no merges,
    so `deepinfer run` can take text and print text for the tiny models
    (the real DeepSeek tokenizer has 128K tokens, more than their vocab).
    Built with HF `tokenizers`, the tokenization oracle."""
    import tokenizers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel
    alphabet = sorted(ByteLevel.alphabet(), key=lambda ch: bytes_of(ch))
    assert len(alphabet) == 256 == vocab_size
    tok = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.save(os.path.join(d, "tokenizer.json"))


def bytes_of(ch):
    """The byte GPT-2's byte-to-unicode table maps to ch (its sort key)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip((chr(c) for c in cs), bs))[ch]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def build(name, spec, probe):
    """Tries seeds from spec["seed"] on until no indexer decision is a near
    tie; returns after writing the first good one."""
    for seed in range(spec["seed"], spec["seed"] + 50):
        probe.worst = float("inf")
        if build_seed(name, spec, probe, seed):
            return
    raise SystemExit(f"{name}: every seed had an indexer near tie")


def build_seed(name, spec, probe, seed):
    cfg = make_config(spec)
    torch.manual_seed(seed)
    model = DeepseekV4ForCausalLM(cfg).to(torch.float32).eval()
    gen = torch.Generator().manual_seed(seed)
    randomize(model, cfg, gen, spec["tid_dtype"])
    tensors = to_checkpoint(model, cfg, spec["quant"], spec["tid_dtype"])

    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    write_config(os.path.join(d, "config.json"), spec, cfg)
    write_tokenizer(d, cfg.vocab_size)

    rng = np.random.default_rng(seed)
    prompts = [[int(x) for x in rng.integers(2, cfg.vocab_size, size=n)] for n in PROMPT_LENS]

    # The oracle's loader must read the folder as it reads a real checkpoint.
    kw = {"torch_dtype": torch.float32}
    if spec["quant"]:
        kw["quantization_config"] = transformers.FineGrainedFP8Config(
            dequantize=True, weight_block_size=[FP8_BLOCK, FP8_BLOCK], scale_fmt="ue8m0",
            expert_dtype="fp4")
    reloaded = DeepseekV4ForCausalLM.from_pretrained(d, **kw).eval()
    a, b = full_logits(model, prompts[-1]), full_logits(reloaded, prompts[-1])
    reload_diff = float((a - b).abs().max())
    assert reload_diff < 1e-5, f"{name}: reloaded checkpoint differs by {reload_diff}"

    probe.active = True
    for ids in prompts:
        full_logits(model, ids)
    probe.active = False
    if probe.worst <= INDEXER_TIE_GAP:
        print(f"{name}: seed {seed}: indexer near tie ({probe.worst:.3g}), next seed")
        return False
    cases, blobs, offset, worst_cache = [], [], 0, 0.0
    for i, ids in enumerate(prompts):
        lg = full_logits(model, ids)
        cl = cached_logits(model, ids)
        worst_cache = max(worst_cache, float((lg - cl).abs().max()))
        case = {"prompt": ids, "offset": offset, "n_positions": len(ids)}
        if i in (2, 5, 7):
            g, m = greedy(model, ids, GREEDY_STEPS)
            case["greedy"] = g
            case["greedy_margins"] = [round(x, 6) for x in m]
        cases.append(case)
        blobs.append(lg.float().numpy())
        offset += lg.numel()
    assert worst_cache < 1e-4, f"{name}: oracle cached path differs from prefill by {worst_cache}"
    np.concatenate([x.reshape(-1) for x in blobs]).astype("<f4").tofile(os.path.join(d, "logits.f32"))

    manifest = {
        "oracle": "transformers DeepseekV4ForCausalLM (models/deepseek_v4), float32, CPU",
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                     "safetensors": safetensors.__version__, "numpy": np.__version__,
                     "ml_dtypes": ml_dtypes.__version__},
        "script": "scripts/gen_goldens_deepseek_v4.py",
        "seed": seed,
        "n_vocab": cfg.vocab_size,
        "weights": "fp8 e4m3 + ue8m0 128x128 (.scale), mxfp4 experts" if spec["quant"] else "bf16 + f32",
        "model_sha256": sha256(os.path.join(d, "model.safetensors")),
        "checks": {"oracle_reload_max_abs": reload_diff,
                   "oracle_cached_vs_prefill_max_abs": worst_cache,
                   "indexer_min_topk_gap": probe.worst},
        "logits": "logits.f32: float32 LE, cases[i].offset floats in, (n_positions, n_vocab)",
        "cases": cases,
    }
    with open(os.path.join(d, "goldens.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(f"{name}: reload {reload_diff:.2e}, cache {worst_cache:.2e}, indexer gap {probe.worst:.3g}, "
          f"min greedy margin {min(min(c.get('greedy_margins', [9])) for c in cases):.3g}, "
          f"{os.path.getsize(os.path.join(d, 'model.safetensors'))} bytes, seed {seed}")
    return True


def main():
    torch.set_num_threads(2)
    probe = IndexerProbe()
    if sys.argv[1:] == ["--tokenizer-only"]:
        for name, spec in MODELS.items():
            write_tokenizer(os.path.join(OUT, name), spec["cfg"]["vocab_size"])
        return
    names = sys.argv[1:] or list(MODELS)
    for name in names:
        build(name, MODELS[name], probe)


if __name__ == "__main__":
    main()
