"""The DSpark drafter on top of the V4.1 oracle (model.py), transcribed from DeepSeek's DeepInfer 0.1.0
(nothing copied; the rounding points are the oracle's Num helpers, as for the main layers):

  features   decoder_layer.py:_store_dflash_input -> tl/dflash.py:dflash_input_store_ref (called): the mean of
             the HC copies of the trunk entering each dspark_target_layer_ids layer's attention, bf16
  main keys  mtp/dflash.py:DFlash.update_main_cache: M = projection_norm(projection(F)) (mtp.0.main_proj /
             main_norm), then per stage attn.py:DFlashAttention.update_main_cache: rotary(kv_norm(M Wkv_i)),
             MXFP8, into the stage's window record at the row's position (base rotary: the stages are ratio 0)
  draft      DFlash.forward_drafts / _embed_draft_init_tokens: [golden, noise x (k-1)] at last_pos+1.., every
             stage DFlashDecoderLayer.forward_drafts (shifted mHC, DFlashAttention.forward_drafts, mHC, the
             stage's own MoE); the key set tl/get_kv_index.py:get_fused_dflash_get_input_ref: the window of main
             keys ending at last_pos plus the whole block; then hc_post + mhc_pre_apply_mix (hc_shifted)
  heads      DFlash.sample_drafts: logits = head(post_norm(h_s)) + markov_w2(markov_w1(prev));
             confidence tl/dflash.py:confidence_head_fused_ref (called) on [h_s ; markov_w1(prev)]
"""
from __future__ import annotations

import torch

from .model import Model


