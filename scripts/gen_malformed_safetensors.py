#!/usr/bin/env python3
"""Writes the safetensors and config.json test corpora (deterministic).

Valid seeds are written by the PyPI `safetensors` package (the reference
implementation, an independent writer) from arrays made with numpy and
ml_dtypes; malformed files are built byte by byte here, each breaking one
rule. Outputs (all small, all committed):

  tests/data/seeds/safetensors/      valid single files and checkpoint folders
  tests/data/seeds/config/           valid DeepSeek-V4 / V4.1-style config.json
  tests/data/malformed/safetensors/  one broken rule per file / folder
  tests/data/malformed/config/       one broken rule per file
  tests/data/expected/               what the C tests compare against:
      safetensors_seeds.json         every seed tensor: dtype, shape, bytes (hex)
      malformed_safetensors.tsv      case <TAB> substring the error must contain
      malformed_config.tsv           same for configs

Run: .venv/bin/python scripts/gen_malformed_safetensors.py
(needs numpy, ml_dtypes, safetensors; see scripts/requirements-tools.txt).

The config seeds use the field names of HF transformers 5.24.0
`models/deepseek_v4/configuration_deepseek_v4.py`, in the legacy spelling
real checkpoints ship (compress_ratios, num_hash_layers, qk_rope_head_dim,
rope_scaling), which that class folds into its newer fields. transformers
5.24.0 has no deepseek_v41 module, so the V4.1-style seed only shows the
layout that matters to the reader (the text model under "text_config",
a vision_config beside it) with V4 field names inside.
"""
import json
import os
import shutil
import struct
import sys

import ml_dtypes
import numpy as np
import safetensors
from safetensors import TensorSpec, serialize_file

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DATA = os.path.join(ROOT, "tests", "data")
SEEDS = os.path.join(DATA, "seeds", "safetensors")
CFG_SEEDS = os.path.join(DATA, "seeds", "config")
BAD = os.path.join(DATA, "malformed", "safetensors")
BAD_CFG = os.path.join(DATA, "malformed", "config")
EXPECTED = os.path.join(DATA, "expected")

# numpy dtype -> (safetensors TensorSpec dtype, safetensors header dtype)
SPEC = {
    np.dtype(np.float32): ("float32", "F32"),
    np.dtype(np.float16): ("float16", "F16"),
    np.dtype(ml_dtypes.bfloat16): ("bfloat16", "BF16"),
    np.dtype(np.float64): ("float64", "F64"),
    np.dtype(ml_dtypes.float8_e4m3fn): ("float8_e4m3fn", "F8_E4M3"),
    np.dtype(ml_dtypes.float8_e8m0fnu): ("float8_e8m0fnu", "F8_E8M0"),
    np.dtype(np.uint8): ("uint8", "U8"),
    np.dtype(np.int8): ("int8", "I8"),
    np.dtype(np.int16): ("int16", "I16"),
    np.dtype(np.int32): ("int32", "I32"),
    np.dtype(np.int64): ("int64", "I64"),
    np.dtype(np.bool_): ("bool", "BOOL"),
}


def reset(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)


# ---- valid seeds ----------------------------------------------------------

def seed_tensors(rng):
    """A small model-like set: every dtype the reader supports, including an
    FP8 weight with its E8M0 block scales (two 4x4 blocks per row here)."""
    w = rng.standard_normal((4, 8)).astype(np.float32)
    fp8 = (rng.standard_normal((4, 8)) * 4).astype(ml_dtypes.float8_e4m3fn)
    scales = np.array([[2.0 ** -3, 2.0 ** 1], [1.0, 2.0 ** -7]], dtype=np.float32)
    return {
        "model.embed_tokens.weight": rng.standard_normal((6, 4)).astype(ml_dtypes.bfloat16),
        "model.layers.0.attn.wq_a.weight": fp8,
        "model.layers.0.attn.wq_a.weight_scale_inv": scales.astype(ml_dtypes.float8_e8m0fnu),
        "model.layers.0.attn.norm.weight": w[0].copy(),
        "model.layers.0.ffn.gate.bias": rng.standard_normal(5).astype(np.float16),
        "model.layers.0.ffn.gate.tid2eid": rng.integers(0, 8, (3, 2)).astype(np.int32),
        "model.layers.0.rope.inv_freq": rng.standard_normal(3).astype(np.float64),
        "model.layers.0.engram.map": rng.integers(-2**40, 2**40, 3).astype(np.int64),
        "model.layers.0.q8": rng.integers(-128, 127, 7).astype(np.int8),
        "model.layers.0.q16": rng.integers(-30000, 30000, 3).astype(np.int16),
        "model.layers.0.raw_scales": rng.integers(0, 255, (2, 3)).astype(np.uint8),
        "model.layers.0.mask": rng.integers(0, 2, 5).astype(np.bool_),
        "model.scalar": np.array(1.5, dtype=np.float32),
        "model.empty": np.zeros((0, 4), dtype=np.float32),
    }


