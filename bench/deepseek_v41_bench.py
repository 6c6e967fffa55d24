#!/usr/bin/env python3
# venv: v41
"""DeepSeek-V4.1 speed on this CPU: deepinfer against the physical limits, and
the oracle's own tokens/s beside it (a benchmark, not a test).

1. The synthetic V4.1-shaped checkpoint of bench/gen_v41_bench.py (built once
   into ~/.cache/deepinfer/bench/; hidden 1536, 10 layers of every V4.1 kind,
   48 routed experts top-6, 2 GiB Engram tables memory-mapped).
2. `deepinfer bench` on it (the engine path: scheduler, paged KV, sampler),
   2 threads, both numerics: prefill tokens/s (pp P) and decode tokens/s (tg N).
3. The limits, measured in the same run: read bandwidth (build/bench_bandwidth,
   2 threads) and the f32 FMA peak (build/bench_peak). The bytes a decode
   token reads are counted from the checkpoint's own tensor table: every
   weight of the main layers except the routed experts, the top-k share of
   the routed experts (top-k / n_experts of their bytes), the head, one
   embedding row, the hashed Engram rows, and the KV records its attention
   reads; the flops a prefill token needs are 2 x the multiply-adds of the
   weights it touches (the same count; experts at top-k) plus attention.
4. The oracle (scripts/oracle_v41.py) cannot load this checkpoint on a 24 GiB
   machine (it dequantizes every weight and table to float tensors), so its
   tokens/s are measured on the tiny golden checkpoint next to deepinfer's on
   the same prompt, both modes.
5. The DeepSeek-V4 numbers beside them come from bench/results/deepseek_v4.md
   (its own run; the date and CPU are quoted from that file).

Writes bench/results/deepseek_v41.md and prints it.

Usage: .venv-v41/bin/python bench/deepseek_v41_bench.py [-p 256] [-n 32] [-r 3]
"""
import argparse
import json
import os
import platform
import re
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")
TINY = os.path.join(ROOT, "tests", "data", "golden", "deepseek_v41", "tiny")


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def tensor_table(d):
    """name -> (dtype, shape, bytes) from the shards' headers."""
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
    out = {}
    for shard in sorted(set(idx.values())):
        with open(os.path.join(d, shard), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            h = json.loads(f.read(n))
        for k, v in h.items():
            if k != "__metadata__":
                out[k] = (v["dtype"], v["shape"], v["data_offsets"][1] - v["data_offsets"][0])
    return out


def per_token_cost(d, ctx):
    """(bytes a decode token reads, multiply-adds a token does) at context ctx."""
    cfg = json.load(open(os.path.join(d, "config.json")))["text_config"]
    T = tensor_table(d)
    E, K = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
    D, hd = cfg["hidden_size"], cfg["head_dim"]
    bytes_, macs = 0.0, 0.0
    for name, (dt, shape, nb) in T.items():
        if name.startswith("mtp.") or name.endswith("embed.weight") and "engram" not in name:
            continue
        if ".engram.embed." in name:
            continue  # hashed rows counted below
        frac = K / E if ".ffn.experts." in name else 1.0
        bytes_ += nb * frac
        if name.endswith(".weight") and len(shape) == 2:
            n_in = shape[1] * (2 if dt == "I8" else 1)  # packed e2m1 pairs
            macs += shape[0] * n_in * frac
        elif name.endswith("_fn"):
            macs += shape[0] * shape[1]
    bytes_ += D * 2  # the embedding row
    cols = (cfg["engram_max_ngram_size"] - 1) * cfg["engram_n_heads"]
    ehd = cfg["engram_head_dim"]
    bytes_ += len(cfg["engram_layer_ids"]) * cols * (ehd + ehd // 32)
    # attention KV read per token: window records of every layer + selected compressed entries
    win = min(cfg["sliding_window"], ctx)
    L = cfg["num_hidden_layers"]
    ratios = cfg["compress_ratios"][:L]
    kv_rec, comp_rec = hd + hd // 32, hd // 2 + hd // 16
    for r in ratios:
        bytes_ += win * kv_rec
        if r:
            bytes_ += min(cfg["index_topk"], ctx // r) * comp_rec
    heads = cfg["num_attention_heads"]
    attn_macs = sum((win + (min(cfg["index_topk"], ctx // r) if r else 0)) * heads * hd * 2 for r in ratios)
    return bytes_, macs + attn_macs


def deepinfer_bench(model, p, n, reps, numerics, threads=2):
    out = sh([os.path.join(BUILD, "deepinfer"), "bench", "-m", model, "-p", str(p), "-n", str(n), "-t", str(threads),
              "-r", str(reps), "-b", "", "--numerics", numerics, "--json"]).stdout
    res = {}
    for line in out.splitlines():
        if line.startswith("{"):
            j = json.loads(line)
            res[j["test"][:2]] = j
    return res


def oracle_rate(mode, prompt, n):
    py = os.path.join(ROOT, ".venv-v41", "bin", "python")
    r = subprocess.run([py, os.path.join(ROOT, "scripts", "oracle_v41.py"), "--model", TINY, "--prompt-ids",
                        " ".join(map(str, prompt)), "-n", str(n), "--mode", mode], capture_output=True, text=True)
    m = re.search(r"prefill (\d+) tok in [\d.]+s \(([\d.]+) tok/s\), decode (\d+) tok in [\d.]+s \(([\d.]+) tok/s\)",
                  r.stderr)
    return (float(m.group(2)), float(m.group(4))) if m else (float("nan"), float("nan"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-p", type=int, default=256)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("-r", type=int, default=3)
    a = ap.parse_args()
    model = sh([sys.executable, os.path.join(ROOT, "bench", "gen_v41_bench.py")]).stdout.strip().splitlines()[-1]
    load0 = os.getloadavg()[0]
    bw = json.loads(sh([os.path.join(BUILD, "bench_bandwidth")]).stdout.strip().splitlines()[-1])
    peak = json.loads(sh([os.path.join(BUILD, "bench_peak")]).stdout.strip().splitlines()[-1])
    runs = {num: deepinfer_bench(model, a.p, a.n, a.r, num) for num in ("deepinfer", "ideal")}
    load1 = os.getloadavg()[0]
    tok_bytes, tok_macs = per_token_cost(model, a.p)
    gbs = bw["read_gbs_best"]
    gflops = peak["fma_avx512_gflops_tn"] or bw["f32_gflops_best"]
    dec_bound = gbs * 1e9 / tok_bytes
    pre_bound = gflops * 1e9 / (2 * tok_macs)
    # the oracle next to deepinfer on the tiny checkpoint
    prompt = [0] + [(i * 37 + 11) % 500 + 4 for i in range(63)]
    orc = {m: oracle_rate(m, prompt, 8) for m in ("ideal", "deepinfer")}
    tiny = {m: deepinfer_bench(TINY, len(prompt), 8, 3, m) for m in ("ideal", "deepinfer")}
    v4 = ""
    v4path = os.path.join(ROOT, "bench", "results", "deepseek_v4.md")
    if os.path.exists(v4path):
        txt = open(v4path).read()
        head = re.search(r"Written by .*?on (\S+ \S+)\. Model: synthetic V4-Flash-shaped checkpoint `(\S+)`", txt)
        pp = re.search(r"\| prefill pp512 \| ([\d.]+)", txt)
        tg = re.search(r"\| decode tg16 \(after pp512\) \| ([\d.]+)", txt)
        cpu = re.search(r"CPU: ([^.]+)\.", txt)
        if head and pp and tg:
            v4 = (f"| DeepSeek-V4 `{head.group(2)}` (from bench/results/deepseek_v4.md, {head.group(1)}, "
                  f"{cpu.group(1) if cpu else '?'}; before this session's FP8/FP4 kernels) | {pp.group(1)} (pp512) | "
                  f"{tg.group(1)} (tg16) | | |\n")
    d, i_ = runs["deepinfer"], runs["ideal"]
    lines = [
        "# DeepSeek-V4.1: deepinfer against the machine's limits, and the oracle",
        "",
        f"Written by `bench/deepseek_v41_bench.py` on {time.strftime('%Y-%m-%d %H:%M')}. CPU: {cpu_name()}, "
        f"2 threads; kernels `{d['pp']['kernels']}`. 1-minute load average {load0:.1f} before, {load1:.1f} after "
        f"(2 cores, shared machine: absolute numbers are noisy). Medians of {a.r} runs.",
        "",
        f"Model: `{os.path.basename(model)}` (bench/gen_v41_bench.py): hidden 1536, 10 layers (window x2, ratio-2 "
        "owners + reusers, the ratio-1 source, 3 decoders with a candidate-stage indexer), 16 heads x 512, 48 "
        "routed experts top-6 + shared (width 768), Engram on 2 layers with 2 GiB FP8 tables memory-mapped, "
        "vocab 32768; FP8 e4m3 32x32 + MXFP4 experts.",
        "",
        f"Per decode token at context {a.p}: {tok_bytes / 1e6:.0f} MB read (weights incl. top-6/48 of the experts, "
        f"head, Engram rows, KV records); per token {2 * tok_macs / 1e9:.2f} GFLOP. Limits measured now: read "
        f"bandwidth {gbs:.1f} GB/s (bench_bandwidth, best of its runs; median {bw['read_gbs_median']:.1f}), f32 FMA "
        f"peak {gflops:.0f} GFLOP/s (bench_peak, AVX-512, 2 threads).",
        "",
        "| | prefill tok/s | decode tok/s | decode / bandwidth bound | prefill / f32 peak |",
        "|---|---|---|---|---|",
        f"| bound | {pre_bound:.0f} (f32 peak) | {dec_bound:.1f} (bandwidth) | | |",
        f"| deepinfer, --numerics deepinfer (default) | {d['pp']['tokens_per_s']:.1f} | {d['tg']['tokens_per_s']:.2f} "
        f"| {100 * d['tg']['tokens_per_s'] / dec_bound:.0f}% | {100 * d['pp']['tokens_per_s'] / pre_bound:.0f}% |",
        f"| deepinfer, --numerics ideal | {i_['pp']['tokens_per_s']:.1f} | {i_['tg']['tokens_per_s']:.2f} "
        f"| {100 * i_['tg']['tokens_per_s'] / dec_bound:.0f}% | {100 * i_['pp']['tokens_per_s'] / pre_bound:.0f}% |",
        v4.rstrip("\n"),
        "",
        f"The oracle on the tiny golden checkpoint (its whole model fits), {len(prompt)}-token prompt then 8 greedy "
        "steps, next to deepinfer on the same checkpoint and prompt (deepinfer bench, 2 threads):",
        "",
        "| mode | oracle prefill tok/s | oracle decode tok/s | deepinfer prefill tok/s | deepinfer decode tok/s "
        "| ratio prefill | ratio decode |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in ("deepinfer", "ideal"):
        op, od = orc[m]
        dp, dd = tiny[m]["pp"]["tokens_per_s"], tiny[m]["tg"]["tokens_per_s"]
        lines.append(f"| {m} | {op:.2f} | {od:.2f} | {dp:.1f} | {dd:.1f} | {dp / op:.0f}x | {dd / od:.0f}x |")
    text = "\n".join(l for l in lines if l is not None) + "\n"
    out = os.path.join(ROOT, "bench", "results", "deepseek_v41.md")
    with open(out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
