#!/usr/bin/env python3
# venv: v41
"""Vision-tower goldens for tiny_vl, from DeepInfer 0.1.0's own modules on CPU.

    .venv-v41/bin/python scripts/gen_goldens_vision_tower.py

Builds DeepInfer's VisionTransformer (model_executor/models/vision_encoder/vit.py)
with tiny_vl's sizes (the file's module constants EMBED_DIM / DEPTH / NUM_HEADS set
to the checkpoint's, as a tiny config must) and MlpProjector (mlp_projector.py),
loads tests/data/golden/deepseek_v41/tiny_vl's vision.* / aligner.* tensors into
them through DeepInfer's hugging_face/names.py:hf_to_model, and runs, in f32:
  patches (the goldens of gen_goldens_vision.py: rgb_pad_to_patches_ref)
  -> VisionTransformer.forward -> image_embed_ops.batch_downsample_ref
  -> MlpProjector.layers -> image_embed_ops.replace_input_embeds_ref
The CUDA-only calls are replaced by plain code of the same semantics:
  vit._linear           -> x @ w.T + b                     (torch.addmm / cublaslt gemm)
  vit.norm              -> tilelang_ops/norm.py:norm_ref   (DeepInfer's own reference)
  vit.swiglu_forward    -> tile_kernels.torch.swiglu_forward (TK's own reference)
  vit.apply_rotary      -> NeoX half-split rotation, TK rope_cuda.py's formula
                           (first*cos - second*sin, first*sin + second*cos)
  vit._flash_attn_fwd   -> softmax(q k^T / sqrt(hd)) v per image (varlen, non-causal)
  VisionRotaryEmbedding's device="cuda" -> CPU
Writes tests/data/golden/vision/tower/<stem>.{vit,rows}.f32 and tower.json.

Then the multimodal forward: our V4.1 oracle (scripts/oracle_v41/, DeepSeek's reference
functions; ideal numerics) on prompts whose image placeholder (image_token_id) is
expanded as DeepInfer's MultimodalProcessor.overwrite_prompt does (vocab + IMAGE, then
vocab + IMAGE_PAD), the image positions fed the rows above (deepseek_vl.py
get_input_embeddings), bias_vl routing and the Engram image mask through TK's own refs:
tower/forward.json (prompts, expanded ids, greedy ids, margins) + forward_<k>.logits.f32.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oracle_v41 import refs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CKPT = ROOT / "tests" / "data" / "golden" / "deepseek_v41" / "tiny_vl"
GOLD = ROOT / "tests" / "data" / "golden" / "vision"
OUT = GOLD / "tower"
IMAGES = ["rgb_40x30.png", "rgb_17x91.png", "rgb_130x20.png", "jpeg_123x45_q75.jpg", "rgb_300x200.png"]


def rope_neox(q, cos_sin, k=None, interleaved=False):
    import torch

    assert not interleaved
    half = cos_sin.shape[1] // 2
    cos, sin = cos_sin[:, None, :half], cos_sin[:, None, half:]
    for x in (q, k):
        if x is None:
            continue
        a, b = x[..., :half].clone(), x[..., half:].clone()
        x[..., :half] = torch.addcmul(-(b * sin), a, cos)
        x[..., half:] = torch.addcmul(b * cos, a, sin)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=None,
                     causal=False, **_):
    import torch

    assert not causal and softmax_scale is None
    out = torch.empty_like(q)
    cu = cu_seqlens_q.tolist()
    for s, e in zip(cu[:-1], cu[1:]):
        qs, ks, vs = (t[s:e].transpose(0, 1) for t in (q, k, v))  # (H, n, hd)
        w = torch.softmax(qs @ ks.transpose(1, 2) / (q.shape[-1] ** 0.5), dim=-1)
        out[s:e] = (w @ vs).transpose(0, 1)
    return (out,)


N_NEW = 8
# (prompt with the placeholder id 4 of tiny_vl, images in placeholder order)
FORWARD_CASES = [
    ([0, 17, 42, 4, 99, 100, 7, 250, 31], ["rgb_40x30.png"]),
    ([0, 4, 12, 13, 14, 4, 200, 201], ["rgb_130x20.png", "jpeg_123x45_q75.jpg"]),
    # what `deepinfer run --raw --image rgb_40x30.png -p "Describe it"` submits: the
    # placeholder, then the text's ids (tiny_vl's tokenizer.json adds no BOS; tests/cli/vision.sh
    # compares its greedy ids)
    (None, ["rgb_40x30.png"]),
]
CLI_TEXT = "Describe it"


def forward_goldens(cfg: dict, rows: dict) -> None:
    import torch
    from oracle_v41.model import Model, run

    V = cfg["text_config"]["vocab_size"]
    ph = cfg["image_token_id"]
    model = Model(CKPT, "ideal")
    out = []
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(CKPT / "tokenizer.json"))
    for k, (prompt, images) in enumerate(FORWARD_CASES):
        if prompt is None:
            prompt = [ph] + tok.encode(CLI_TEXT, add_special_tokens=True).ids
        ids, emb, it = [], [], iter(images)
        for t in prompt:  # MultimodalProcessor.overwrite_prompt
            if t == ph:
                r = rows[next(it)]
                ids += [V + 2] + [V + 1] * (r.shape[0] - 1)  # ImageTokenOffset.IMAGE, IMAGE_PAD
                emb.append(r)
            else:
                ids.append(t)
                emb.append(torch.zeros(1, cfg["text_config"]["hidden_size"]))
        emb = torch.cat(emb).to(model.num.dt)
        gen, logits, margins, _, _ = run(model, ids, N_NEW, embeds=emb)
        logits.float().numpy().astype("<f4").tofile(OUT / f"forward_{k}.logits.f32")
        out.append(dict(prompt=prompt, images=images, expanded=ids, greedy=gen, margins=margins,
                        cli_text=CLI_TEXT if FORWARD_CASES[k][0] is None else None,
                        logits_rows=int(logits.shape[0]), vocab=V))
        print(f"forward case {k}: {len(ids)} positions, greedy {gen}, min margin {min(margins):.3g}", file=sys.stderr)
    (OUT / "forward.json").write_text(json.dumps(dict(
        oracle="scripts/oracle_v41 (DeepSeek's reference functions, ideal numerics) with image rows from "
               "DeepInfer's tower; logits f32 LE (logits_rows, vocab): every prompt position, then each "
               "generated step except the last", n_new=N_NEW, cases=out), indent=1) + "\n")


def main() -> None:
    import torch
    from safetensors import safe_open

    torch.set_num_threads(2)
    R = refs.setup()
    root = R.roots["deepinfer"] / "deepinfer"
    vit = refs.load_by_path("_di_vit", root / "model_executor" / "models" / "vision_encoder" / "vit.py")
    mlp = refs.load_by_path("_di_mlp_projector", root / "model_executor" / "models" / "vision_encoder" / "mlp_projector.py")
    eo = refs.load_by_path("_di_image_embed_ops2", root / "model_executor" / "layers" / "tilelang_ops" / "image_embed_ops.py")
    normmod = refs.load_by_path("_di_norm", root / "model_executor" / "layers" / "tilelang_ops" / "norm.py")
    from deepinfer import AttrDict
    from deepinfer.hugging_face.names import hf_to_model
    from deepinfer.multimodal_tokens import TokenType

    cfg = json.loads((CKPT / "config.json").read_text())
    vc, D = cfg["vision_config"], cfg["text_config"]["hidden_size"]
    vit.EMBED_DIM, vit.DEPTH, vit.NUM_HEADS = vc["hidden_size"], vc["depth"], vc["num_heads"]
    vit.MLP_RATIO, vit.MULTIPLE_OF, vit.PATCH_SIZE = vc["mlp_ratio"], vc["multiple_of"], vc["patch_size"]
    vit._linear = lambda x, w, b: (x @ w.T + b) if b is not None else x @ w.T
    vit.norm = lambda x, w, residual=None, eps=1e-6: normmod.norm_ref(x, w, eps, residual)
    vit.swiglu_forward = lambda g, _dt: R.TK.swiglu_forward(g)
    vit.apply_rotary = rope_neox
    vit._flash_attn_fwd = attention_varlen
    real_arange = torch.arange
    with mock.patch.object(torch, "arange", lambda *a, **k: real_arange(*a, **{**k, "device": "cpu"})):
        tower = vit.VisionTransformer(recomputing_every_layer=2)
    proj = mlp.MlpProjector(AttrDict(projector_type="downsample_mlp_gelu", input_dim=vc["hidden_size"],
                                     hidden_size=D, depth=2, downsample_ratio=vc["downsample_ratio"]))
    # HF tensors -> the modules' parameters by DeepInfer's own name map
    wmap = json.loads((CKPT / "model.safetensors.index.json").read_text())["weight_map"]
    sd_t, sd_p, special = {}, {}, {}
    for name, shard in wmap.items():
        if not name.startswith(("vision.", "aligner.", "image_")):
            continue
        with safe_open(str(CKPT / shard), "pt") as f:
            t = f.get_tensor(name).float()
        if name.startswith("image_"):
            special[name] = t
            continue
        internal = hf_to_model(name, n_layer=cfg["text_config"]["num_hidden_layers"])
        if internal.startswith("vision_pipeline.aligner.visual_encoder."):
            sd_t[internal.removeprefix("vision_pipeline.aligner.visual_encoder.")] = t
        elif internal.startswith("vision_pipeline.aligner.aligner."):
            sd_p[internal.removeprefix("vision_pipeline.aligner.aligner.")] = t
        else:
            raise SystemExit(f"unmapped vision tensor {name} -> {internal}")
    missing, unexpected = tower.load_state_dict(sd_t, strict=False)
    assert not unexpected and not [m for m in missing if m != "rope_table"], (missing, unexpected)
    proj.load_state_dict(sd_p, strict=True)
    tower.float().eval()
    proj.float().eval()
    manifest = json.loads((GOLD / "manifest.json").read_text())
    files = {f["file"]: f for f in manifest["files"]}
    OUT.mkdir(parents=True, exist_ok=True)
    rows_meta, row_cache = [], {}
    p = vc["patch_size"]
    for name in IMAGES:
        f = files[name]
        lay = f["layout"]
        stem = name.rsplit(".", 1)[0]
        patches = torch.from_numpy(np.fromfile(GOLD / "pre" / f"{stem}.patches.f32", np.float32)).view(-1, 3, p, p)
        nw, nh = lay["n_vit_w"], lay["n_vit_h"]
        hpos = torch.arange(nh).unsqueeze(1).expand(-1, nw)
        wpos = torch.arange(nw).unsqueeze(0).expand(nh, -1)
        pos = torch.stack([hpos, wpos], dim=-1).reshape(-1, 2)  # load_image_anyres's images_global_attn_pos_id
        with torch.no_grad():
            feats = tower(patches, pos, torch.tensor([0, nw * nh], dtype=torch.int32), nw * nh)
            crop = torch.tensor([[nw, nh]])
            ds = eo.batch_downsample_ref(feats, crop, vc["downsample_ratio"], mode="downsample_mlp_gelu")
            emb = proj.layers(ds)
            types = torch.tensor(f["mm_token_type"], dtype=torch.int32)
            rows = torch.zeros(len(types), D)
            eo.replace_input_embeds_ref(rows, types, emb, TokenType.IMAGE,
                                        torch.tensor([TokenType.IMAGE_NEW_LINE, TokenType.IMAGE_START, TokenType.IMAGE_END]),
                                        torch.stack([special["image_newline"], special["image_start"], special["image_end"]]))
        row_cache[name] = rows
        feats.numpy().astype(np.float32).tofile(OUT / f"{stem}.vit.f32")
        rows.numpy().astype(np.float32).tofile(OUT / f"{stem}.rows.f32")
        rows_meta.append(dict(file=name, n_patches=nw * nh, n_tokens=len(types), vit_dim=vc["hidden_size"], n_embd=D,
                              rms_rows=float(rows.pow(2).mean().sqrt())))
    forward_goldens(cfg, row_cache)
    (OUT / "tower.json").write_text(json.dumps(dict(
        oracle="DeepInfer 0.1.0 vision_encoder/vit.py VisionTransformer + mlp_projector.py MlpProjector + "
               "image_embed_ops batch_downsample_ref / replace_input_embeds_ref, f32 on CPU",
        versions=refs.versions(), checkpoint="tests/data/golden/deepseek_v41/tiny_vl", images=rows_meta), indent=1) + "\n")
    print(f"tower goldens: {len(rows_meta)} images", file=sys.stderr)


if __name__ == "__main__":
    main()
