#!/usr/bin/env python3
# venv: v41
"""Goldens for the DSpark drafter of src/model/deepseek_v41_dspark.c.

Oracle: scripts/oracle_v41 (the V4.1 forward from DeepSeek's DeepInfer 0.1.0 / tile-kernels / deepinfer-gemm
reference functions) extended with the drafter (scripts/oracle_v41/dspark.py, from DeepInfer's
models/mtp/dflash.py and its tilelang_ops refs). For each tiny checkpoint (tests/data/golden/deepseek_v41/
{tiny,tiny_b}, unchanged) and each numerics mode: a fixed-seed prompt is prefilled (its rows' main keys
written), the drafter drafts one block after the greedy token; then the main model verifies [golden,
drafts[:-1]] (all accepted: the oracle keeps no rollback) and the drafter drafts again, so the second
round reads main keys that overwrote the first round's draft keys. Recorded per round: the draft logits
(Markov term included), the confidences and the greedy drafts with their top-2 margins.

  .venv-v41/bin/python scripts/gen_goldens_dspark_v41.py [tiny|tiny_b ...]
Writes tests/data/golden/deepseek_v41/<name>/dspark.json + dspark_<mode>.f32 (the logits, row-major) +
dspark_trunk_deepinfer.f32 (the oracle's trunks entering the target layers, for teacher forcing).
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
ROOT = os.path.join(HERE, "..")
SEED = 4116
PROMPT_LEN = 24  # past both checkpoints' windows (16, 8)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from oracle_v41 import refs  # noqa: E402
from oracle_v41.dspark import Drafter  # noqa: E402
from oracle_v41.model import Model, State  # noqa: E402


def one(name, mode, prompt):
    d = os.path.join(ROOT, "tests", "data", "golden", "deepseek_v41", name)
    model = Model(d, mode)
    dr = Drafter(model)
    k = model.cfg.dspark_block_size
    st = State()
    dump = {}
    lg = model.forward(prompt, st, dump=dump)
    dr.main_keys(dr.features(dump, len(prompt)), torch.arange(0, len(prompt)))
    rounds, blobs = [], []
    # deepinfer mode: the oracle's trunks entering the target layers, so the test can teacher-force them
    # (float32 drift in the 10 layers before the targets moves a few trunk elements past an fp8/bf16 boundary;
    # the drafter is compared on the oracle's features, as test_deepseek_v41.c teacher-forces the residual)
    trunks = [torch.cat([torch.cat(dump[f"R_attn_in.{L}"])[-len(prompt):] for L in dr.targets])]
    golden, last_pos = int(torch.argmax(lg[-1].double())), len(prompt) - 1
    fed = prompt
    for r in range(2):
        logits, conf, drafts, margins = dr.draft(golden, last_pos, k)
        rounds.append({"fed": fed, "golden": golden, "last_pos": last_pos, "conf": conf, "drafts": drafts,
                       "margins": margins})
        blobs.append(logits.float().numpy().astype("<f4"))
        if r == 1:
            break
        fed = [golden] + drafts[:-1]
        dump = {}
        lg = model.forward(fed, st, dump=dump)
        dr.main_keys(dr.features(dump, len(fed)), torch.arange(last_pos + 1, last_pos + 1 + len(fed)))
        trunks.append(torch.cat([torch.cat(dump[f"R_attn_in.{L}"])[-len(fed):] for L in dr.targets]))
        last_pos += len(fed)
        golden = int(torch.argmax(lg[-1].double()))
    np.concatenate([b.ravel() for b in blobs]).tofile(os.path.join(d, f"dspark_{mode}.f32"))
    if mode == "deepinfer":  # (forward, target, row, hc, hidden) in that order
        np.concatenate([t.float().numpy().astype("<f4").ravel() for t in trunks]).tofile(
            os.path.join(d, "dspark_trunk_deepinfer.f32"))
    scale = float(max(np.abs(b).max() for b in blobs))
    return {"k": k, "rounds": rounds, "logit_scale": scale}


def main():
    refs.setup()
    for name in sys.argv[1:] or ("tiny", "tiny_b"):
        d = os.path.join(ROOT, "tests", "data", "golden", "deepseek_v41", name)
        vocab = json.load(open(os.path.join(d, "config.json")))["text_config"]["vocab_size"]
        g = torch.Generator().manual_seed(SEED)
        prompt = [int(x) for x in torch.randint(4, vocab, (PROMPT_LEN,), generator=g)]
        doc = {"oracle": "scripts/oracle_v41 + oracle_v41/dspark.py (DeepInfer 0.1.0 refs)", "versions": refs.versions(),
               "seed": SEED, "prompt": prompt, "modes": {}}
        for mode in ("deepinfer", "ideal"):
            doc["modes"][mode] = one(name, mode, prompt)
            print(name, mode, [r["drafts"] for r in doc["modes"][mode]["rounds"]], flush=True)
        with open(os.path.join(d, "dspark.json"), "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
