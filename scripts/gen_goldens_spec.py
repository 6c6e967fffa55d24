#!/usr/bin/env python3
# venv: v41
"""Golden verify rows for DeepInfer's speculative acceptance rule (src/spec/accept.c).

Oracle: DeepInfer 0.1.0's fused_sample_ref (model_executor/layers/tilelang_ops/
fused_sample.py) with random_sampling_ref, _hash_to_uniform and
apply_top_p_top_k_ref (random_sampling.py, fused_sample.py) and
DRAFT_PROB_PENALTY (common.py). Those modules import tilelang and
DeepInfer's C++ engine at the top, so the functions are taken out of the
files with ast and run on their own (nothing is copied into this repo).
Per verify row it records the target distribution p (DeepInfer's
exp(log_softmax) in f32), the draft distribution q = exp(draft logprobs),
the draft token, DeepInfer's two uniforms (the accept test's, stream
pos*3+2, and the residual sample's, stream pos*3+1, both from its SplitMix
hash), and its answers: accepted or not, the token, accept_probs.

  DEEPINFER_REF=PATH/deepinfer-0.1.0 python scripts/gen_goldens_spec.py
Writes tests/data/golden/spec/deepinfer_accept.txt (seed 20261202).
"""
import ast
import os
import types

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
REF = os.environ.get("DEEPINFER_REF", "")  # an unpacked deepinfer-0.1.0 sdist (scripts/oracle_v41/refs.py)
OPS = os.path.join(REF, "deepinfer", "model_executor", "layers", "tilelang_ops")
OUT = os.path.join(ROOT, "tests", "data", "golden", "spec")
ROWS, VOCAB = 96, 32


def take(path, names, ns):
    tree = ast.parse(open(path).read())
    keep = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.Assign)) and
            (getattr(n, "name", None) in names or
             (isinstance(n, ast.Assign) and any(getattr(t, "id", None) in names for t in n.targets)))]
    exec(compile(ast.Module(body=keep, type_ignores=[]), path, "exec"), ns)


class LogitsTransformInputs:
    def __init__(self, temperatures, top_ps, top_ks):
        self.temperatures, self.top_ps, self.top_ks = temperatures, top_ps, top_ks


class SamplingKernelInputs:
    def __init__(self, logits, seq_seeds, sample_positions):
        self.logits, self.seq_seeds, self.sample_positions = logits, seq_seeds, sample_positions


def main():
    ns = {"torch": torch, "LogitsTransformInputs": LogitsTransformInputs,
          "SamplingKernelInputs": SamplingKernelInputs}
    take(os.path.join(OPS, "common.py"), {"DRAFT_PROB_PENALTY"}, ns)
    take(os.path.join(OPS, "random_sampling.py"), {"i64", "urshift", "_hash_to_uniform", "random_sampling_ref"}, ns)
    take(os.path.join(OPS, "fused_sample.py"), {"_MTP_SEED_OFFSET", "apply_top_p_top_k_ref", "fused_sample_ref"}, ns)
    g = torch.Generator().manual_seed(20261202)
    logits = torch.randn(ROWS, VOCAB, generator=g) * 2
    draft_lp = torch.log_softmax(torch.randn(ROWS, VOCAB, generator=g) * 2, dim=-1)
    # drafts: half sampled from q, half uniform (many unlikely drafts: rejects)
    q = draft_lp.exp()
    sampled = torch.multinomial(q, 1, generator=g).squeeze(1)
    uniform = torch.randint(0, VOCAB, (ROWS,), generator=g)
    draft = torch.where(torch.arange(ROWS) % 2 == 0, sampled, uniform).int()
    seeds = torch.randint(0, 1 << 62, (ROWS,), generator=g)
    pos = torch.randint(0, 1 << 20, (ROWS,), generator=g).int()
    inputs = SamplingKernelInputs(LogitsTransformInputs(torch.ones(ROWS), torch.ones(ROWS),
                                                        torch.full((ROWS,), -1, dtype=torch.int32)), seeds, pos)
    lp, tok, acc, _, acc_p = ns["fused_sample_ref"](logits.clone(), inputs, is_verify=torch.ones(ROWS, dtype=torch.bool),
                                                    last_nextn_token_logprobs=draft_lp, last_next_n_token_ids=draft)
    # the two uniforms, as fused_sample_ref and random_sampling_ref derive them
    i64, h = ns["i64"], ns["_hash_to_uniform"]
    u_acc = h(seeds ^ ((pos.to(torch.int64) * 3 + 2) * i64(0x9E3779B97F4A7C15)))
    s = (pos.to(torch.int64) * 3 + 1) * i64(0x9E3779B97F4A7C15)
    u_res = h(seeds + (s ^ (s * (1 << 13))))
    p = lp.exp()
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "deepinfer_accept.txt"), "w") as f:
        f.write("# DeepInfer 0.1.0 fused_sample_ref verify rows: ROWS VOCAB, then per row: draft u_accept "
                "u_resample accepted token accept_prob, p[VOCAB], q[VOCAB]\n")
        f.write("%d %d\n" % (ROWS, VOCAB))
        for r in range(ROWS):
            f.write("%d %.17g %.17g %d %d %.9g\n" % (int(draft[r]), float(u_acc[r]), float(u_res[r]), int(acc[r]),
                                                     int(tok[r]), float(acc_p[r])))
            f.write(" ".join("%.9g" % float(x) for x in p[r]) + "\n")
            f.write(" ".join("%.9g" % float(x) for x in q[r]) + "\n")
    print("accepted %d of %d rows" % (int(acc.sum()), ROWS))


if __name__ == "__main__":
    main()
