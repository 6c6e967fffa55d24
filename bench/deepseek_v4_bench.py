#!/usr/bin/env python3
# venv: deepseek
"""DeepSeek-V4 speed: deepinfer next to transformers on one CPU, same threads.

Builds (once, from a fixed seed) a synthetic V4-Flash-shaped checkpoint with
transformers 5.2x `DeepseekV4ForCausalLM`: hidden 1024, 8 layers (window x2,
then CSA / HCA alternating), 16 heads of 512 (64 rotary), q_lora 256,
grouped output 4 x 256, 64 routed experts top-6 + 1 shared (width 512), the
first 3 layers hash-routed, mHC with 4 copies, window 128, CSA ratio 4 with a
16-head lightning indexer (dim 128, top-64), HCA ratio 128, vocab 32768 (the
real vocab/hidden ratio). Weights are stored as the released checkpoint
stores them: FP8 e4m3 with ue8m0 128x128 block scales, MXFP4 routed experts,
BF16 compressor / indexer / router / embedding / head, F32 norms and mHC. The
weight numerics and names come from scripts/gen_goldens_deepseek_v4.py
(imported, not copied). The folder goes to ~/.cache/deepinfer/bench/ (never
into git; about 0.5 GB).

Then, with 2 threads on both sides (torch.set_num_threads(2), deepinfer -t 2):
  - prefill: one forward over a P-token prompt (default 512), tokens/s;
  - decode: N greedy steps after it (default 32), tokens/s;
  median of R runs (default 3) each, and the ratio deepinfer / transformers.
The prompt is bench_deepseek's fixed LCG sequence. deepinfer's numbers come
from build/bench_deepseek (bench/bench_deepseek.c), which also reports the
per-block time shares (di_dsv4_ctx_set_profile) and the MoE / attention
kernels' flops and bytes; build/bench_peak gives the machine's FMA peak and
read bandwidth to put those in proportion. The last prompt position's logits
of both engines are compared as a sanity check (max abs difference).

Writes bench/results/deepseek_v4.md (and prints it).

Usage: .venv-deepseek/bin/python bench/deepseek_v4_bench.py [-p 512] [-n 32] [-r 3]
       (build first: make build; the venv: bash scripts/venv.sh deepseek)
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gen_goldens_deepseek_v4 as gg  # noqa: E402  (the golden generator's quantizers and names)

from transformers import DeepseekV4ForCausalLM  # noqa: E402

CACHE = os.path.expanduser("~/.cache/deepinfer/bench")
NAME = "dsv4_h1024_l8_e64"
SEED = 4
THREADS = 2

SPEC = dict(
    seed=SEED, quant=True, tid_dtype=torch.int32, legacy=None,
    cfg=dict(gg.COMMON, vocab_size=32768, hidden_size=1024, num_hidden_layers=8,
             num_attention_heads=16, head_dim=512, q_lora_rank=256, o_groups=4, o_lora_rank=256,
             n_routed_experts=64, num_experts_per_tok=6, moe_intermediate_size=512, hc_mult=4,
             swiglu_limit=10.0, sliding_window=128, index_n_heads=16, index_head_dim=128,
             index_topk=64, partial_rotary_factor=64 / 512,
             layer_types=["sliding_attention"] * 2 +
                         ["compressed_sparse_attention", "heavily_compressed_attention"] * 3,
             mlp_layer_types=["hash_moe"] * 3 + ["moe"] * 5,
             compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
             rope_parameters=dict(gg.YARN)),
)

BLOCK_KINDS = [  # report rows: (label, profile blocks)
    ("attention (projections)", ["attn_proj"]),
    ("attention (window/CSA/HCA core)", ["attn_core"]),
    ("compressor", ["compressor"]),
    ("indexer", ["indexer"]),
    ("MoE routed", ["moe_routed"]),
    ("MoE shared", ["moe_shared"]),
    ("MoE router", ["moe_router"]),
    ("mHC", ["mhc"]),
    ("norms", ["norm"]),
    ("head", ["head"]),
    ("embed", ["embed"]),
]


def build_checkpoint(d):
    stamp = os.path.join(d, "bench_spec.json")
    want = json.dumps({"spec": SPEC["cfg"], "seed": SEED, "transformers": transformers.__version__},
                      sort_keys=True, default=str)
    if os.path.exists(stamp) and open(stamp).read() == want:
        return
    print(f"building {d} ...", flush=True)
    t0 = time.time()
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    cfg = gg.make_config(SPEC)
    torch.manual_seed(SEED)
    model = DeepseekV4ForCausalLM(cfg).to(torch.float32).eval()
    gen = torch.Generator().manual_seed(SEED)
    gg.randomize(model, cfg, gen, SPEC["tid_dtype"])
    tensors = gg.to_checkpoint(model, cfg, True, SPEC["tid_dtype"])
    del model
    from safetensors.torch import save_file
    save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    del tensors
    gg.write_config(os.path.join(d, "config.json"), SPEC, cfg)
    with open(stamp, "w") as f:
        f.write(want)
    print(f"built in {time.time() - t0:.0f} s", flush=True)


def prompt_ids(n, vocab):
    """bench_deepseek's LCG sequence."""
    x, ids = 12345, []
    for _ in range(n):
        ids.append(x % vocab)
        x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
    return ids