def write_st(path, tensors, metadata=None):
    """Writes with the reference implementation; returns the expectation."""
    keep = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
    specs = {}
    for k, v in keep.items():
        specs[k] = TensorSpec(dtype=SPEC[v.dtype][0], shape=list(v.shape),
                              data_ptr=v.ctypes.data, data_len=v.nbytes)
    serialize_file(specs, path, metadata=metadata)
    return {k: {"dtype": SPEC[v.dtype][1], "shape": list(v.shape), "hex": v.tobytes().hex()}
            for k, v in keep.items()}


def write_seeds():
    reset(SEEDS)
    rng = np.random.default_rng(20260512)
    expected = {"writer": f"safetensors {safetensors.__version__}", "seeds": {}}
    exp = expected["seeds"]

    tensors = seed_tensors(rng)
    meta = {"format": "pt", "producer": "deepinfer gen_malformed_safetensors.py"}
    t = write_st(os.path.join(SEEDS, "all_dtypes.safetensors"), tensors, meta)
    exp["all_dtypes.safetensors"] = {"kind": "file", "metadata": meta,
                                     "tensors": {k: dict(v, shard=0) for k, v in t.items()}}

    t = write_st(os.path.join(SEEDS, "no_metadata.safetensors"),
                 {"x": np.arange(6, dtype=np.float32).reshape(2, 3)})
    exp["no_metadata.safetensors"] = {"kind": "file", "metadata": {},
                                      "tensors": {k: dict(v, shard=0) for k, v in t.items()}}

    os.makedirs(os.path.join(SEEDS, "single_dir"))
    t = write_st(os.path.join(SEEDS, "single_dir", "model.safetensors"),
                 {"lm_head.weight": rng.standard_normal((3, 4)).astype(ml_dtypes.bfloat16),
                  "model.norm.weight": np.ones(4, dtype=np.float32)}, {"format": "pt"})
    exp["single_dir"] = {"kind": "dir", "metadata": {"format": "pt"},
                         "tensors": {k: dict(v, shard=0) for k, v in t.items()}}

    # A three-shard checkpoint with its index, as HF save_pretrained lays out.
    sharded = os.path.join(SEEDS, "sharded")
    os.makedirs(sharded)
    names = sorted(tensors)
    parts = [names[0:5], names[5:9], names[9:]]
    weight_map, all_t = {}, {}
    for i, part in enumerate(parts):
        fname = f"model-{i + 1:05d}-of-{len(parts):05d}.safetensors"
        t = write_st(os.path.join(sharded, fname), {k: tensors[k] for k in part}, {"format": "pt"})
        for k, v in t.items():
            weight_map[k] = fname
            all_t[k] = dict(v, shard=i)  # shards sort by file name: index i
    total = sum(np.ascontiguousarray(tensors[k]).nbytes for k in names)
    with open(os.path.join(sharded, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": int(total)}, "weight_map": weight_map}, f, indent=2,
                  sort_keys=True)
    exp["sharded"] = {"kind": "dir", "shards": len(parts), "tensors": all_t}

    # Keys listed out of data order are valid (the reference sorts by offset).
    body = b"\x01\x02\x03\x04\x05\x06\x07\x08"
    hdr = {"b": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]},
           "a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}
    raw_file(os.path.join(SEEDS, "keys_out_of_data_order.safetensors"), hdr, body)
    exp["keys_out_of_data_order.safetensors"] = {
        "kind": "file", "metadata": {},
        "tensors": {"a": {"dtype": "U8", "shape": [4], "hex": body[:4].hex(), "shard": 0},
                    "b": {"dtype": "U8", "shape": [4], "hex": body[4:].hex(), "shard": 0}}}

    os.makedirs(EXPECTED, exist_ok=True)
    with open(os.path.join(EXPECTED, "safetensors_seeds.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)


# ---- malformed safetensors -------------------------------------------------

def raw_file(path, header, body=b"", hlen=None, pad=True):
    """header: dict (dumped compactly) or bytes (used as is)."""
    h = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    if pad and not isinstance(header, bytes):
        h += b" " * (-len(h) % 8)
    n = len(h) if hlen is None else hlen
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", n) + h + body)


def t(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def write_malformed():
    reset(BAD)
    cases = []  # (name, expected substring of the message)

    def bad(name, expect, header, body=b"", **kw):
        raw_file(os.path.join(BAD, name + ".safetensors"), header, body, **kw)
        cases.append((name + ".safetensors", expect))

    ok1 = {"w": t("F32", [2], 0, 8)}
    body8 = bytes(range(8))
    with open(os.path.join(BAD, "too_short.safetensors"), "wb") as f:
        f.write(b"\x10\x00\x00")
    cases.append(("too_short.safetensors", "too short"))
    with open(os.path.join(BAD, "empty.safetensors"), "wb") as f:
        pass
    cases.append(("empty.safetensors", "too short"))
    bad("header_len_past_eof", "past the end of the file", ok1, body8, hlen=4096)
    bad("header_len_absurd", "exceeds the limit", ok1, body8, hlen=1 << 62)
    bad("header_len_u64_max", "exceeds the limit", ok1, body8, hlen=(1 << 64) - 1)
    bad("header_len_zero", "header length is 0", b"", body8)
    bad("header_not_json", "not valid JSON", b'{"w": {"dtype": "F32",', body8)
    bad("header_not_object", "does not start with '{'", b"[1, 2, 3]", body8)
    bad("header_trailing_garbage", "not valid JSON", b'{"w":{"dtype":"F32","shape":[2],'
        b'"data_offsets":[0,8]}} xyz', body8)
    bad("header_nul_padding", "not valid JSON", b'{"w":{"dtype":"F32","shape":[2],'
        b'"data_offsets":[0,8]}}\x00\x00\x00', body8)
    bad("header_duplicate_keys", "not valid JSON", b'{"w":{"dtype":"F32","shape":[2],'
        b'"data_offsets":[0,8]},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', body8)
    bad("header_deep_nesting", "not valid JSON", b"{\"a\":" + b"[" * 4096 + b"]" * 4096 + b"}")
    bad("entry_not_object", "expected an object, got integer", {"w": 5}, body8)
    bad("missing_dtype", "missing field 'dtype'", {"w": {"shape": [2], "data_offsets": [0, 8]}},
        body8)
    bad("missing_shape", "missing field 'shape'", {"w": {"dtype": "F32", "data_offsets": [0, 8]}},
        body8)
    bad("missing_offsets", "missing field 'data_offsets'", {"w": {"dtype": "F32", "shape": [2]}},
        body8)
    bad("extra_field", "unexpected field 'layout'", {"w": dict(t("F32", [2], 0, 8), layout="C")},
        body8)
    bad("dtype_not_string", "dtype: expected a string", {"w": t(7, [2], 0, 8)}, body8)
    bad("unknown_dtype", "unknown or unsupported dtype 'F7'", {"w": t("F7", [2], 0, 8)}, body8)
    bad("dtype_lowercase", "unknown or unsupported dtype 'f32'", {"w": t("f32", [2], 0, 8)}, body8)
    bad("shape_not_array", "shape: expected an array", {"w": t("F32", 2, 0, 8)}, body8)
    bad("shape_negative", "negative dimension -2", {"w": t("F32", [-2], 0, 8)}, body8)
    bad("shape_float_dim", "shape[0]: expected an integer, got real", {"w": t("F32", [2.0], 0, 8)},
        body8)
    bad("shape_too_many_dims", "dimensions, at most", {"w": t("U8", [1] * 9, 0, 1)}, body8[:1])
    bad("shape_elem_overflow", "element count overflows",
        {"w": t("U8", [1 << 40, 1 << 40], 0, 8)}, body8)
    bad("shape_byte_overflow", "byte size", {"w": t("F64", [1 << 62], 0, 8)}, body8)
    bad("offsets_not_pair", "expected [begin, end]", {"w": {"dtype": "F32", "shape": [2],
                                                            "data_offsets": [0]}}, body8)
    bad("offsets_not_array", "expected [begin, end]", {"w": {"dtype": "F32", "shape": [2],
                                                             "data_offsets": "0-8"}}, body8)
    bad("offsets_negative", "negative offset", {"w": t("F32", [2], -8, 0)}, body8)
    bad("offsets_float", "expected an integer, got real", {"w": t("F32", [2], 0, 8.0)}, body8)
    bad("offsets_begin_after_end", "is after end", {"w": t("U8", [0], 8, 0)}, body8)
    bad("offsets_past_end", "past the data section", {"w": t("F32", [4], 0, 16)}, body8)
    bad("span_mismatch", "does not match shape x dtype", {"w": t("F32", [3], 0, 8)}, body8)
    bad("offsets_gap", "belong to no tensor", {"a": t("U8", [2], 0, 2), "b": t("U8", [4], 4, 8)},
        body8)
    bad("offsets_start_gap", "belong to no tensor", {"a": t("U8", [6], 2, 8)}, body8)
    bad("offsets_overlap", "overlaps", {"a": t("U8", [6], 0, 6), "b": t("U8", [4], 4, 8)}, body8)
    bad("offsets_same_span", "overlaps", {"a": t("U8", [8], 0, 8), "b": t("U8", [8], 0, 8)}, body8)
    bad("trailing_bytes", "trailing bytes", ok1, body8 + b"\xff\xff")
    bad("name_empty", "empty name", {"": t("F32", [2], 0, 8)}, body8)
    bad("name_invalid_utf8", "not valid JSON",
        b'{"w\xff\xfe":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', body8)
    bad("name_overlong_utf8", "not valid JSON",
        b'{"\xc0\xaf":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', body8)
    bad("name_lone_surrogate", "not valid JSON",
        b'{"\\ud800":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', body8)
    bad("name_escaped_nul", "not valid JSON",
        b'{"a\\u0000b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', body8)
    bad("metadata_not_object", "__metadata__: expected an object",
        dict(ok1, __metadata__=["pt"]), body8)
    bad("metadata_value_not_string", "__metadata__.step: expected a string",
        dict(ok1, __metadata__={"format": "pt", "step": 3}), body8)
    bad("offset_huge", "past the data section", {"w": t("U8", [8], (1 << 63) - 9, (1 << 63) - 1)},
        body8)
    return cases


def write_bad_dirs(cases):
    """Checkpoint folders whose index and shards disagree."""
    body8 = bytes(range(8))

    def mkdir(name):
        d = os.path.join(BAD, name)
        os.makedirs(d)
        return d

    def index(d, weight_map, raw=None):
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            f.write(raw if raw is not None else json.dumps({"metadata": {}, "weight_map": weight_map}))

    d = mkdir("shard_missing_file")
    raw_file(os.path.join(d, "model-00001-of-00002.safetensors"), {"a": t("U8", [8], 0, 8)}, body8)
    index(d, {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"})
    cases.append(("shard_missing_file", "does not exist"))

    d = mkdir("shard_tensor_missing")
    raw_file(os.path.join(d, "model-00001-of-00001.safetensors"), {"a": t("U8", [8], 0, 8)}, body8)
    index(d, {"a": "model-00001-of-00001.safetensors", "b": "model-00001-of-00001.safetensors"})
    cases.append(("shard_tensor_missing", "does not hold it"))

    d = mkdir("shard_duplicate_tensor")
    raw_file(os.path.join(d, "model-00001-of-00002.safetensors"), {"a": t("U8", [8], 0, 8)}, body8)
    raw_file(os.path.join(d, "model-00002-of-00002.safetensors"),
             {"a": t("U8", [4], 0, 4), "b": t("U8", [4], 4, 8)}, body8)
    index(d, {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"})
    cases.append(("shard_duplicate_tensor", "is in both"))

    d = mkdir("shard_wrong_shard")
    raw_file(os.path.join(d, "model-00001-of-00002.safetensors"), {"a": t("U8", [8], 0, 8)}, body8)
    raw_file(os.path.join(d, "model-00002-of-00002.safetensors"), {"b": t("U8", [8], 0, 8)}, body8)
    index(d, {"a": "model-00002-of-00002.safetensors", "b": "model-00001-of-00002.safetensors"})
    cases.append(("shard_wrong_shard", "but it is in"))

    d = mkdir("shard_unlisted_tensor")
    raw_file(os.path.join(d, "model-00001-of-00001.safetensors"),
             {"a": t("U8", [4], 0, 4), "extra": t("U8", [4], 4, 8)}, body8)
    index(d, {"a": "model-00001-of-00001.safetensors"})
    cases.append(("shard_unlisted_tensor", "does not list"))

    d = mkdir("shard_index_not_json")
    raw_file(os.path.join(d, "model-00001-of-00001.safetensors"), {"a": t("U8", [8], 0, 8)}, body8)
    index(d, None, raw='{"weight_map": {"a": "model-00001-of-00001.safetensors"')
    cases.append(("shard_index_not_json", "not valid JSON"))

    d = mkdir("shard_index_no_weight_map")
    raw_file(os.path.join(d, "model-00001-of-00001.safetensors"), {"a": t("U8", [8], 0, 8)}, body8)
    index(d, None, raw='{"metadata": {"total_size": 8}}')
    cases.append(("shard_index_no_weight_map", "missing 'weight_map'"))

    d = mkdir("shard_index_path_traversal")
    raw_file(os.path.join(d, "model-00001-of-00001.safetensors"), {"a": t("U8", [8], 0, 8)}, body8)
    index(d, {"a": "../shard_missing_file/model-00001-of-00002.safetensors"})
    cases.append(("shard_index_path_traversal", "not a plain shard file name"))

    d = mkdir("shard_index_value_not_string")
    index(d, None, raw='{"weight_map": {"a": 1}}')
    cases.append(("shard_index_value_not_string", "weight_map.a: expected a string"))

    d = mkdir("shard_malformed_shard")
    raw_file(os.path.join(d, "model-00001-of-00001.safetensors"), {"a": t("U8", [9], 0, 9)}, body8)
    index(d, {"a": "model-00001-of-00001.safetensors"})
    cases.append(("shard_malformed_shard", "model-00001-of-00001.safetensors: tensor 'a'"))

    d = mkdir("dir_without_model")
    with open(os.path.join(d, "README"), "w") as f:
        f.write("a checkpoint folder with neither an index nor model.safetensors\n")
    cases.append(("dir_without_model", "no model.safetensors.index.json"))

    d = mkdir("single_dir_malformed")
    raw_file(os.path.join(d, "model.safetensors"), {"a": t("U8", [8], 0, 8)}, body8 + b"\x00")
    cases.append(("single_dir_malformed", "trailing bytes"))


# ---- configs -----------------------------------------------------------------

def v4_text(n_layers=4):
    """A tiny DeepSeek-V4-Flash-shaped text config (MODELS.md: toy widths,
    every layer kind: window-only, CSA ratio 4, HCA ratio 128)."""
    return {
        "vocab_size": 256, "hidden_size": 64, "moe_intermediate_size": 32,
        "num_hidden_layers": n_layers, "num_attention_heads": 4, "num_key_value_heads": 1,
        "head_dim": 64, "qk_rope_head_dim": 16, "q_lora_rank": 32,
        "o_groups": 2, "o_lora_rank": 32,
        "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
        "scoring_func": "sqrtsoftplus", "norm_topk_prob": True, "routed_scaling_factor": 1.5,
        "num_hash_layers": 1, "swiglu_limit": 10.0,
        "compress_ratios": [0, 4, 128, 4][:n_layers], "compress_rope_theta": 160000.0,
        "rope_theta": 10000.0,
        "rope_scaling": {"type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536,
                         "beta_fast": 32, "beta_slow": 1},
        "sliding_window": 8, "index_n_heads": 2, "index_head_dim": 32, "index_topk": 4,
        "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6,
        "num_nextn_predict_layers": 1, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": False,
        "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": None,
        "attention_bias": False, "torch_dtype": "bfloat16",
    }


def write_configs():
    reset(CFG_SEEDS)
    reset(BAD_CFG)
    v4 = dict(v4_text(), architectures=["DeepseekV4ForCausalLM"], model_type="deepseek_v4",
              quantization_config={"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
                                   "weight_block_size": [128, 128],
                                   "activation_scheme": "dynamic"})
    v41 = {
        "architectures": ["DeepseekV41ForConditionalGeneration"], "model_type": "deepseek_v41",
        "text_config": dict(v4_text(), model_type="deepseek_v41_text", eos_token_id=[1, 2]),
        "vision_config": {"hidden_size": 32, "num_hidden_layers": 1},
        "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
                                "weight_block_size": [32, 32]},
    }
    with open(os.path.join(CFG_SEEDS, "deepseek_v4_tiny.json"), "w") as f:
        json.dump(v4, f, indent=2)
    with open(os.path.join(CFG_SEEDS, "deepseek_v41_tiny.json"), "w") as f:
        json.dump(v41, f, indent=2)

    cases = []

    def bad(name, expect, content):
        data = content if isinstance(content, bytes) else json.dumps(content, indent=1).encode()
        with open(os.path.join(BAD_CFG, name + ".json"), "wb") as f:
            f.write(data)
        cases.append((name + ".json", expect))

    def v41_with(**text_changes):
        c = json.loads(json.dumps(v41))
        for k, v in text_changes.items():
            if v is KeyError:
                del c["text_config"][k]
            else:
                c["text_config"][k] = v
        return c

    def v4_with(**changes):
        c = json.loads(json.dumps(v4))
        for k, v in changes.items():
            if v is KeyError:
                del c[k]
            else:
                c[k] = v
        return c

    bad("not_json", "not valid JSON", b'{"hidden_size": 64,')
    bad("empty", "not valid JSON", b"")
    bad("not_object", "expected a JSON object", b"[1, 2]")
    bad("duplicate_key", "not valid JSON", b'{"hidden_size": 64, "hidden_size": 128}')
    bad("invalid_utf8", "not valid JSON", b'{"model_type": "deepseek_v4\xff"}')
    bad("integer_too_big", "not valid JSON", b'{"hidden_size": 100000000000000000000000}')
    bad("real_overflow", "not valid JSON", b'{"rms_norm_eps": 1e400}')
    bad("nan_literal", "not valid JSON", b'{"rms_norm_eps": NaN}')
    bad("layers_negative", "text_config.num_hidden_layers: expected integer in [1, 1024], got -3",
        v41_with(num_hidden_layers=-3))
    bad("hidden_size_string", "hidden_size: expected integer in [1, 65536], got string \"64\"",
        v4_with(hidden_size="64"))
    bad("hidden_size_real", "hidden_size: expected integer in [1, 65536], got real 64",
        v4_with(hidden_size=64.0))
    bad("hidden_size_missing", "text_config.hidden_size: missing", v41_with(hidden_size=KeyError))
    bad("hidden_size_null", "hidden_size: expected integer in [1, 65536], got null",
        v4_with(hidden_size=None))
    bad("text_config_not_object", "text_config: expected object, got array",
        dict(v41, text_config=[1]))
    bad("rms_eps_negative", "rms_norm_eps: expected finite number", v4_with(rms_norm_eps=-1e-6))
    bad("compress_ratios_string", "compress_ratios[1]: expected integer in [0, 1024], got string",
        v4_with(compress_ratios=[0, "4", 128, 4]))
    bad("compress_ratios_too_long", "compress_ratios: expected at most 4 elements",
        v4_with(compress_ratios=[0, 4, 128, 4, 4]))
    bad("rope_scaling_not_object", "rope_scaling: expected object, got array",
        v4_with(rope_scaling=[16.0]))
    bad("rope_scaling_factor_missing", "rope_scaling.factor: missing",
        v4_with(rope_scaling={"type": "yarn"}))
    bad("rope_scaling_factor_bool", "rope_scaling.factor: expected finite number",
        v4_with(rope_scaling={"type": "yarn", "factor": True}))
    bad("scoring_func_unknown", "scoring_func: expected one of", v4_with(scoring_func="relu"))
    bad("norm_topk_prob_int", "norm_topk_prob: expected true or false, got 1",
        v4_with(norm_topk_prob=1))
    bad("experts_per_tok_zero", "num_experts_per_tok: expected integer in [1, 65536], got 0",
        v4_with(num_experts_per_tok=0))
    bad("eos_token_real", "eos_token_id", v41_with(eos_token_id=[1, 2.5]))
    return cases


def write_tsv(name, cases):
    with open(os.path.join(EXPECTED, name), "w") as f:
        f.write("# case\tsubstring the error message must contain (written by "
                "scripts/gen_malformed_safetensors.py)\n")
        for case, expect in cases:
            f.write(f"{case}\t{expect}\n")


def main():
    write_seeds()
    cases = write_malformed()
    write_bad_dirs(cases)
    write_tsv("malformed_safetensors.tsv", cases)
    write_tsv("malformed_config.tsv", write_configs())
    print(f"safetensors {safetensors.__version__}: {len(cases)} malformed safetensors cases, "
          f"seeds in {os.path.relpath(SEEDS, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
