#!/usr/bin/env python3
"""Markdown tables from `deepinfer bench serve` records (JSON Lines, one
point per line), for bench/serve_sweep.sh: per engine and point the
throughput, TTFT/TPOT percentiles, goodput under the records' SLO, cost per
million output tokens and the load average; then each engine's best goodput.
Stdlib only.

  python3 bench/serve_sweep_report.py A.jsonl B.jsonl > report.md
"""
import json
import sys


def load(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def main(paths):
    runs = [(load(p), p) for p in paths]
    first = runs[0][0][0]
    slo, hw, wl = first["slo"], first["hardware"], first["workload"]
    print(f"# Serving sweep: {', '.join(r[0]['engine']['name'] for r, _ in runs)}\n")
    print(f"Model `{first['model']['id']}`; CPU {hw['cpu_model']} ({hw['cpus_usable']} usable CPUs, "
          f"{hw['memory']}); workload: {wl['turns']} turns per conversation, a {wl['system_words']}-word "
          f"system prompt shared by {wl['shared_system_fraction']:.0%} of conversations, user turns "
          f"{wl['input_words']} words, max_tokens {wl['output_max_tokens']} (ignore_eos {wl['ignore_eos']}), "
          f"seed {wl['seed']}, closed loop. SLO: TTFT <= {slo['ttft_ms']:g} ms and TPOT <= {slo['tpot_ms']:g} ms. "
          f"Cost at {fmt(first['cost_per_hour'], 'g')} $/hour for the machine (note: {first['note']}).\n")
    print("The machine is shared with other work: the load average at the start and end of every point is "
          "in the last column; numbers from a loaded machine are lower bounds of both engines.\n")
    best = []
    for recs, path in runs:
        name = recs[0]["engine"]["name"]
        print(f"## {name}\n\n`{path.split('/')[-1]}`; engine: {recs[0]['engine']['server_header'] or '-'} "
              f"{recs[0]['engine']['build_info'] or ''}\n")
        print("| users | sent | ok | err | tmo | out tok/s | TTFT p50 / p99 ms | TPOT p50 / p99 ms | "
              "goodput req/s | SLO met | prefix hit | $ / 1M out tok | load |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        top = None
        for r in recs:
            q = r["requests"]
            print(f"| {r['workload']['concurrency']} | {q['sent']} | {q['ok']} | {q['errors']} | {q['timeouts']} | "
                  f"{r['output_tokens_per_s']:.1f} | {r['ttft_ms']['p50']:.0f} / {r['ttft_ms']['p99']:.0f} | "
                  f"{r['tpot_ms']['p50']:.1f} / {r['tpot_ms']['p99']:.1f} | {r['goodput_requests_per_s']:.3f} | "
                  f"{r['slo_attainment']:.0%} | {fmt(r['prefix_cache_hit_rate'], '.0%')} | "
                  f"{fmt(r['cost_per_million_output_tokens'], '.2f')} | "
                  f"{r['hardware']['loadavg_start']:.1f} -> {r['hardware']['loadavg_end']:.1f} |")
            if top is None or r["goodput_requests_per_s"] > top["goodput_requests_per_s"]:
                top = r
        best.append((name, top))
        print()
    print("## Best goodput under the SLO\n")
    print("| engine | users | goodput req/s | goodput out tok/s | $ / 1M out tok at that point |")
    print("|---|---:|---:|---:|---:|")
    for name, r in best:
        tok = r["goodput_requests_per_s"] * (r["output_tokens"] / max(1, r["requests"]["ok"]))
        print(f"| {name} | {r['workload']['concurrency']} | {r['goodput_requests_per_s']:.3f} | {tok:.1f} | "
              f"{fmt(r['cost_per_million_output_tokens'], '.2f')} |")
    if len(best) == 2 and best[1][1]["goodput_requests_per_s"] > 0:
        print(f"\nRatio of best goodputs, {best[0][0]} / {best[1][0]}: "
              f"{best[0][1]['goodput_requests_per_s'] / best[1][1]['goodput_requests_per_s']:.2f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