def bench_transformers(d, ids, n_decode, reps):
    kw = {"torch_dtype": torch.float32, "quantization_config": transformers.FineGrainedFP8Config(
        dequantize=True, weight_block_size=[gg.FP8_BLOCK, gg.FP8_BLOCK], scale_fmt="ue8m0", expert_dtype="fp4")}
    model = DeepseekV4ForCausalLM.from_pretrained(d, **kw).eval()
    pp, tg, last = [], [], None
    with torch.no_grad():
        for _ in range(reps):
            t0 = time.perf_counter()
            out = model(torch.tensor([ids]), use_cache=True)
            pp.append(len(ids) / (time.perf_counter() - t0))
            last = out.logits[0, -1].double().numpy()
            cache, tok = out.past_key_values, int(out.logits[0, -1].argmax())
            t0 = time.perf_counter()
            for _ in range(n_decode):
                out = model(torch.tensor([[tok]]), past_key_values=cache, use_cache=True)
                cache, tok = out.past_key_values, int(out.logits[0, -1].argmax())
            tg.append(n_decode / (time.perf_counter() - t0))
    del model
    return pp, tg, last


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def load():
    return os.getloadavg()[0]


def share_table(prof):
    blocks, total = prof["blocks"], prof["seconds"]
    rows = []
    for label, keys in BLOCK_KINDS:
        s = sum(blocks[k][0] for k in keys)
        rows.append(f"| {label} | {1e3 * s / max(prof['rows'], 1):.2f} | {100 * s / total:.1f}% |")
    other = total - sum(b[0] for b in blocks.values())
    rows.append(f"| untimed (dispatch, glue) | {1e3 * other / max(prof['rows'], 1):.2f} | {100 * other / total:.1f}% |")
    return rows