class Drafter:
    def __init__(self, model: Model) -> None:
        self.m = model
        c = model.cfg
        self.n = c.num_nextn_predict_layers
        self.targets = list(c.dspark_target_layer_ids)
        self.keys = [dict() for _ in range(self.n)]  # stage -> {position: key}
        from deepinfer.model_executor.layers.tilelang_ops import dflash
        self.dflash = dflash

    def features(self, dump: dict, rows: int) -> torch.Tensor:
        """F [rows, T*D] of the last forward's rows, from its dump (R_attn_in.L: the trunk entering L's attention)."""
        num = self.m.num
        parts = []
        for L in self.targets:
            R = torch.cat(dump[f"R_attn_in.{L}"])[-rows:]
            out = torch.empty(R.shape[0], R.shape[2], dtype=num.dt if num.ideal else torch.bfloat16)
            num.call(self.dflash.dflash_input_store_ref, R.to(num.dt), out)
            parts.append(out.to(num.dt))
        return torch.cat(parts, dim=1)

    def main_keys(self, F: torch.Tensor, pos: torch.Tensor) -> None:
        m, num = self.m, self.m.num
        M = num.norm(num.bf(num.lin8(F, m.w("mtp.0.main_proj.weight"))), m.w("mtp.0.main_norm.weight"), m.eps)
        cos, sin = m.rope_base
        for i in range(self.n):
            kv = num.bf(num.lin8(M, m.w(f"mtp.{i}.attn.wkv.weight")))
            k = num.mxfp8(num.rope(num.norm(kv, m.w(f"mtp.{i}.attn.kv_norm.weight"), m.eps), cos, sin, pos))
            for j, p in enumerate(pos.tolist()):
                self.keys[i][p] = k[j]

    def attention(self, i: int, x: torch.Tensor, pos: torch.Tensor, last_pos: int, k: int) -> torch.Tensor:
        m, num, c = self.m, self.m.num, self.m.cfg
        a = f"mtp.{i}.attn"
        H, D = c.num_attention_heads, c.head_dim
        n = x.shape[0]
        cos, sin = m.rope_base
        qa_kv = num.bf(num.lin8(x, torch.cat([m.w(f"{a}.wq_a.weight"), m.w(f"{a}.wkv.weight")])))
        q_a, kv_w = qa_kv[:, : c.q_lora_rank], qa_kv[:, c.q_lora_rank:]
        qfull = num.bf(num.lin8(num.norm(q_a, m.w(f"{a}.q_norm.weight"), m.eps), m.w(f"{a}.wq_b.weight")))
        q = num.rope(qfull.reshape(n, H, D), cos, sin, pos)
        k_w = num.mxfp8(num.rope(num.norm(kv_w, m.w(f"{a}.kv_norm.weight"), m.eps), cos, sin, pos))
        for j, p in enumerate(pos.tolist()):
            self.keys[i][p] = k_w[j]
        W = c.sliding_window
        K = torch.stack([self.keys[i][t] for t in range(max(0, last_pos - W + 1), last_pos + k + 1)])
        sink = m.w(f"{a}.attn_sink")
        out = torch.empty(n, H, D, dtype=num.dt)
        for j in range(n):  # every row sees the same keys: bidirectional inside the block
            s = num.mm(q[j], K.T) * (D ** -0.5)
            mx = torch.maximum(s.max(dim=1).values, sink)
            e = torch.exp(s - mx[:, None])
            den = e.sum(dim=1) + torch.exp(sink - mx)
            out[j] = num.mm(e, K) / den[:, None]
        o = num.rope(num.bf(out), cos, sin, pos, conjugate=True)
        G, r = c.o_groups, c.o_lora_rank
        wo_a = m.w(f"{a}.wo_a.weight").view(G, r, (H // G) * D)
        of = num.fp8act(o.reshape(n, H * D)).view(n, G, (H // G) * D)
        z = torch.stack([num.mm(of[:, g], wo_a[g].T) for g in range(G)], 1).reshape(n, G * r)
        return num.bf(num.lin8(z, m.w(f"{a}.wo_b.weight")))

    def draft(self, golden: int, last_pos: int, k: int, conf_temperature: float = 1.0):
        """Greedy drafts: returns (logits [k, V], confidences [k], drafts [k], margins [k])."""
        m, num, c = self.m, self.m.num, self.m.cfg
        ids = [golden] + [c.dspark_noise_token_id] * (k - 1)
        pos = torch.arange(last_pos + 1, last_pos + 1 + k)
        R = num.call(m.TK.expand_to_mhc_ref, m.w("embed.weight")[torch.tensor(ids)], c.hc_mult)
        prev = torch.zeros(k, c.hc_mult, 1, dtype=num.dt)
        prev[:, 0] = 1.0
        out = post = comb = None
        for i in range(self.n):
            pfx = f"mtp.{i}"
            if out is None:
                R, xn, pre, post, comb = m.mhc_pre(pfx, "attn", R, prev, m.w(f"{pfx}.attn_norm.weight"))
            else:
                R, xn, pre, post, comb = m.mhc_pre(pfx, "attn", R, prev, m.w(f"{pfx}.attn_norm.weight"),
                                                   x=out, post=post, comb=comb)
            out = self.attention(i, xn, pos, last_pos, k)
            R, xn, prev, post, comb = m.mhc_pre(pfx, "ffn", R, pre, m.w(f"{pfx}.ffn_norm.weight"),
                                                x=out, post=post, comb=comb)
            out = m.moe(pfx, xn)
        R = m.mhc_post(out, R, post, comb)
        h = num.call(m.TK.mhc_pre_apply_mix_ref, (R if num.ideal else R.to(torch.bfloat16)).unsqueeze(0),
                     prev.unsqueeze(0)).squeeze(0).to(num.dt)
        last = self.n - 1
        base = num.mm(num.norm(h, m.w(f"mtp.{last}.norm.weight"), m.eps), m.w("head.weight").T)
        E = m.w(f"mtp.{last}.markov_head.embed.weight")
        Hm = m.w(f"mtp.{last}.markov_head.head.weight")
        cw = m.w(f"mtp.{last}.confidence_head.proj.weight").reshape(-1, 1).contiguous()
        logits, conf, drafts, margins = [], [], [], []
        p = golden
        for s in range(k):
            e = E[p]
            lg = base[s] + num.mm(e.unsqueeze(0), Hm.T)[0]
            hs, es = h[s:s + 1].contiguous(), e.unsqueeze(0).contiguous()
            if not num.ideal:
                hs, es, cws = hs.to(torch.bfloat16), es.to(torch.bfloat16), cw.to(torch.bfloat16)
            else:
                cws = cw
            cf = num.call(self.dflash.confidence_head_fused_ref, hs, cws, conf_temperature, es)
            top2 = torch.topk(lg.double(), 2)
            p = int(top2.indices[0])
            logits.append(lg)
            conf.append(float(cf[0]))
            drafts.append(p)
            margins.append(float(top2.values[0] - top2.values[1]))
        return torch.stack(logits), conf, drafts, margins
