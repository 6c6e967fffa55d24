#!/usr/bin/env python3
# venv: v41
"""Goldens for src/sample/dspark_*.c: DSpark verification, exactly as DeepInfer decides it.

Oracle: DeepSeek's DeepInfer 0.1.0 (sdist from $DEEPINFER_REF_DIR, imported
through scripts/oracle_v41/refs.py, which checks its SHA256), its pure
PyTorch reference functions called on fixed-seed inputs:

  tilelang_ops/random_sampling.py  random_sampling_ref, _hash_to_uniform
  tilelang_ops/fused_sample.py     fused_sample_ref (temperature, top-p,
                                   top-k, log-softmax; the accept test and
                                   the residual sample), run once more with
                                   its DRAFT_PROB_PENALTY set to 0 for the
                                   exactly lossless rule
  tilelang_ops/sampler.py          prepare_verification_metadata_ref,
                                   expand_sampling_params_ref,
                                   get_accept_result_ref
  tilelang_ops/dflash.py           confidence_head_fused_ref
  tilelang_ops/schedule_mtp_varlen.py  compute_seqlens_q_by_confidence_rates_ref

and DeepInfer's C++ csrc/engine/mtp_varlen.hpp (MTPVarlen::schedule /
update_runtime, the confidence-scheduled verify length) compiled with g++
against a two-struct stand-in for its sequence.hpp (only MtpState's fields
that MTPVarlen reads) and driven by a small main.

The two pybind structs the references take (LogitsTransformInputs,
SamplingKernelInputs) are plain stand-in classes here.

  .venv-v41/bin/python scripts/gen_goldens_dspark.py
Writes tests/data/golden/dspark/cases.json.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
ROOT = os.path.join(HERE, "..")
OUT = os.path.join(ROOT, "tests", "data", "golden", "dspark")
SEED = 1616

from oracle_v41 import refs  # noqa: E402

ns = refs.setup()
import torch  # noqa: E402

from deepinfer.model_executor.layers.tilelang_ops import dflash, fused_sample, random_sampling  # noqa: E402
from deepinfer.model_executor.layers.tilelang_ops import sampler as tl_sampler  # noqa: E402
from deepinfer.model_executor.layers.tilelang_ops import schedule_mtp_varlen  # noqa: E402


class LogitsTransformInputs:
    def __init__(self, temperatures, top_ps, top_ks):
        self.temperatures, self.top_ps, self.top_ks = temperatures, top_ps, top_ks


class SamplingKernelInputs:
    def __init__(self, logits, seq_seeds, sample_positions):
        self.logits, self.seq_seeds, self.sample_positions = logits, seq_seeds, sample_positions


fused_sample.LogitsTransformInputs = LogitsTransformInputs
fused_sample.SamplingKernelInputs = SamplingKernelInputs
tl_sampler.LogitsTransformInputs = LogitsTransformInputs
tl_sampler.SamplingKernelInputs = SamplingKernelInputs

g = torch.Generator().manual_seed(SEED)


def u64(x):
    return int(x) & 0xFFFFFFFFFFFFFFFF


def floats(t):
    """float32 values as their shortest decimal strings (exact round trip); -inf as null (JSON has no inf)."""
    import numpy as np
    out = []
    for v in t.detach().reshape(-1).float().numpy():
        out.append(None if v == -np.inf else float(str(v)))
    return out


def seeds_tensor(vals):
    return torch.tensor([v if v < 2**63 else v - 2**64 for v in vals], dtype=torch.int64).view(torch.uint64)


def rand_seeds(n):
    return [u64(int.from_bytes(torch.randint(0, 256, (8,), generator=g, dtype=torch.uint8).numpy().tobytes(), "little"))
            for _ in range(n)]


# ---- RNG ----------------------------------------------------------------------


def gen_rng():
    zs = rand_seeds(32) + [0, 1, 2**63, 2**64 - 1]
    hashed = random_sampling._hash_to_uniform(seeds_tensor(zs).view(torch.int64))
    cases = []
    for vocab in (5, 64, 300):
        n = 32
        probs = torch.rand((n, vocab), generator=g) ** 4
        probs[:, torch.randint(0, vocab, (vocab // 3,), generator=g)] = 0.0
        probs = probs / probs.sum(-1, keepdim=True)
        seeds = rand_seeds(n)
        pos = torch.randint(-5, 2**31 - 1, (n,), generator=g, dtype=torch.int32)
        pos[:4] = torch.tensor([0, 1, 7, 2**31 - 1], dtype=torch.int32)
        for nextn in (False, True):
            out = random_sampling.random_sampling_ref(probs, seeds_tensor(seeds), pos, is_nextn_predict=nextn)
            cases.append({"vocab": vocab, "residual": int(nextn), "probs": floats(probs), "seeds": [str(s) for s in seeds],
                          "pos": pos.tolist(), "tokens": out.tolist()})
    return {"hash_in": [str(z) for z in zs], "hash_out": [float(v) for v in hashed.tolist()], "sample": cases}


# ---- positions and prefix ------------------------------------------------------


def gen_positions():
    seqlen_q = torch.tensor([1, 3, 6, 2, 4], dtype=torch.int32)
    ftp = torch.cat([torch.zeros(1, dtype=torch.int32), seqlen_q.cumsum(0)[:-1].to(torch.int32)])
    total = int(seqlen_q.sum())
    row_to_req, local_step, is_verify = tl_sampler.prepare_verification_metadata_ref(ftp, seqlen_q, total)
    base = torch.tensor([0, 17, 2**31 - 5, 1000, 123456789], dtype=torch.int32)
    params = SamplingKernelInputs(LogitsTransformInputs(torch.ones(5), torch.ones(5), torch.full((5,), -1, dtype=torch.int32)),
                                  seeds_tensor(rand_seeds(5)), base)
    ex = tl_sampler.expand_sampling_params_ref(params, row_to_req, local_step)
    # prefix acceptance over random raw decisions
    prefix = []
    for _ in range(6):
        raw = torch.rand(total, generator=g) < 0.7
        cand = torch.randint(0, 100, (total,), generator=g, dtype=torch.int32)
        tokens, eff, fin = tl_sampler.get_accept_result_ref(raw, None, cand, cand, is_verify, ftp, row_to_req)
        prefix.append({"raw": raw.int().tolist(), "effective": eff.int().tolist(), "final": fin.int().tolist()})
    return {"seqlen_q": seqlen_q.tolist(), "base": base.tolist(), "row_to_req": row_to_req.tolist(),
            "local_step": local_step.tolist(), "is_verify": is_verify.int().tolist(),
            "positions": ex.sample_positions.tolist(), "prefix": prefix}


# ---- transform + verification ----------------------------------------------------


def gen_verify(penalty):
    saved = fused_sample.DRAFT_PROB_PENALTY
    fused_sample.DRAFT_PROB_PENALTY = penalty
    cases = []
    try:
        for vocab, n, kind in ((64, 40, "randn"), (300, 24, "randn"), (128, 32, "peaked"), (50, 24, "greedy")):
            logits = torch.randn((n, vocab), generator=g) * (3.0 if kind == "peaked" else 1.5)
            if kind == "peaked":
                logits[:, :8] += 4.0
            temps = torch.rand(n, generator=g) * 1.4 + 0.3
            top_p = torch.rand(n, generator=g) * 0.9 + 0.1
            top_p[torch.rand(n, generator=g) < 0.3] = 1.0
            top_k = torch.randint(1, vocab + 20, (n,), generator=g, dtype=torch.int32)
            top_k[torch.rand(n, generator=g) < 0.3] = -1
            if kind == "greedy":
                temps[:] = 1e-5
                top_p[:] = 1.0
                top_k[:] = -1
            seeds = rand_seeds(n)
            pos = torch.randint(0, 2**31 - 1, (n,), generator=g, dtype=torch.int32)
            # the draft distribution: the target's logits plus noise, through the same transform
            dlogits = logits + torch.randn((n, vocab), generator=g) * 0.7
            dparams = LogitsTransformInputs(temps.clone(), top_p.clone(), top_k.clone())
            dsi = SamplingKernelInputs(dparams, seeds_tensor(seeds), pos - 1)
            dlp, dtok, _, _, _ = fused_sample.fused_sample_ref(dlogits.clone(), dsi, tag="mtp")
            dtok = dtok.clone()
            dtok[torch.rand(n, generator=g) < 0.08] = -1  # pad drafts
            is_verify = torch.rand(n, generator=g) < 0.85
            si = SamplingKernelInputs(LogitsTransformInputs(temps.clone(), top_p.clone(), top_k.clone()),
                                      seeds_tensor(seeds), pos)
            lp, tok, acc, _, ap = fused_sample.fused_sample_ref(
                logits.clone(), si, is_verify=is_verify, last_nextn_token_logprobs=dlp.clone(),
                last_next_n_token_ids=dtok.clone())
            cases.append({
                "kind": kind, "vocab": vocab, "n": n, "logits": floats(logits), "dlogits": floats(dlogits),
                "temperature": floats(temps), "top_p": floats(top_p), "top_k": top_k.tolist(),
                "seeds": [str(s) for s in seeds], "pos": pos.tolist(),
                "draft_logprobs": floats(dlp), "draft_tokens": dtok.tolist(), "is_verify": is_verify.int().tolist(),
                "logprobs": floats(lp), "tokens": tok.tolist(), "accepted": acc.int().tolist(),
                "accept_probs": floats(ap)})
    finally:
        fused_sample.DRAFT_PROB_PENALTY = saved
    return cases


def gen_confidence():
    out = []
    for n_embd, rank, temp in ((256, 0, 1.0), (256, 64, 0.85), (128, 32, 0.05)):
        n = 16
        h = (torch.randn((n, n_embd), generator=g) / 4).bfloat16()
        w = (torch.randn((n_embd + rank, 1), generator=g) / 4).bfloat16()
        e = (torch.randn((n, rank), generator=g) / 4).bfloat16() if rank else None
        c = dflash.confidence_head_fused_ref(h, w, temp, e)
        out.append({"n": n, "n_embd": n_embd, "rank": rank, "temperature": temp, "h": floats(h.float()),
                    "w": floats(w.float()), "e": floats(e.float()) if rank else [], "conf": floats(c)})
    return out


def gen_zos():
    out = []
    for n_seqs, nextn, total_q in ((4, 3, 8), (16, 5, 40), (8, 5, 8), (8, 5, 48), (32, 7, 100)):
        n_prev = n_seqs + 2
        prev = torch.rand((n_prev, nextn), generator=g)
        prev[0, :] = prev[1, :]  # exact ties
        remap = torch.randperm(n_prev, generator=g)[:n_seqs].to(torch.int32)
        remap[torch.rand(n_seqs, generator=g) < 0.2] = -1
        sq = torch.empty(n_seqs, dtype=torch.int32)
        schedule_mtp_varlen.compute_seqlens_q_by_confidence_rates_ref(total_q, remap, prev, sq)
        out.append({"total_q": total_q, "nextn": nextn, "n_prev": n_prev, "remap": remap.tolist(),
                    "prev": floats(prev), "seqlens_q": sq.tolist()})
    return out


# ---- MTPVarlen (C++) ------------------------------------------------------------

STUB_SEQUENCE = r"""
// Stand-in for DeepInfer's csrc/engine/sequence.hpp: only what MTPVarlen reads.
#pragma once
#include <stdexcept>
#include <vector>
#define TORCH_CHECK(cond, ...) do { if (!(cond)) throw std::runtime_error("TORCH_CHECK " #cond); } while (0)
struct MtpState {
    std::vector<int> draft_tokens;
    std::vector<float> accept_rates, prev_accept_rates;
    bool has_draft_info{false};
    int process_cnt{0}, schedule_cnt{0};
};
struct Sequence { MtpState mtp; };
"""

HARNESS = r"""
#include <cstdio>
#include "mtp_varlen.hpp"
// stdin: cases; each: n_curve (rows ms)*; n_obs (num_seqs graph fwd_ms smp_ms)*; n_seqs, per seq:
// nd has_info sched proc n_acc acc* n_prev prev*. stdout: seqlens_q per case.
int main() {
    int n_cases;
    if (scanf("%d", &n_cases) != 1) return 1;
    for (int c = 0; c < n_cases; c++) {
        MTPVarlen v;
        int nc; scanf("%d", &nc);
        std::vector<std::pair<int, float>> curve(nc);
        for (auto &p : curve) scanf("%d %f", &p.first, &p.second);
        v.set_decode_perf_curve(curve);
        int no; scanf("%d", &no);
        for (int i = 0; i < no; i++) { int s, gsz; double f, sm; scanf("%d %d %lf %lf", &s, &gsz, &f, &sm); v.update_runtime(s, gsz, f, sm); }
        int ns; scanf("%d", &ns);
        std::vector<std::shared_ptr<Sequence>> seqs;
        for (int i = 0; i < ns; i++) {
            auto s = std::make_shared<Sequence>();
            int nd, hi, sc, pc, na, np; scanf("%d %d %d %d", &nd, &hi, &sc, &pc);
            s->mtp.draft_tokens.assign(nd, 7); s->mtp.has_draft_info = hi; s->mtp.schedule_cnt = sc; s->mtp.process_cnt = pc;
            scanf("%d", &na); s->mtp.accept_rates.resize(na); for (auto &x : s->mtp.accept_rates) scanf("%f", &x);
            scanf("%d", &np); s->mtp.prev_accept_rates.resize(np); for (auto &x : s->mtp.prev_accept_rates) scanf("%f", &x);
            seqs.push_back(s);
        }
        std::vector<int> q;
        v.schedule(seqs, q);
        for (size_t i = 0; i < q.size(); i++) printf("%d%c", q[i], i + 1 == q.size() ? '\n' : ' ');
        if (q.empty()) printf("\n");
    }
    return 0;
}
"""


def f32(x):
    return float(torch.tensor(x, dtype=torch.float32))


def gen_varlen():
    hpp = os.path.join(ns.roots["deepinfer"], "csrc", "engine", "mtp_varlen.hpp")
    cases = []
    for ci in range(24):
        n_seqs = [1, 2, 4, 8, 16, 32][ci % 6]
        nextn = [3, 5, 5, 7][ci % 4]
        # curve: 1, 2, 4, 8, 16, 24, ... (build_graph_batch_sizes), baseline + per-row cost with a knee
        sizes = [1, 2, 4] + list(range(8, n_seqs * (1 + nextn) + 8, 8))
        if ci % 5 == 4:
            sizes = sizes[: max(1, len(sizes) // 2)]  # a curve that stops short
        base = 5.0 + float(torch.rand(1, generator=g)) * 20
        per = 0.05 + float(torch.rand(1, generator=g)) * 0.6
        curve = [(s, f32(base + per * s + (0.02 * s * s if ci % 3 == 0 else 0.0))) for s in sizes]
        if ci % 7 == 6:
            curve = []
        obs = []
        if curve and ci % 2 == 1:
            for _ in range(int(torch.randint(0, 60, (1,), generator=g))):
                k = int(torch.randint(0, len(curve), (1,), generator=g))
                gsz, ms = curve[k]
                obs.append((int(torch.randint(1, 33, (1,), generator=g)), gsz,
                            ms + float(torch.randn(1, generator=g)) * 0.5 * gsz * 0.1,
                            abs(float(torch.randn(1, generator=g))) * 2))
        seqs = []
        for i in range(n_seqs):
            conf = torch.rand(nextn, generator=g) ** 0.5
            rates = [f32(v) for v in torch.cumprod(conf, 0).tolist()]
            conf2 = torch.rand(nextn, generator=g) ** 0.5
            prev = [f32(v) for v in torch.cumprod(conf2, 0).tolist()]
            r = float(torch.rand(1, generator=g))
            if r < 0.15:
                rates, prev = [], []  # right after prefill
            elif r < 0.25:
                prev = []
            if i % 9 == 3 and rates:
                rates[0] = rates[0]  # keep
                prev = list(rates)   # ties across sequences
            ahead = int(float(torch.rand(1, generator=g)) < 0.3)
            has_info = int(float(torch.rand(1, generator=g)) < 0.7)
            seqs.append({"nd": nextn, "has_info": has_info, "sched": 5 + ahead, "proc": 5, "rates": rates, "prev": prev})
        cases.append({"curve": curve, "obs": obs, "seqs": seqs})
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "sequence.hpp"), "w") as f:
            f.write(STUB_SEQUENCE)
        with open(os.path.join(d, "main.cpp"), "w") as f:
            f.write(HARNESS)
        with open(os.path.join(d, "mtp_varlen.hpp"), "w") as f:
            f.write(open(hpp).read())  # beside the stub, so its #include "sequence.hpp" finds it
        exe = os.path.join(d, "varlen")
        subprocess.run(["g++", "-std=c++17", "-O1", "-I", d, os.path.join(d, "main.cpp"), "-o", exe], check=True)
        lines = [str(len(cases))]
        for c in cases:
            lines.append(f"{len(c['curve'])} " + " ".join(f"{r} {m!r}" for r, m in c["curve"]))
            lines.append(f"{len(c['obs'])} " + " ".join(f"{a} {b} {x!r} {y!r}" for a, b, x, y in c["obs"]))
            lines.append(str(len(c["seqs"])))
            for s in c["seqs"]:
                lines.append(f"{s['nd']} {s['has_info']} {s['sched']} {s['proc']} {len(s['rates'])} "
                             + " ".join(repr(x) for x in s["rates"]) + f" {len(s['prev'])} "
                             + " ".join(repr(x) for x in s["prev"]))
        res = subprocess.run([exe], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
        outs = res.stdout.splitlines()
    for c, line in zip(cases, outs):
        c["seqlens_q"] = [int(x) for x in line.split()]
    return cases


def main():
    os.makedirs(OUT, exist_ok=True)
    doc = {
        "oracle": "DeepInfer 0.1.0 tilelang_ops *_ref functions + csrc/engine/mtp_varlen.hpp (g++)",
        "versions": refs.versions(),
        "seed": SEED,
        "rng": gen_rng(),
        "positions": gen_positions(),
        "verify_deepinfer": gen_verify(5e-5),
        "verify_lossless": gen_verify(0.0),
        "confidence": gen_confidence(),
        "zos": gen_zos(),
        "varlen": gen_varlen(),
    }
    path = os.path.join(OUT, "cases.json")
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