def kernel_rows(prof, peak, what):
    rows = []
    for label, key in (("MoE routed experts", "moe_routed"), ("MoE shared expert", "moe_shared"),
                       ("attention core", "attn_core")):
        s, fl, by = prof["blocks"][key]
        if s <= 0:
            continue
        gf, gb = fl / s / 1e9, by / s / 1e9
        rows.append(f"| {what} | {label} | {gf:.1f} | {100 * gf / peak['fma_avx2_gflops_tn']:.1f}% | "
                    f"{100 * gf / peak['fma_avx512_gflops_tn']:.1f}% | {gb:.2f} | "
                    f"{100 * gb / peak['read_gbs_tn']:.1f}% |")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--baseline", help="another bench_deepseek binary (e.g. built from an older commit) "
                    "to time in the same run; --baseline-label names it")
    ap.add_argument("--baseline-label", default="baseline")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "deepseek_v4.md"))
    a = ap.parse_args()
    torch.set_num_threads(THREADS)
    d = os.path.join(CACHE, NAME)
    build_checkpoint(d)
    vocab = SPEC["cfg"]["vocab_size"]
    ids = prompt_ids(a.p, vocab)

    load0 = load()
    peak = run_json([os.path.join(a.build, "bench_peak"), "-t", str(THREADS)])
    logits_path = os.path.join(CACHE, "bench_last_logits.f32")
    ours = run_json([os.path.join(a.build, "bench_deepseek"), "-m", d, "-t", str(THREADS), "-p", str(a.p),
                     "-n", str(a.n), "-r", str(a.r), "--profile", "-o", logits_path])
    base = None
    if a.baseline:
        base = run_json([a.baseline, "-m", d, "-t", str(THREADS), "-p", str(a.p), "-n", str(a.n), "-r", str(a.r)])
    load1 = load()
    t_pp, t_tg, t_last = bench_transformers(d, ids, a.n, a.r)
    load2 = load()
    # deepinfer again after transformers: the shared machine's load drifts,
    # so bracket the peer and compare with the mean of the two medians
    ours2 = run_json([os.path.join(a.build, "bench_deepseek"), "-m", d, "-t", str(THREADS), "-p", str(a.p),
                      "-n", str(a.n), "-r", str(a.r)])
    load3 = load()
    o_pp = (ours["pp_tok_s"] + ours2["pp_tok_s"]) / 2
    o_tg = (ours["tg_tok_s"] + ours2["tg_tok_s"]) / 2
    o_last = np.fromfile(logits_path, dtype="<f4").astype(np.float64)
    diff = float(np.abs(o_last - t_last).max())

    tpp, ttg = statistics.median(t_pp), statistics.median(t_tg)
    size = os.path.getsize(os.path.join(d, "model.safetensors"))
    lines = [
        "# DeepSeek-V4: deepinfer vs transformers on the CPU",
        "",
        f"Written by `bench/deepseek_v4_bench.py` on {time.strftime('%Y-%m-%d %H:%M')}. "
        f"Model: synthetic V4-Flash-shaped checkpoint `{NAME}` (seed {SEED}, {size / 1e6:.0f} MB: "
        "hidden 1024, 8 layers = window x2 + (CSA, HCA) x3, 16 heads x 512, 64 experts top-6 + shared, "
        "width 512, mHC x4, vocab 32768; FP8 e4m3 128x128 ue8m0 + MXFP4 experts). "
        f"{THREADS} threads on both sides; transformers {transformers.__version__} / torch "
        f"{torch.__version__} in float32 (its FP8 loader dequantizes); deepinfer kernels "
        f"`{ours['kernels']}`. Medians of {a.r} runs. CPU: {peak.get('cpu', '?')}. "
        f"1-minute load average (2 cores, shared machine): {load0:.1f} before, {load1:.1f} after deepinfer, "
        f"{load2:.1f} after transformers, {load3:.1f} after deepinfer again. deepinfer runs before and after "
        "transformers; the ratio uses the mean of its two medians. Absolute numbers are noisy.",
        "",
        f"Sanity: last prompt position's logits, max |deepinfer - transformers| = {diff:.2e}.",
        "",
        "| test | deepinfer tok/s (min-max) | transformers tok/s (min-max) | ratio |",
        "|---|---|---|---|",
        f"| prefill pp{a.p} | {ours['pp_tok_s']:.1f} ({ours['pp_min']:.1f}-{ours['pp_max']:.1f}); after: "
        f"{ours2['pp_tok_s']:.1f} ({ours2['pp_min']:.1f}-{ours2['pp_max']:.1f}) | "
        f"{tpp:.1f} ({min(t_pp):.1f}-{max(t_pp):.1f}) | {o_pp / tpp:.2f}x |",
        f"| decode tg{a.n} (after pp{a.p}) | {ours['tg_tok_s']:.2f} ({ours['tg_min']:.2f}-{ours['tg_max']:.2f}); "
        f"after: {ours2['tg_tok_s']:.2f} ({ours2['tg_min']:.2f}-{ours2['tg_max']:.2f}) | "
        f"{ttg:.2f} ({min(t_tg):.2f}-{max(t_tg):.2f}) | {o_tg / ttg:.2f}x |",
        *([] if not base else [
            f"| prefill pp{a.p}, deepinfer {a.baseline_label} | {base['pp_tok_s']:.1f} "
            f"({base['pp_min']:.1f}-{base['pp_max']:.1f}) | | {base['pp_tok_s'] / tpp:.2f}x "
            f"(this build, first run: {ours['pp_tok_s'] / base['pp_tok_s']:.2f}x of it) |",
            f"| decode tg{a.n}, deepinfer {a.baseline_label} | {base['tg_tok_s']:.2f} "
            f"({base['tg_min']:.2f}-{base['tg_max']:.2f}) | | {base['tg_tok_s'] / ttg:.2f}x "
            f"(this build, first run: {ours['tg_tok_s'] / base['tg_tok_s']:.2f}x of it) |"]),
        "",
        "## deepinfer time per block kind (one profiled run, di_dsv4_ctx_set_profile)",
        "",
        f"Prefill pp{a.p}: {ours['profile_prefill']['seconds']:.2f} s",
        "",
        "| block | ms per token | share |",
        "|---|---|---|",
        *share_table(ours["profile_prefill"]),
        "",
        f"Decode tg{a.n}: {ours['profile_decode']['seconds']:.2f} s",
        "",
        "| block | ms per token | share |",
        "|---|---|---|",
        *share_table(ours["profile_decode"]),
        "",
        "## Kernels against the machine",
        "",
        f"Peak from `bench_peak -t {THREADS}` (independent FMA chains, {THREADS} threads): AVX2 "
        f"{peak['fma_avx2_gflops_tn']:.1f} GFLOP/s, AVX-512 {peak['fma_avx512_gflops_tn']:.1f} GFLOP/s "
        f"(1 thread: {peak['fma_avx2_gflops_t1']:.1f} / {peak['fma_avx512_gflops_t1']:.1f}); read bandwidth "
        f"{peak['read_gbs_tn']:.1f} GB/s over {peak['read_mb']} MB. Flops count a multiply-add as 2; MoE "
        "bytes are the expert weights as stored (MXFP4 / FP8 + scales) read once per step, attention bytes "
        "the cached key rows each query row reads (f32).",
        "",
        "| phase | kernel | GFLOP/s | % AVX2 peak | % AVX-512 peak | GB/s | % read bw |",
        "|---|---|---|---|---|---|---|",
        *kernel_rows(ours["profile_prefill"], peak, "prefill"),
        *kernel_rows(ours["profile_decode"], peak, "decode"),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    raw = {"deepinfer": ours, "deepinfer_after": ours2, "deepinfer_baseline": base, "transformers": {"pp": t_pp, "tg": t_tg}, "peak": peak,
           "load": [load0, load1, load2, load3], "logits_max_abs_diff": diff}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(text)
        f.write("\n<details><summary>raw</summary>\n\n```json\n" + json.dumps(raw, indent=1) + "\n```\n</details>\n")


if __name__ == "__main__":
    main()
