"""DeepSeek-V4.1-Flash forward built from DeepSeek's reference functions.

Every step calls a reference: tile-kernels torch refs (TK), DeepInfer's tl/*_ref and
metadata classes, deepinfer-gemm's test references (DG). Lines without a pure
reference (weight gathering, RoPE tables, the sparse attention with sink over the
index sets, top-k selection) are transcribed and cite the DeepInfer function they
follow. See NUMERICS.md for the rounding points of `deepinfer` mode.
"""

from __future__ import annotations

import json
import math
import time
import types
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open

from . import refs
from .shim import F64, lie, plain


# ------------------------------------------------------------------ numerics
class Num:
    """Rounding points of one mode. `ideal`: float64, all identity. `deepinfer`: float32 + quantization."""

    def __init__(self, mode: str) -> None:
        assert mode in ("ideal", "deepinfer")
        self.mode = mode
        self.ideal = mode == "ideal"
        self.dt = torch.float64 if self.ideal else torch.float32
        self.R = refs.setup()
        self.TK = self.R.TK

    def call(self, fn, *args, lie_args=(), **kwargs):
        """Run a reference; in ideal mode under the float64 shim (shim.py)."""
        if not self.ideal:
            return fn(*args, **kwargs)
        args = tuple(lie(a) if i in lie_args else a for i, a in enumerate(args))
        with F64():
            out = fn(*args, **kwargs)
        if isinstance(out, tuple):
            return tuple(plain(o) for o in out)
        return plain(out)

    def bf(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.ideal else x.to(torch.bfloat16).to(torch.float32)

    def fp8act(self, x: torch.Tensor) -> torch.Tensor:
        """per-token e4m3 with ue8m0 scale per 32 (lay/linear.py:get_fp8_cast_params; TK cast.py:cast/cast_back)."""
        if self.ideal:
            return x
        shp = x.shape
        x2 = x.reshape(-1, shp[-1]).float().contiguous()
        q = self.TK.cast(x2, "e4m3", block_size=(1, 32), round_sf=True)
        return self.TK.cast_back(q, "fp32", block_size=(1, 32)).reshape(shp)

    def mxfp8(self, x: torch.Tensor) -> torch.Tensor:
        """window KV, cache_common.py:V41_FORMAT (e4m3, ue8m0 per 32, round_sf) round trip."""
        return self.fp8act(x)

    def fp4kv(self, x: torch.Tensor) -> torch.Tensor:
        """compressed KV, cache_common.py:V41_FP4_FORMAT via ref_cast_from_bf16 / ref_cast_to_bf16."""
        if self.ideal:
            return x
        cc = self.R.cache_common
        data = cc.ref_cast_from_bf16(x.to(torch.bfloat16).contiguous(), cc.V41_FP4_FORMAT)
        return cc.ref_cast_to_bf16(data, cc.V41_FP4_FORMAT).float()

    def fp4idx(self, x: torch.Tensor) -> torch.Tensor:
        """index q/k, cache_common.py:FP4_INDEX_KV_FORMAT (e2m1, ue8m0 per 32, round_sf) round trip (TK cast)."""
        if self.ideal:
            return x
        shp = x.shape
        x2 = x.reshape(-1, shp[-1]).float().contiguous()
        q = self.TK.cast(x2, "e2m1", block_size=(1, 32), round_sf=True)
        return self.TK.cast_back(q, "fp32", block_size=(1, 32)).reshape(shp)

    def mm(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """a @ b. deepinfer mode: products summed in float64 and rounded once to fp32, so the result does not
        depend on the BLAS blocking (prefill and decode see the same bits); GPU kernels sum in fp32 in some order."""
        if self.ideal:
            return a @ b
        return (a.double() @ b.double()).float()

    def lin8(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """FP8/FP4 GEMM: fp8act(x) @ W^T, fp32 accumulate (lay/linear.py:apply_weight_fp8). Caller rounds the output."""
        return self.mm(self.fp8act(x), w.T)

    def rowwise(self, fn, split, *args, **kwargs):
        """deepinfer mode: call a reference one token row at a time (its internal fp32 GEMM then rounds the
        same way in prefill and decode). The positional args numbered in `split` are split along dim 0."""
        if self.ideal:
            return self.call(fn, *args, **kwargs)
        n = args[split[0]].shape[0]
        outs = [fn(*[a[i:i + 1] if j in split else a for j, a in enumerate(args)], **kwargs) for i in range(n)]
        if isinstance(outs[0], dict):
            return {k: torch.cat([o[k] for o in outs]) for k in outs[0]}
        if isinstance(outs[0], tuple):
            return tuple(torch.cat([o[j] for o in outs]) if outs[0][j].ndim else None for j in range(len(outs[0])))
        return torch.cat(outs)

    def norm(self, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        """RMSNorm, TK norm.py:norm_forward_ref (= tl/cuda/norm.py kernel): bf16(x*rstd*w)."""
        xin = x if self.ideal else x.to(torch.bfloat16)
        out = self.call(self.TK.norm_forward_ref, xin, w if self.ideal else w.to(torch.bfloat16), eps)[0]
        return out.to(self.dt)

    def rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pos: torch.Tensor,
             conjugate: bool = False) -> torch.Tensor:
        """interleaved RoPE on the last 64 dims (v4m attn: offset = head_dim - rope), TK rope.py:rotary_embedding_ref."""
        r = cos.shape[-1] * 2
        head = x[..., :-r]
        tail = x[..., -r:]
        squeeze = tail.ndim == 2
        if squeeze:
            tail = tail.unsqueeze(1)
        out = self.call(self.TK.rotary_embedding_ref, tail.contiguous(), cos, sin, pos, interleaved=True, conjugate=conjugate)
        if squeeze:
            out = out.squeeze(1)
        return self.bf(torch.cat([head, out], dim=-1))


# ------------------------------------------------------------------ config / weights
@dataclass
class Cfg:
    raw: dict
    t: dict

    def __getattr__(self, k):
        try:
            return self.t[k]
        except KeyError:
            raise AttributeError(k) from None

    @property
    def n_layer(self) -> int:
        return self.t["num_hidden_layers"]

    def source_map(self, key: str, default_key: str | None = None) -> dict[int, int]:
        ids = self.t.get(key) or (self.t[default_key] if default_key else None)
        # hf/config.py:_source_map
        return {layer: max(s for s in sorted(ids) if s <= layer) for layer in range(min(ids), self.n_layer)}


def ue8m0(scale: torch.Tensor) -> torch.Tensor:
    return refs.setup().hf_weights._ue8m0_to_fp32(scale)


def load_checkpoint(d: Path) -> tuple[Cfg, dict[str, torch.Tensor]]:
    """Read every tensor from the shards and dequantize what the checkpoint stores
    (TK cast.py:cast_back; E8M0 via hf/weights.py:_ue8m0_to_fp32). fp32 results."""
    R = refs.setup()
    TK = R.TK
    raw = json.loads((d / "config.json").read_text())
    cfg = Cfg(raw, raw["text_config"])
    idx = json.loads((d / "model.safetensors.index.json").read_text())["weight_map"]
    stored: dict[str, torch.Tensor] = {}
    for shard in sorted(set(idx.values())):
        with safe_open(str(d / shard), "pt") as f:
            for k in f.keys():
                stored[k] = f.get_tensor(k)
    W: dict[str, torch.Tensor] = {}
    for k, v in stored.items():
        if k.endswith(".scale"):
            continue
        sk = k.removesuffix(".weight") + ".scale"
        if v.dtype == torch.float8_e4m3fn:
            sf = ue8m0(stored[sk])
            block = (1, 32) if k.endswith("engram.embed.weight") else (32, 32)
            W[k] = TK.cast_back((v, sf), "fp32", block_size=block)
        elif v.dtype == torch.int8:
            W[k] = TK.cast_back((v, ue8m0(stored[sk])), "fp32", block_size=(1, 32))
        else:
            W[k] = v.float()
    return cfg, W


def rope_table(theta: float, rdim: int, max_pos: int, yarn: dict | None, dt: torch.dtype):
    """cos/sin tables. Transcribed from lay/rotary_embedding.py: RotaryEmbedding._compute_inv_freq,
    YaRNScalingRotaryEmbedding._compute_inv_freq (+ _yarn_find_correction_range, _yarn_linear_ramp_mask),
    _build_cos_sin_cache (polar, mscale 1.0 because mscale=False). fp32 in deepinfer mode, float64 in ideal."""
    ar = torch.arange(0, rdim, 2, dtype=dt)
    pos_freqs = theta ** (ar / rdim)  # lay/rotary_embedding.py:_compute_inv_freq
    inv = 1.0 / pos_freqs
    if yarn:
        f, omax = yarn["factor"], yarn["original_max_position_embeddings"]

        def corr_dim(rot):  # _yarn_find_correction_dim
            return (rdim * math.log(omax / (rot * 2 * math.pi))) / (2 * math.log(theta))

        low = max(math.floor(corr_dim(yarn["beta_fast"])), 0)  # _yarn_find_correction_range
        high = min(math.ceil(corr_dim(yarn["beta_slow"])), rdim - 1)
        if low == high:
            high += 0.001  # _yarn_linear_ramp_mask
        ramp = ((torch.arange(rdim // 2, dtype=dt) - low) / (high - low)).clamp(0, 1)
        mask = 1 - ramp  # YaRNScalingRotaryEmbedding._compute_inv_freq (extrapolation_factor 1)
        inv = (1.0 / (f * pos_freqs)) * (1 - mask) + inv * mask
    t = torch.arange(max_pos, dtype=dt)
    freqs = torch.outer(t, inv)  # _build_cos_sin_cache
    cis = torch.polar(torch.ones_like(freqs), freqs)
    return cis.real.contiguous(), cis.imag.contiguous()


# ------------------------------------------------------------------ state
@dataclass
class LayerState:
    win: dict = field(default_factory=dict)  # pos -> window key (ring of the last W positions)
    ckv: list = field(default_factory=list)  # compressed KV entries (kv-source layers)
    kidx: list = field(default_factory=list)  # index keys (index-K sources)
    cstate: torch.Tensor | None = None  # ratio-2 compressor state cache [1, S, 2, 512] (tl/compress.py layout)


@dataclass
class State:
    ids: list = field(default_factory=list)
    layers: dict = field(default_factory=dict)
    topk: dict = field(default_factory=dict)  # index-source layer -> list of per-position index lists
    ties: dict = field(default_factory=dict)
    # SWA bounded replay (DeepInfer's YoCo compact prefill): layers >= n_prefill run only on
    # positions >= replay_from (= prompt length - keep); None = exact
    replay_from: int | None = None


class Model:
    def __init__(self, ckpt: Path, mode: str) -> None:
        self.num = Num(mode)
        self.R = refs.setup()
        self.TK = self.R.TK
        self.dir = Path(ckpt)
        self.cfg, W = load_checkpoint(self.dir)
        self.W = {k: v.to(self.num.dt) for k, v in W.items()}
        c = self.cfg
        self.eps = c.rms_norm_eps
        self.L = c.n_layer
        self.ratios = c.compress_ratios
        self.kv_map = c.source_map("kv_source_layer_ids")
        self.idx_map = c.source_map("index_source_layer_ids")
        self.idxk_map = c.source_map("index_k_source_layer_ids", "kv_source_layer_ids")
        self.kv_src = set(c.kv_source_layer_ids)
        self.idx_src = set(c.index_source_layer_ids)
        self.idxk_src = set(c.t.get("index_k_source_layer_ids") or c.kv_source_layer_ids)
        self.cand_src = c.t.get("candidate_source_layer_id")
        # hugging_face/config.py:_n_prefill_layer: the first ratio-1 layer (YoCo boundary)
        self.n_prefill = next((i for i, r in enumerate(self.ratios[: self.L]) if r == 1), self.L)
        maxp = c.max_position_embeddings
        dt = self.num.dt
        self.rope_base = rope_table(c.rope_theta, c.qk_rope_head_dim, maxp, None, dt)
        self.rope_comp = rope_table(c.compress_rope_theta, c.qk_rope_head_dim, maxp, c.t.get("rope_scaling"), dt)
        self._init_engram()
        self._patch_dg_attention()

    # -------------------------------------------------------------- engram metadata
    def _init_engram(self) -> None:
        self.engram_layers = list(self.cfg.t.get("engram_layer_ids") or [])
        if not self.engram_layers:
            return
        mcfg = self.R.hf_config.load_hf_model_config(self.dir / "config.json")
        em = self.R.engram_metadata
        self.ngram = em.NgramHashMapping(mcfg.gpt.engram, device="cpu")  # v4m/engram_metadata.py
        self.cvocab = em.CompressedVocabulary(str(self.dir / "tokenizer.json"))
        self.comp = torch.tensor(self.cvocab.lookup_table, dtype=torch.int64)
        self.max_ngram = self.cfg.engram_max_ngram_size

    def ngram_ids(self, ids: list[int], positions: list[int]) -> torch.Tensor:
        """ng[t, r] = comp[ids[p-r]], pad (comp[2], v4m/engram.py:CompressedTokenizer.compressed_pad_token)
        before the sequence start (csrc prepare_tensor_input_base.cpp:fill_engram_row). Image ids
        (>= vocab) compress to the image sentinel, and fill_engram_row pads from the first one on."""
        pad = int(self.comp[2])
        V = self.cfg.vocab_size
        rows = []
        for p in positions:
            row, hit = [], False
            for r in range(self.max_ngram):
                if hit or p - r < 0:
                    row.append(pad)
                elif ids[p - r] >= V:
                    hit = True
                    row.append(pad)
                else:
                    row.append(int(self.comp[ids[p - r]]))
            rows.append(row)
        return torch.tensor(rows, dtype=torch.int32)

    def hashes(self, ids: list[int], positions: list[int]) -> torch.Tensor:
        ng = self.ngram_ids(ids, positions)
        return self.TK.engram_hash_ref(ng, self.ngram.ngram_multipliers, self.ngram.ngram_vocab_sizes,
                                       self.ngram.ngram_offsets)  # [n_layers, n, cols]

    def _patch_dg_attention(self) -> None:
        # DG tests/test_attention.py:ref_mqa_logits allocates with device='cuda'; give it a torch
        # namespace whose factories drop the device argument (the function itself is unchanged).
        mod = self.R.dg_attn

        def nodev(fn):
            def wrapped(*a, **k):
                k.pop("device", None)
                return fn(*a, **k)
            return wrapped

        ns = types.SimpleNamespace(**{k: getattr(torch, k) for k in dir(torch) if not k.startswith("__")})
        for k in ("arange", "empty", "zeros", "full", "ones"):
            setattr(ns, k, nodev(getattr(torch, k)))
        mod.torch = ns

    # -------------------------------------------------------------- sub-modules
    def w(self, k: str) -> torch.Tensor:
        return self.W[k]

    def mhc_pre(self, pfx: str, sub: str, R: torch.Tensor, prev_mix: torch.Tensor, norm_w: torch.Tensor,
                x=None, post=None, comb=None):
        """post (optional, fused) + shifted pre + RMSNorm: DG tests/test_mega_mhc.py:mhc_reference.
        Without x, the post is the identity (x = 0, post = 0, comb = I) so R passes through exactly."""
        n, m, d = R.shape
        dt = self.num.dt
        if x is None:
            x = torch.zeros(n, d, dtype=dt)
            post = torch.zeros(n, m, 1, dtype=dt)
            comb = torch.eye(m, dtype=dt).expand(n, m, m).contiguous()
        Rin = R if self.num.ideal else R.to(torch.bfloat16)
        xin = x if self.num.ideal else x.to(torch.bfloat16)
        out = self.num.rowwise(
            self.R.dg_mhc.mhc_reference, (0, 1, 2, 3, 18), xin, Rin, post, comb,
            self.w(f"{pfx}.hc_{sub}_fn"), self.w(f"{pfx}.hc_{sub}_scale"), self.w(f"{pfx}.hc_{sub}_base"),
            norm_w if self.num.ideal else norm_w.to(torch.bfloat16),
            m, self.eps, self.cfg.hc_eps, 2.0, self.cfg.hc_eps, self.cfg.hc_sinkhorn_iters, self.eps, 1.0,
            "bf16", 0, prev_mix,
        )
        out = {k: plain(v) for k, v in out.items()}
        return (out["new_residual"].to(dt), out["y_bf16"].to(dt), out["new_prev_mix"].to(dt),
                out["new_post_mix"].to(dt), out["new_comb_res_mix"].to(dt))

    def mhc_post(self, x, R, post, comb):
        """TK mhc.py:mhc_post_ref: bf16(post*x + C^T R)."""
        dt = self.num.dt
        xin = x if self.num.ideal else x.to(torch.bfloat16)
        Rin = R if self.num.ideal else R.to(torch.bfloat16)
        out = self.num.call(self.TK.mhc_post_ref, xin.unsqueeze(0), Rin.unsqueeze(0), post.unsqueeze(0), comb.unsqueeze(0))
        return out.squeeze(0).to(dt)

    def engram(self, L: int, R: torch.Tensor, hashes: torch.Tensor, image_mask: torch.Tensor | None = None) -> torch.Tensor:
        """v4m/engram.py:Engram.forward: kv = fused_kv_projection(rows) ; TK engram.py:engram_gate_ref."""
        li = self.engram_layers.index(L)
        h = hashes[li].long()  # [n, cols]
        if image_mask is not None:  # TK engram_hash_ref masks image rows to -1; the gate leaves them unchanged
            h = torch.where(image_mask[:, None], 0, h)
        table = self.w(f"layers.{L}.engram.embed.weight")
        rows = table[h].reshape(h.shape[0], -1)  # row gather, columns n-major then head [guess: EngramBuffer.fetch]
        n, m, d = R.shape
        kv = self.num.bf(self.num.mm(rows, self.w(f"layers.{L}.engram.wkv.weight").T)).view(n, m + 1, d)
        wh = self.w(f"layers.{L}.engram.q_weight")
        we = self.w(f"layers.{L}.engram.k_weight")
        cast = (lambda t: t) if self.num.ideal else (lambda t: t.to(torch.bfloat16))
        out = self.num.call(self.TK.engram_gate_ref, cast(R), cast(kv), cast(wh), cast(we), 1e-6, self.eps,
                            image_token_mask=image_mask)
        return out.to(self.num.dt)

    def moe(self, pfx: str, x: torch.Tensor, image_mask: torch.Tensor | None = None) -> torch.Tensor:
        """v4m/mlp.py:DeepseekMoE.forward (gate_forward, routed_experts_forward, shared_forward)."""
        num = self.num
        c = self.cfg
        f = f"{pfx}.ffn"
        n_exp = self.w(f"{f}.gate.weight").shape[0]
        topk = c.num_experts_per_tok if pfx.startswith("layers.") else c.dspark_num_experts_per_tok
        logits = num.mm(x, self.w(f"{f}.gate.weight").T)  # bf16 x bf16 -> fp32
        logits = logits if num.ideal else logits.float()
        idx, wts = num.call(self.TK.moe_topk_gate_forward, logits, topk, False, 0, c.routed_scaling_factor, 0,
                            "sqrtsoftplus", bias=self.w(f"{f}.gate.bias"),
                            image_bias=self.w(f"{f}.gate.bias_vl") if image_mask is not None else None,
                            image_token_mask=image_mask)
        lim = c.swiglu_limit
        acc = torch.zeros_like(x)
        for k in range(topk):
            out_k = torch.zeros_like(x)
            for e in idx[:, k].unique().tolist():
                rows = (idx[:, k] == e).nonzero().squeeze(1)
                w13 = torch.cat([self.w(f"{f}.experts.{e}.w1.weight"), self.w(f"{f}.experts.{e}.w3.weight")])
                gu = num.bf(num.lin8(x[rows], w13)).contiguous()
                a = num.call(self.TK.swiglu_forward, gu if num.ideal else gu.float(), topk_weights=wts[rows, k].to(gu.dtype),
                             clamp_value=lim, lie_args=(0,))
                out_k[rows] = num.bf(num.lin8(a.to(num.dt), self.w(f"{f}.experts.{e}.w2.weight")))
            acc = acc + out_k
        w13 = torch.cat([self.w(f"{f}.shared_experts.w1.weight"), self.w(f"{f}.shared_experts.w3.weight")])
        gu = num.bf(num.lin8(x, w13)).contiguous()
        a = num.call(self.TK.swiglu_forward, gu, clamp_value=lim, lie_args=(0,))
        shared = num.bf(num.lin8(a.to(num.dt), self.w(f"{f}.shared_experts.w2.weight")))
        return num.bf(acc + shared)  # deep_ep combine: routed sum + shared (bias), bf16 [guess: order]

    # -------------------------------------------------------------- attention
    def attention(self, L: int, x: torch.Tensor, pos: torch.Tensor, st: State, decode: bool,
                  kv_stored: bool = False) -> torch.Tensor:
        num = self.num
        c = self.cfg
        a = f"layers.{L}.attn"
        H, D, rd = c.num_attention_heads, c.head_dim, c.qk_rope_head_dim
        n = x.shape[0]
        ratio = self.ratios[L]
        cos, sin = self.rope_comp if ratio > 0 else self.rope_base
        ls = st.layers.setdefault(L, LayerState())
        # v4m/attn.py:_project_q_and_swa (merged [wq_a; wkv])
        qa_kv = num.bf(num.lin8(x, torch.cat([self.w(f"{a}.wq_a.weight"), self.w(f"{a}.wkv.weight")])))
        q_a, kv_w = qa_kv[:, : c.q_lora_rank], qa_kv[:, c.q_lora_rank:]
        # _project_q_b: q_b_proj(q_a_norm(q_a)), indexer wq_b merged on index sources
        is_idx = L in self.idx_src and ratio > 0
        wqb = self.w(f"{a}.wq_b.weight")
        if is_idx:
            wqb = torch.cat([wqb, self.w(f"{a}.indexer.wq_b.weight")])
        qfull = num.bf(num.lin8(num.norm(q_a, self.w(f"{a}.q_norm.weight"), self.eps), wqb))
        q = num.rope(qfull[:, : H * D].reshape(n, H, D), cos, sin, pos)
        # _prepare_swa_kv: norm -> rope -> MXFP8 (cast_back in prefill)
        k_w = num.mxfp8(num.rope(num.norm(kv_w, self.w(f"{a}.kv_norm.weight"), self.eps), cos, sin, pos))
        W = c.sliding_window
        for i, p in enumerate(pos.tolist()):
            ls.win[p] = k_w[i]
        sel = None
        if ratio > 0:
            sel = self.compressed_and_index(L, x, qfull[:, H * D:], pos, st, decode, kv_stored)
        # sparse attention over window + selected compressed entries (FlashMLA sparse fwd semantics)
        ckv = st.layers[self.kv_map[L]].ckv if ratio > 0 else []
        ckv_t = torch.stack(ckv) if ckv else torch.zeros(0, D, dtype=num.dt)
        sink = self.w(f"{a}.attn_sink")
        out = torch.empty(n, H, D, dtype=num.dt)
        for i, p in enumerate(pos.tolist()):
            # window keys max(0, p-W+1)..p (csrc prepare_tensor_input_v4.cpp: kv_swa_full_index_pivots)
            lo = max(0, p - W + 1)
            if st.replay_from is not None and L >= self.n_prefill:
                lo = max(lo, st.replay_from)  # bounded replay: prepare_tensor_input_v4.cpp:yoco_swa_visibility
            keys = [ls.win[j] for j in range(lo, p + 1)]
            K = torch.stack(keys)
            if sel is not None:
                ids = [j for j in sel[i] if j >= 0]  # -1 entries skipped (kv_index_cat)
                if ids:
                    K = torch.cat([K, ckv_t[ids]])
            # s = q.k * 512^-0.5; o = sum softmax(s) k * e^lse/(e^lse + e^sink)  (FlashMLA flash_mla_interface.py docstring)
            s = num.mm(q[i], K.T) * (D ** -0.5)  # [H, nk]
            mx = torch.maximum(s.max(dim=1).values, sink)
            e = torch.exp(s - mx[:, None])
            den = e.sum(dim=1) + torch.exp(sink - mx)
            out[i] = num.mm(e, K) / den[:, None]
        o = num.bf(out)
        # _wv_and_o_proj: inverse RoPE, fp8act, grouped wo_a (fp8 output), wo_b
        o = num.rope(o, cos, sin, pos, conjugate=True)
        G, r = c.o_groups, c.o_lora_rank
        wo_a = self.w(f"{a}.wo_a.weight").view(G, r, (H // G) * D)
        of = num.fp8act(o.reshape(n, H * D)).view(n, G, (H // G) * D)
        z = torch.stack([num.mm(of[:, g], wo_a[g].T) for g in range(G)], 1).reshape(n, G * r)  # fp8_einsum 'bhr,hdr->bhd'
        return num.bf(num.lin8(z, self.w(f"{a}.wo_b.weight")))  # fp8 einsum output -> wo_b

    def store_compressed(self, L, x, pos, st: State, decode: bool) -> None:
        """The compressor of kv source L on rows x at positions pos, and the index keys
        of an index-K source (compress.py:Compressor, index_attn.py:KProject)."""
        num = self.num
        c = self.cfg
        a = f"layers.{L}.attn"
        D = c.head_dim
        ratio = self.ratios[L]
        cos, sin = self.rope_comp
        n = x.shape[0]
        p0, p1 = int(pos[0]), int(pos[-1]) + 1
        new_pre_rope = None
        if L not in self.kv_src:
            return
        ls = st.layers.setdefault(L, LayerState())
        if ratio == 2:
            # current_hidden_proj [wgate; wkv] bf16 weights, fp32 output; compress_and_update_state_*_ref
            proj = num.mm(x, torch.cat([self.w(f"{a}.compressor.wgate.weight"), self.w(f"{a}.compressor.wkv.weight")]).T)
            score, latent = proj[:, :D].contiguous(), proj[:, D:].contiguous()
            if ls.cstate is None:
                ls.cstate = torch.zeros(1, 4, 2, D, dtype=num.dt)
            cm = self.R.compress
            if decode and n == 1:
                blk = num.call(cm.compress_and_update_state_decode_ref, score, latent, ls.cstate,
                               torch.tensor([0], dtype=torch.int32), torch.tensor([p1], dtype=torch.int32), 1, 2)
                new = blk if p0 % 2 == 1 else blk[:0]
            else:
                nb = p1 // 2 - p0 // 2
                cu_c = torch.tensor([0, max(1, nb)], dtype=torch.int32)
                blk = num.call(cm.compress_and_update_state_prefill_ref, score, latent, ls.cstate,
                               torch.tensor([0], dtype=torch.int32), torch.zeros(max(1, nb), dtype=torch.int32),
                               torch.tensor([0, n], dtype=torch.int32), torch.tensor([0, p1], dtype=torch.int32), cu_c, 2)
                new = blk[:nb]
            new = new.to(num.dt)
            first_blk = len(ls.ckv)
        else:
            new = num.bf(num.mm(x, self.w(f"{a}.compressor.wkv.weight").T))
            first_blk = p0
        nb = new.shape[0]
        if nb:
            cpos = torch.arange(first_blk, first_blk + nb) * ratio  # positions_c = cn * ratio
            pre = num.norm(new, self.w(f"{a}.compressor.norm.weight"), self.eps)
            k_c = num.fp4kv(num.rope(pre, cos, sin, cpos))
            ls.ckv.extend(list(k_c))
            new_pre_rope = (pre, cpos)
            st.layers[L].pre_rope_last = new_pre_rope
        if L in self.idxk_src and new_pre_rope is not None and L in self.idx_src:
            pre, cpos = new_pre_rope
            kk = num.bf(num.mm(pre, self.w(f"{a}.indexer.wk.weight").T))  # KProject.linear (bf16)
            kk = num.fp4idx(num.rope(num.norm(kk, self.w(f"{a}.indexer.k_norm.weight"), self.eps), cos, sin, cpos))
            st.layers[L].kidx.extend(list(kk))

    def compressed_and_index(self, L, x, qidx_raw, pos, st: State, decode: bool, kv_stored: bool = False):
        """kv_stored: bounded replay's boundary layer, whose compressed KV and index keys
        store_compressed already wrote from every row (attn.py:_store_yoco_full_kv)."""
        num = self.num
        c = self.cfg
        a = f"layers.{L}.attn"
        ratio = self.ratios[L]
        cos, sin = self.rope_comp
        n = x.shape[0]
        if not kv_stored:
            self.store_compressed(L, x, pos, st, decode)
        if L not in self.idx_src:
            return [st.topk_cur[i] for i in range(n)] if False else self._reuse_topk(L, pos, st)
        # ---- indexer (v4m/index_attn.py:MQA.forward)
        nh, hd = c.index_n_heads, c.index_head_dim
        w_idx = num.bf(num.mm(x, self.w(f"{a}.indexer.weights_proj.weight").T))  # .bfloat16() of the projection
        q_idx = num.fp4idx(num.rope(qidx_raw.reshape(n, nh, hd), cos, sin, pos))  # _quantize_q: rope then FP4
        K = st.layers[self.idxk_map[L]].kidx
        nk = len(K)
        klen = (pos + 1) // ratio  # prepare_tensor_input_v4.cpp: ke = ks + (j+1)/r
        topk = c.index_topk
        res = []
        if nk == 0:
            res = [[-1] * topk for _ in range(n)]
            self._record_topk(L, pos, res, [False] * n, st)
            return res
        Kt = torch.stack(K)
        ks = torch.zeros(n, dtype=torch.int32)
        logits, _ = num.rowwise(self.R.dg_attn.ref_mqa_logits, (0, 2, 3, 4), q_idx, Kt, w_idx, ks, klen.to(torch.int32))
        p = num.bf(logits.to(num.dt))  # psum bf16
        cand = None
        is_cand_src = L == self.cand_src
        use_cand = self.cand_src is not None and L > self.cand_src
        if is_cand_src:
            bs = c.candidate_block_size
            pl = p if num.ideal else p.to(torch.bfloat16)
            scores, valid = num.call(self.R.candidate_blocks.candidate_block_max_ref, pl, klen.to(torch.int32), bs, lie_args=(0,))
            cand = torch.full((n, c.candidate_topk_blocks), -1, dtype=torch.int32)
            for i in range(n):
                sel_b, _ = self._topk(scores[i, : int(valid[i])].to(num.dt), c.candidate_topk_blocks)
                cand[i, : len(sel_b)] = torch.tensor(sel_b, dtype=torch.int32)
            st.cand = {int(pp): cand[i] for i, pp in enumerate(pos.tolist())}
        ties = []
        for i in range(n):
            kl = int(klen[i])
            if use_cand:
                cb = st.cand[int(pos[i])].unsqueeze(0)
                bsz = c.candidate_block_size * self.ratios[self.cand_src] // ratio
                clen = int(self.R.candidate_blocks.get_candidate_compact_lens_ref(cb, klen[i:i + 1].to(torch.int32), bsz)[0])
                slots = torch.arange(cb.shape[1] * bsz)
                tok = cb[0][slots // bsz].long() * bsz + slots % bsz  # compact slot s -> block cand[s] token
                comp_scores = p[i, tok[:clen].clamp(max=nk - 1)]
                sel_c, tie = self._topk(comp_scores, topk)
                ci = torch.full((1, topk), -1, dtype=torch.int32)
                ci[0, : len(sel_c)] = torch.tensor(sel_c, dtype=torch.int32)
                self.R.candidate_blocks.restore_candidate_indices_inplace_ref(ci, cb, bsz)
                sel = sorted(j for j in ci[0].tolist() if j >= 0)
            else:
                sel, tie = self._topk(p[i, :kl], topk)
            res.append(sel + [-1] * (topk - len(sel)))
            ties.append(tie)
        self._record_topk(L, pos, res, ties, st)
        return res

    @staticmethod
    def _topk(scores: torch.Tensor, k: int):
        """deep_select.topk(sorted_index=True, fill -1): by value, output ascending. Ties -> lower index
        (stable sort) [guess: deep_select not in the sdist]. Returns (indices, tie_at_boundary)."""
        nvalid = scores.shape[0]
        if nvalid <= k:
            return list(range(nvalid)), False
        order = torch.sort(scores, descending=True, stable=True).indices
        tie = bool(scores[order[k - 1]] == scores[order[k]])
        return sorted(order[:k].tolist()), tie

    def _record_topk(self, L, pos, res, ties, st: State) -> None:
        lst = st.topk.setdefault(L, {})
        tl = st.ties.setdefault(L, {})
        for i, p in enumerate(pos.tolist()):
            lst[int(p)] = res[i]
            tl[int(p)] = ties[i]
        st.cur_topk = {int(p): res[i] for i, p in enumerate(pos.tolist())}

    def _reuse_topk(self, L, pos, st: State):
        src = self.idx_map[L]  # layers between index sources reuse the latest source's selection
        return [st.topk[src][int(p)] for p in pos.tolist()]

    # -------------------------------------------------------------- forward
    def forward(self, new_ids: list[int], st: State, decode: bool = False, dump: dict | None = None,
                embeds: torch.Tensor | None = None) -> torch.Tensor:
        """Process new tokens after the state's context; returns logits [n, vocab] (fp32/fp64).
        Image positions carry ids vocab + ImageTokenOffset (>= vocab) and their input rows in
        `embeds` ([n, hidden], rows of text positions ignored): deepseek_vl.py get_input_embeddings
        (embed_tokens, then replace_input_embeds), images_seq_mask = ids >= vocab for the MoE gate's
        bias_vl and Engram's image mask."""
        num = self.num
        c = self.cfg
        p0 = len(st.ids)
        st.ids.extend(new_ids)
        n = len(new_ids)
        pos = torch.arange(p0, p0 + n)
        m, d = c.hc_mult, c.hidden_size
        V = c.vocab_size
        idt = torch.tensor(new_ids)
        image_mask = (idt >= V) if bool((idt >= V).any()) else None
        h0 = self.w("embed.weight")[idt.clamp(max=V - 1)]
        if image_mask is not None:
            assert embeds is not None and embeds.shape == h0.shape, "image positions need their embeddings"
            h0 = torch.where(image_mask[:, None], embeds.to(h0.dtype), h0)
        hashes = self.hashes(st.ids, pos.tolist()) if self.engram_layers else None
        R = num.call(self.TK.expand_to_mhc_ref, h0, m)  # [n, m, d]
        prev = torch.zeros(n, m, 1, dtype=num.dt)
        prev[:, 0] = 1.0  # v4m/hc.py:_make_identity_pre_mix
        out = post = comb = None
        for L in range(self.L):
            pfx = f"layers.{L}"
            before_engram = None
            if L in self.engram_layers:
                if out is not None:
                    R = self.mhc_post(out, R, post, comb)
                    before_engram = R
                R = self.engram(L, R, hashes, image_mask)
                R, xn, pre, post, comb = self.mhc_pre(pfx, "attn", R, prev, self.w(f"{pfx}.attn_norm.weight"))
            elif out is None:
                R, xn, pre, post, comb = self.mhc_pre(pfx, "attn", R, prev, self.w(f"{pfx}.attn_norm.weight"))
            else:
                R, xn, pre, post, comb = self.mhc_pre(pfx, "attn", R, prev, self.w(f"{pfx}.attn_norm.weight"),
                                                      x=out, post=post, comb=comb)
            if dump is not None and L > 0:  # the trunk after layer L-1's FFN post (before layer L's Engram)
                dump.setdefault(f"R_after_ffn.{L - 1}", []).append((R if before_engram is None else before_engram).float())
            if dump is not None:  # the trunk entering layer L's attention (after its Engram): DSpark's features
                dump.setdefault(f"R_attn_in.{L}", []).append(R.float())
            if dump is not None:
                dump.setdefault(f"xn_attn.{L}", []).append(xn.float())
            kv_stored = False
            if L == self.n_prefill and st.replay_from is not None and bool((pos < st.replay_from).any()):
                # YoCo compact boundary (decoder_layer.py + attn.py:_store_yoco_full_kv): the source
                # layer's compressed KV and index keys from every row's attn-norm hidden, then only
                # the kept rows (yoco.py:compact_yoco_boundary) go on
                self.store_compressed(L, xn, pos, st, decode)
                kv_stored = True
                kr = pos >= st.replay_from
                R, xn, pre, post, comb, pos = R[kr], xn[kr], pre[kr], post[kr], comb[kr], pos[kr]
                if image_mask is not None:
                    image_mask = image_mask[kr]
                if hashes is not None:
                    hashes = hashes[:, kr]
            out = self.attention(L, xn, pos, st, decode, kv_stored)
            if dump is not None:
                dump.setdefault(f"attn_out.{L}", []).append(out.float())
            R, xn, pre2, post, comb = self.mhc_pre(pfx, "ffn", R, pre, self.w(f"{pfx}.ffn_norm.weight"),
                                                   x=out, post=post, comb=comb)
            if dump is not None:
                dump.setdefault(f"R_after_attn.{L}", []).append(R.float())
            prev = pre2
            if dump is not None:
                dump.setdefault(f"xn_ffn.{L}", []).append(xn.float())
            out = self.moe(pfx, xn, image_mask)
            if dump is not None:
                dump.setdefault(f"moe_out.{L}", []).append(out.float())
        R = self.mhc_post(out, R, post, comb)
        if dump is not None:
            dump.setdefault(f"R_after_ffn.{self.L - 1}", []).append(R.float())
        h = num.call(self.TK.mhc_pre_apply_mix_ref, (R if num.ideal else R.to(torch.bfloat16)).unsqueeze(0),
                     prev.unsqueeze(0)).squeeze(0).to(num.dt)
        h = num.norm(h, self.w("norm.weight"), self.eps)
        if dump is not None:
            dump.setdefault("final_hidden", []).append(h.float())
        return num.mm(h, self.w("head.weight").T)  # lay/sampler_utils.py:get_logits (bf16 GEMM, fp32 out)


def run(model: Model, prompt: list[int], n_new: int, decode: bool = False, dump: dict | None = None,
        embeds: torch.Tensor | None = None):
    """Returns (generated ids, logits rows [len(prompt)+n_new-1, V] float64/32, margins, timings).
    embeds: [len(prompt), hidden] input rows for image positions (Model.forward)."""
    st = State()
    t0 = time.perf_counter()
    if decode:
        rows = [model.forward([t], st, decode=True, dump=dump,
                              embeds=None if embeds is None else embeds[i:i + 1]) for i, t in enumerate(prompt)]
        logits = [torch.cat(rows)]
    else:
        logits = [model.forward(prompt, st, dump=dump, embeds=embeds)]
    t1 = time.perf_counter()
    out, margins = [], []
    last = logits[0][-1]
    for k in range(n_new):
        top2 = torch.topk(last.double(), 2)
        nxt = int(top2.indices[0])
        margins.append(float(top2.values[0] - top2.values[1]))
        out.append(nxt)
        if k + 1 < n_new:
            last = model.forward([nxt], st, decode=True, dump=dump)[-1]
            logits.append(last.unsqueeze(0))
    t2 = time.perf_counter()
    return out, torch.cat(logits), margins, st, {"prefill_s": t1 - t0, "decode_s": t2 - t1}
