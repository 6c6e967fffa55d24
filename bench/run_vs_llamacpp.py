#!/usr/bin/env python3
"""Tokens/s of `deepinfer run` next to llama.cpp (PyPI llama-cpp-python) on
the same GGUF, the same raw prompt, the same thread count, greedy decoding.

deepinfer: `deepinfer run --raw --temp 0 -t THREADS`, numbers from its
summary line (prefill = prompt tokens / (first token - start of the first
forward); decode = (generated - 1) / (last token - first token)).
llama.cpp: a fresh KV cache per repetition (Llama.reset), then
create_completion(stream=True, temperature=0) timed from Python the same way
(prefill = prompt tokens / time to the first token; decode = (generated - 1)
/ rest), and llama.cpp's own counters (llama_perf_context: prompt eval and
eval time, without Python's sampling overhead) next to them.
EOS is not banned on either side; each side's rate uses its own token count.

llama.cpp's CPU backend uses OpenMP; on an oversubscribed machine its
spinning barriers collapse, so the environment's OMP_WAIT_POLICY (printed) is
part of the result: compare with OMP_WAIT_POLICY=PASSIVE when the load
average exceeds the core count.

--kernels default,ggml runs deepinfer once per kernel table in every
repetition ("default": the exact tables; "ggml": llama.cpp's CPU numerics,
the same arithmetic as the llama.cpp run next to it; any table name works).

Reports medians over --reps runs (absolute numbers on shared CPUs are noisy:
read the ratios). No assertions.

Usage: .venv-llamacpp/bin/python bench/run_vs_llamacpp.py [--bin build/deepinfer]
       [--model M] [--prompt-file F] [-n 128] [--reps 5] [--threads 2] [--kernels default,ggml]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_PROMPT = (
    "The printing press changed how knowledge moved through Europe. Before it, books were "
    "copied by hand in monasteries and workshops, and a single volume could take months to "
    "finish. Johannes Gutenberg combined movable metal type, an oil-based ink and a screw "
    "press adapted from wine making, and by the 1450s his workshop in Mainz was printing "
    "bibles. Within fifty years presses were running in more than two hundred cities. In this "
    "essay we look at the technical pieces of the invention, at the economics of the first "
    "print shops, and at the effects on science, religion and politics. First, the type:"
)
SUMMARY = re.compile(r"\[prompt (\d+) tok \((\d+) cached\), generated (\d+) tok \| prefill ([\d.]+) tok/s \| "
                     r"decode ([\d.]+) tok/s")


def run_deepinfer(args, prompt, kernels="default"):
    cmd = [args.bin, "run", "-m", args.model, "--raw", "-p", prompt, "-n", str(args.n), "--temp", "0",
           "-t", str(args.threads)]
    if kernels != "default":
        cmd += ["--kernels", kernels]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = SUMMARY.search(p.stderr)
    if not m:
        sys.exit(f"no summary line in deepinfer's stderr:\n{p.stderr}")
    return {"prompt": int(m[1]), "gen": int(m[3]), "prefill": float(m[4]), "decode": float(m[5])}


def run_llamacpp(llm, llama_cpp, args, prompt):
    llm.reset()
    have_perf = hasattr(llama_cpp, "llama_perf_context")
    if have_perf:
        llama_cpp.llama_perf_context_reset(llm.ctx)
    n_prompt = len(llm.tokenize(prompt.encode(), add_bos=True, special=False))
    t0 = time.perf_counter()
    t_first = None
    n_gen = 0
    for chunk in llm.create_completion(prompt, max_tokens=args.n, temperature=0.0, top_k=1, stream=True):
        c = chunk["choices"][0]
        if not c["text"] and c["finish_reason"] is not None:
            continue  # the closing chunk carries no token
        if t_first is None:
            t_first = time.perf_counter()
        n_gen += 1  # one streamed chunk per token (text held back for UTF-8 is rare here)
    t_end = time.perf_counter()
    r = {"prompt": n_prompt, "gen": n_gen, "prefill": n_prompt / (t_first - t0),
         "decode": (n_gen - 1) / (t_end - t_first) if n_gen > 1 else 0.0}
    if have_perf:
        d = llama_cpp.llama_perf_context(llm.ctx)
        r["prefill_ggml"] = d.n_p_eval / (d.t_p_eval_ms / 1e3) if d.t_p_eval_ms > 0 else 0.0
        r["decode_ggml"] = d.n_eval / (d.t_eval_ms / 1e3) if d.t_eval_ms > 0 else 0.0
    return r


def has_amx():
    try:
        return " amx_tile" in open("/proc/cpuinfo").read()
    except OSError:
        return False


def plain_cpu_buffers():
    """use_extra_bufts = False: the AMX weight buffer segfaults in
    ggml_backend_amx_mul_mat on this project's CPUs (ggml-org/llama.cpp#20824).
    It also turns off the CPU_REPACK layouts, which can cost llama.cpp some
    speed: the table says which mode ran."""
    import llama_cpp.llama_cpp as lc
    orig = lc.llama_model_default_params

    def params():
        p = orig()
        p.use_extra_bufts = False
        return p
    lc.llama_model_default_params = params


def med(rs, k):
    v = [r[k] for r in rs if k in r]
    return statistics.median(v) if v else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "deepinfer"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--prompt-file")
    ap.add_argument("-n", type=int, default=128, help="tokens to generate")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kernels", default="default",
                    help="comma-separated deepinfer kernel tables to run (default = exact tables)")
    ap.add_argument("--extra-bufts", choices=["auto", "on", "off"], default="auto",
                    help="llama.cpp AMX/repack weight buffers (auto: off when the CPU has AMX)")
    args = ap.parse_args()
    extra = args.extra_bufts == "on" or (args.extra_bufts == "auto" and not has_amx())
    if not extra:
        plain_cpu_buffers()
    prompt = open(args.prompt_file).read() if args.prompt_file else DEFAULT_PROMPT

    import llama_cpp
    from llama_cpp import Llama
    llm = Llama(model_path=args.model, n_ctx=2048, n_batch=512, n_threads=args.threads,
                n_threads_batch=args.threads, verbose=False)
    modes = args.kernels.split(",")
    ours, theirs = {k: [] for k in modes}, []
    run_deepinfer(args, prompt)            # warm the page cache
    run_llamacpp(llm, llama_cpp, args, prompt)
    for i in range(args.reps):             # interleaved, so load changes hit both
        for k in modes:
            ours[k].append(run_deepinfer(args, prompt, k))
        theirs.append(run_llamacpp(llm, llama_cpp, args, prompt))
        mine = " | ".join(f"deepinfer[{k}] prefill {ours[k][-1]['prefill']:.1f} decode {ours[k][-1]['decode']:.1f}"
                          for k in modes)
        print(f"rep {i + 1}/{args.reps}: {mine} | llama.cpp prefill {theirs[-1]['prefill']:.1f} decode "
              f"{theirs[-1]['decode']:.1f} tok/s", file=sys.stderr)
    first = ours[modes[0]]

    print(f"model {os.path.basename(args.model)}, {args.threads} threads, prompt "
          f"{first[0]['prompt']} tok (llama.cpp {theirs[0]['prompt']}), generate <= {args.n} greedy, "
          f"median of {args.reps}; llama-cpp-python {llama_cpp.__version__}, "
          f"extra buffer types {'on' if extra else 'off'}, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'engine':<34} {'gen tok':>8} {'prefill tok/s':>14} {'decode tok/s':>13}")
    for k in modes:
        print(f"{'deepinfer run --kernels ' + k:<34} {med(ours[k], 'gen'):>8.0f} {med(ours[k], 'prefill'):>14.1f} "
              f"{med(ours[k], 'decode'):>13.1f}")
    print(f"{'llama-cpp-python (wall, Python)':<34} {med(theirs, 'gen'):>8.0f} "
          f"{med(theirs, 'prefill'):>14.1f} {med(theirs, 'decode'):>13.1f}")
    if "prefill_ggml" in theirs[0]:
        print(f"{'llama.cpp (its perf counters)':<34} {'':>8} {med(theirs, 'prefill_ggml'):>14.1f} "
              f"{med(theirs, 'decode_ggml'):>13.1f}")
    for k in modes:
        print(f"{'ratio [' + k + '] / llama.cpp wall':<34} {'':>8} "
              f"{med(ours[k], 'prefill') / med(theirs, 'prefill'):>14.2f} "
              f"{med(ours[k], 'decode') / med(theirs, 'decode'):>13.2f}")


if __name__ == "__main__":
    main()
