#!/usr/bin/env python3
# venv: deepseek
"""A tiny DeepSeek-V4 checkpoint WITH an MTP module, for the loader's MTP
validation (tests/model/test_deepseek_v4.c).

transformers 5.24 cannot emit MTP weights: DeepseekV4ForCausalLM has no MTP
module and drops `mtp.*` on load (_keys_to_ignore_on_load_unexpected). So
the tensors are written here with safetensors from numpy, in the layout of
the V4 base release's MTP module (DeepSeek's inference code, class MTPBlock:
a full Block plus e_proj, h_proj, enorm, hnorm, norm and its own hc_head
parameters; checkpoint names `mtp.0.*`):

  mtp.0.<block>          every tensor of a main-model block, same names and
                         shapes as layers.4 of tiny_bf16 (a CSA, top-k routed
                         layer: compressor + indexer + gate bias), fresh
                         random values
  mtp.0.e_proj.weight    BF16 [hidden, hidden]
  mtp.0.h_proj.weight    BF16 [hidden, hidden]
  mtp.0.enorm.weight, mtp.0.hnorm.weight, mtp.0.norm.weight   F32 [hidden]
  mtp.0.hc_head_fn       F32 [hc_mult, hc_mult * hidden]
  mtp.0.hc_head_base     F32 [hc_mult]
  mtp.0.hc_head_scale    F32 [1]

Output tests/data/golden/deepseek_v4/tiny_mtp/: config.json (tiny_bf16's
with num_nextn_predict_layers 1 and a 7th compress_ratios entry, 4, for the
MTP module), model.safetensors.index.json, shard 1 = a symlink to
tiny_bf16's weights, shard 2 = the mtp.0.* tensors (~0.2 MB). MTP is not
run, so there are no logits to record: the test checks that the folder
loads, that the main model's logits are unchanged, and the errors.

Usage: .venv-deepseek/bin/python scripts/gen_goldens_deepseek_v4_mtp.py
"""
import json
import os

import numpy as np
import safetensors
import torch
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLD = os.path.join(ROOT, "tests", "data", "golden", "deepseek_v4")
SRC, OUT = os.path.join(GOLD, "tiny_bf16"), os.path.join(GOLD, "tiny_mtp")
TEMPLATE_LAYER = "layers.4."
SEED = 31
SHARD1, SHARD2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"


def f32(a):
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))


def bf16(a):
    return f32(a).to(torch.bfloat16)


def main():
    rng = np.random.default_rng(SEED)
    cfg = json.load(open(os.path.join(SRC, "config.json")))
    D, N = cfg["hidden_size"], cfg["hc_mult"]
    assert cfg["compress_ratios"][4] == 4 and len(cfg["compress_ratios"]) == cfg["num_hidden_layers"]
    mtp = {}  # name -> torch tensor (numpy values; torch only for the BF16 dtype)
    with safetensors.safe_open(os.path.join(SRC, "model.safetensors"), "pt") as f:
        for name in f.keys():
            if not name.startswith(TEMPLATE_LAYER):
                continue
            t = f.get_tensor(name)
            shape, dt = tuple(t.shape), str(t.dtype)
            key = "mtp.0." + name[len(TEMPLATE_LAYER):]
            if "tid2eid" in name:
                raise SystemExit("template layer must be top-k routed")
            if dt == "torch.bfloat16":
                mtp[key] = bf16(rng.standard_normal(shape) * 0.05)
            elif dt == "torch.float32":
                mtp[key] = f32(1.0 + 0.1 * rng.standard_normal(shape))
            else:
                raise SystemExit(f"{name}: unexpected dtype {dt}")
    for proj in ("e_proj", "h_proj"):
        mtp[f"mtp.0.{proj}.weight"] = bf16(rng.standard_normal((D, D)) / np.sqrt(D))
    for nm in ("enorm", "hnorm", "norm"):
        mtp[f"mtp.0.{nm}.weight"] = f32(1.0 + 0.1 * rng.standard_normal(D))
    mtp["mtp.0.hc_head_fn"] = f32(rng.standard_normal((N, N * D)) / np.sqrt(N * D))
    mtp["mtp.0.hc_head_base"] = f32(0.5 * rng.standard_normal(N))
    mtp["mtp.0.hc_head_scale"] = f32(0.5 + rng.random(1))

    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    save_file(mtp, os.path.join(OUT, SHARD2), metadata={"format": "pt"})
    os.symlink(os.path.join("..", "tiny_bf16", "model.safetensors"), os.path.join(OUT, SHARD1))
    with safetensors.safe_open(os.path.join(SRC, "model.safetensors"), "np") as f:
        main_names = list(f.keys())
    wmap = {n: SHARD1 for n in main_names}
    wmap.update({n: SHARD2 for n in mtp})
    with open(os.path.join(OUT, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"source": "scripts/gen_goldens_deepseek_v4_mtp.py"},
                   "weight_map": dict(sorted(wmap.items()))}, f, indent=1)
        f.write("\n")
    cfg["num_nextn_predict_layers"] = 1
    cfg["compress_ratios"] = cfg["compress_ratios"] + [4]
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    print(f"tiny_mtp: {len(mtp)} mtp.0.* tensors, "
          f"{os.path.getsize(os.path.join(OUT, SHARD2))} bytes")


if __name__ == "__main__":
    main()
