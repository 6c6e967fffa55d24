#!/usr/bin/env python3
"""Writes the GGUF test corpus: valid seeds and malformed files.

  tests/data/seeds/gguf/      small valid files (tiny llama v3/v2, custom
                              alignment, zero tensors with every kv type, a
                              quantized tensor)
  tests/data/malformed/gguf/  files the reader must reject, and llama_*.gguf
                              files the reader accepts but llama validation
                              (hyper-parameters or tensors) must reject

Stdlib only and deterministic: running it twice gives identical bytes. The
GGUF encoder here is written from the format description (magic, version,
counts, kvs, tensor infos, aligned data), not taken from another project.
Usage: python3 scripts/gen_malformed_gguf.py [repo_root]
"""
import os
import struct
import sys

# GGUF value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i",
              F32: "<f", BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}
# ggml tensor types used here
GGML_F32, GGML_Q4_0, GGML_Q8_0 = 0, 2, 8


def s(b):
    """Length-prefixed GGUF string."""
    if isinstance(b, str):
        b = b.encode()
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    if t == STR:
        return s(v)
    if t == ARR:
        et, items = v
        out = struct.pack("<IQ", et, len(items))
        for it in items:
            out += value(et, it)
        return out
    return struct.pack(SCALAR_FMT[t], v)


def kv(key, t, v):
    """One encoded kv entry."""
    return s(key) + struct.pack("<I", t) + value(t, v)


class Tensor:
    def __init__(self, name, dims, data, ggml_type=GGML_F32, offset=None):
        self.name, self.dims, self.data = name, dims, data
        self.ggml_type, self.offset = ggml_type, offset

    def info(self, offset):
        out = s(self.name) + struct.pack("<I", len(self.dims))
        for d in self.dims:
            out += struct.pack("<q", d)
        return out + struct.pack("<IQ", self.ggml_type, offset)


def f32_data(n, seed):
    """n deterministic float32 values: seed + i/1024 (exact in float32)."""
    return struct.pack("<%df" % n, *[seed + i / 1024.0 for i in range(n)])


def build(kvs, tensors, version=3, alignment=32, magic=b"GGUF", n_kv=None, n_tensors=None,
          marks=None, data_size=None):
    """Encodes a whole file. kvs: list of encoded kv bytes. tensors: Tensor
    list; offsets are assigned aligned unless given. marks (a dict) receives
    section start offsets for the truncation cases. data_size defaults to the
    furthest tensor end (ignoring absurd hand-written offsets)."""
    head = magic + struct.pack("<I", version)
    head += struct.pack("<QQ", len(tensors) if n_tensors is None else n_tensors,
                        len(kvs) if n_kv is None else n_kv)
    body = head
    m = {"counts": 8, "kv": len(head)}
    for i, e in enumerate(kvs):
        m["kv%d" % i] = len(body)
        body += e
    m["tinfo"] = len(body)
    off = 0
    placed = []
    for t in tensors:
        o = t.offset if t.offset is not None else off
        placed.append(o)
        off = o + len(t.data)
        off = (off + alignment - 1) // alignment * alignment
    for i, (t, o) in enumerate(zip(tensors, placed)):
        m["t%d" % i] = len(body)
        body += t.info(o)
    m["pad"] = len(body)
    if tensors:
        body += b"\0" * ((-len(body)) % alignment)
        data_start = len(body)
        m["data"] = data_start
        if data_size is None:
            ends = [o + len(t.data) for t, o in zip(tensors, placed)]
            data_size = max([e for e in ends if 0 <= e < 2**32] or [0])
        data = bytearray(data_size)
        for t, o in zip(tensors, placed):
            if 0 <= o and o + len(t.data) <= len(data):
                data[o:o + len(t.data)] = t.data
        body += bytes(data)
    if marks is not None:
        marks.update(m)
    return body


# ---- the tiny llama ------------------------------------------------------

HP = dict(n_layers=2, n_embd=4, n_heads=2, n_heads_kv=1, n_ff=8, n_vocab=8, n_ctx=64)
TOKENS = ["<unk>", "<s>", "</s>", "a", "b", "c", "d", "e"]


def llama_kvs(over=None, drop=()):
    """The tiny llama's kvs as (key, type, value); over replaces entries by
    key (or adds them), drop removes keys."""
    base = [
        ("general.architecture", STR, "llama"),
        ("general.name", STR, "tiny-llama"),
        ("llama.block_count", U32, HP["n_layers"]),
        ("llama.context_length", U32, HP["n_ctx"]),
        ("llama.embedding_length", U32, HP["n_embd"]),
        ("llama.feed_forward_length", U32, HP["n_ff"]),
        ("llama.attention.head_count", U32, HP["n_heads"]),
        ("llama.attention.head_count_kv", U32, HP["n_heads_kv"]),
        ("llama.rope.freq_base", F32, 10000.0),
        ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
        ("llama.rope.dimension_count", U32, HP["n_embd"] // HP["n_heads"]),
        ("tokenizer.ggml.model", STR, "llama"),
        ("tokenizer.ggml.tokens", ARR, (STR, TOKENS)),
        ("tokenizer.ggml.scores", ARR, (F32, [float(-i) for i in range(len(TOKENS))])),
        ("tokenizer.ggml.token_type", ARR, (I32, [2, 3, 3] + [1] * (len(TOKENS) - 3))),
        ("tokenizer.ggml.bos_token_id", U32, 1),
        ("tokenizer.ggml.eos_token_id", U32, 2),
        ("tokenizer.ggml.unknown_token_id", U32, 0),
    ]
    over = dict((k, (t, v)) for k, t, v in (over or []))
    out = []
    for k, t, v in base:
        if k in drop:
            continue
        if k in over:
            t, v = over.pop(k)
        out.append((k, t, v))
    out += [(k, t, v) for k, (t, v) in over.items()]
    return out


def llama_tensors(shape_over=None, drop=(), extra=()):
    """Tensors of the tiny llama (F32). shape_over: name -> dims."""
    e, ff, v = HP["n_embd"], HP["n_ff"], HP["n_vocab"]
    hd = e // HP["n_heads"]
    q, kvd = HP["n_heads"] * hd, HP["n_heads_kv"] * hd
    spec = [("token_embd.weight", [e, v]), ("output_norm.weight", [e])]
    for i in range(HP["n_layers"]):
        b = "blk.%d." % i
        spec += [(b + "attn_norm.weight", [e]), (b + "attn_q.weight", [e, q]),
                 (b + "attn_k.weight", [e, kvd]), (b + "attn_v.weight", [e, kvd]),
                 (b + "attn_output.weight", [q, e]), (b + "ffn_norm.weight", [e]),
                 (b + "ffn_gate.weight", [e, ff]), (b + "ffn_up.weight", [e, ff]),
                 (b + "ffn_down.weight", [ff, e])]
    spec += list(extra)
    shape_over = shape_over or {}
    out = []
    for k, (name, dims) in enumerate(spec):
        if name in drop:
            continue
        dims = shape_over.get(name, dims)
        n = 1
        for d in dims:
            n *= d
        out.append(Tensor(name, dims, f32_data(n, float(k + 1))))
    return out


def enc(kvs):
    return [kv(k, t, v) for k, t, v in kvs]


def tiny_llama(version=3, alignment=32, kv_over=None, kv_drop=(), shape_over=None,
               t_drop=(), t_extra=(), marks=None):
    kvs = llama_kvs(kv_over, kv_drop)
    if alignment != 32:
        kvs.append(("general.alignment", U32, alignment))
    return build(enc(kvs), llama_tensors(shape_over, t_drop, t_extra), version=version,
                 alignment=alignment, marks=marks)


# ---- valid seeds -----------------------------------------------------------

def seeds():
    out = {}
    out["tiny_llama.gguf"] = tiny_llama()
    out["tiny_llama_v2.gguf"] = tiny_llama(version=2)
    out["tiny_llama_align64.gguf"] = tiny_llama(alignment=64)
    # Optional keys left out (defaults apply), padded vocab, yarn scaling,
    # separate output matrix and rope_freqs.
    out["tiny_llama_untied_yarn.gguf"] = tiny_llama(
        kv_drop=("llama.attention.head_count_kv", "llama.rope.dimension_count",
                 "llama.rope.freq_base"),
        kv_over=[("llama.vocab_size", U32, 10), ("llama.rope.scaling.type", STR, "yarn"),
                 ("llama.rope.scaling.factor", F32, 4.0),
                 ("llama.rope.scaling.original_context_length", U32, 16),
                 ("tokenizer.ggml.seperator_token_id", U32, 3)],
        shape_over={"token_embd.weight": [4, 10], "blk.0.attn_k.weight": [4, 4],
                    "blk.0.attn_v.weight": [4, 4], "blk.1.attn_k.weight": [4, 4],
                    "blk.1.attn_v.weight": [4, 4]},
        t_extra=[("output.weight", [4, 10]), ("rope_freqs.weight", [1])])
    every = [
        kv("t.u8", U8, 200), kv("t.i8", I8, -100), kv("t.u16", U16, 60000),
        kv("t.i16", I16, -30000), kv("t.u32", U32, 4000000000), kv("t.i32", I32, -2000000000),
        kv("t.f32", F32, 0.5), kv("t.bool", BOOL, 1), kv("t.str", STR, "h\u00e9llo"),
        kv("t.u64", U64, 2**63 + 5), kv("t.i64", I64, -2**62), kv("t.f64", F64, -2.25),
        kv("t.empty_str", STR, ""),
        kv("t.arr_i16", ARR, (I16, [-1, 2, -3])), kv("t.arr_str", ARR, (STR, ["x", "", "yz"])),
        kv("t.arr_f64", ARR, (F64, [1.5, -0.25])), kv("t.arr_bool", ARR, (BOOL, [0, 1])),
        kv("t.arr_empty", ARR, (U8, [])),
        kv("general.architecture", STR, "none"),
    ]
    out["zero_tensors_all_types.gguf"] = build(every, [])
    # A quantized tensor: Q8_0 rows of 64 = 2 blocks of 34 bytes, 3 rows.
    q = Tensor("q", [64, 3], bytes(range(34 * 6)), GGML_Q8_0)
    f = Tensor("f", [3], f32_data(3, 7.0))
    out["quant_tensor.gguf"] = build([kv("general.architecture", STR, "none")], [q, f])
    # the Gemma 3 variant with a window of 4 keys, every 2nd layer global
    out["tiny_gemma3.gguf"] = tiny_gemma3(kv_over=[("gemma3.attention.sliding_window", U32, 4),
                                                   ("gemma3.attention.sliding_window_pattern", U32, 2)])
    # the other variants (valid), so the fuzzer starts from each one's tensors
    for fam in ("qwen2", "qwen3moe", "mixtral", "phi3"):
        out["tiny_%s.gguf" % fam] = tiny_family(fam)
    return out


# ---- malformed files -------------------------------------------------------

def u64(v):
    return struct.pack("<Q", v)


def malformed():
    out = {}
    good = tiny_llama()
    marks = {}
    tiny_llama(marks=marks)

    # Header, magic, version, counts.
    out["empty.gguf"] = b""
    out["trunc_magic.gguf"] = b"GG"
    out["bad_magic.gguf"] = b"GGML" + good[4:]
    out["version1.gguf"] = good[:4] + struct.pack("<I", 1) + good[8:]
    out["version0.gguf"] = good[:4] + struct.pack("<I", 0) + good[8:]
    out["version4.gguf"] = good[:4] + struct.pack("<I", 4) + good[8:]
    out["big_endian.gguf"] = good[:4] + struct.pack(">I", 3) + good[8:]
    out["trunc_version.gguf"] = good[:6]
    out["trunc_counts.gguf"] = good[:8 + 12]
    out["kv_count_huge.gguf"] = build(enc(llama_kvs()), llama_tensors(), n_kv=2**63)
    out["kv_count_too_many.gguf"] = build(enc(llama_kvs()), llama_tensors(),
                                          n_kv=len(llama_kvs()) + 1)
    out["tensor_count_huge.gguf"] = build(enc(llama_kvs()), llama_tensors(), n_tensors=2**62)
    out["tensor_count_overflow_sum.gguf"] = build([], [], n_kv=2**64 // 14 + 1)

    # Truncation inside every section of the tiny llama.
    # The kv cases put the cut kv last behind a long padding kv: earlier cuts
    # would already fail the count-versus-bytes check in the header.
    pad = kv("padding", STR, "p" * 64)

    def cut_last(target, cut):
        """File with kvs [pad, target], cut `cut` bytes into target."""
        f = build([pad, target], [])
        return f[:len(f) - len(target) + cut]
    name_kv = kv("general.name", STR, "tiny-llama")
    tokens_kv = kv("tokenizer.ggml.tokens", ARR, (STR, TOKENS))
    scores_kv = kv("tokenizer.ggml.scores", ARR, (F32, [0.5] * 8))
    out["trunc_kv_key_len.gguf"] = cut_last(name_kv, 3)
    out["trunc_kv_key.gguf"] = cut_last(name_kv, 8 + 4)
    out["trunc_kv_type.gguf"] = cut_last(name_kv, 8 + len("general.name") + 2)
    out["trunc_kv_scalar.gguf"] = cut_last(kv("llama.block_count", U32, 2),
                                           8 + len("llama.block_count") + 4 + 2)
    out["trunc_kv_string_len.gguf"] = cut_last(name_kv, 8 + len("general.name") + 4 + 5)
    out["trunc_kv_string.gguf"] = cut_last(name_kv, 8 + len("general.name") + 4 + 8 + 3)
    tok = 8 + len("tokenizer.ggml.tokens") + 4
    out["trunc_array_header.gguf"] = cut_last(tokens_kv, tok + 6)
    # Few, long strings so the cut passes the 8-bytes-per-string bound first.
    long_kv = kv("tokenizer.ggml.tokens", ARR, (STR, ["a" * 20, "b"]))
    out["trunc_array_strings.gguf"] = cut_last(long_kv, tok + 12 + 8 + 10)
    out["trunc_array_string_len.gguf"] = cut_last(long_kv, tok + 12 + 8 + 20 + 4)
    sc = 8 + len("tokenizer.ggml.scores") + 4
    out["trunc_array_numeric.gguf"] = cut_last(scores_kv, sc + 12 + 10)
    out["trunc_tensor_name.gguf"] = good[:marks["t0"] + 10]
    out["trunc_tensor_dims.gguf"] = good[:marks["t0"] + 8 + len("token_embd.weight") + 4 + 9]
    out["trunc_tensor_type.gguf"] = good[:marks["t0"] + 8 + len("token_embd.weight") + 4 + 16 + 2]
    out["trunc_tensor_offset.gguf"] = good[:marks["t1"] - 3]
    out["trunc_before_data.gguf"] = good[:marks["pad"]]
    out["trunc_data.gguf"] = good[:len(good) - 7]

    # Lengths larger than the file.
    out["key_len_huge.gguf"] = build([u64(2**64 - 1) + b"abc"], [])
    out["key_too_long.gguf"] = build([kv("k" * 5000, U8, 1)], [])
    out["string_len_huge.gguf"] = build([s("a") + struct.pack("<I", STR) + u64(2**63) + b"xy"], [])
    out["array_len_huge_numeric.gguf"] = build(
        [s("a") + struct.pack("<IIQ", ARR, U32, 2**62) + b"\0" * 16], [])
    out["array_len_overflow_bytes.gguf"] = build(
        [s("a") + struct.pack("<IIQ", ARR, U64, 2**61 + 1) + b"\0" * 16], [])
    out["array_len_huge_strings.gguf"] = build(
        [s("a") + struct.pack("<IIQ", ARR, STR, 2**40) + s("x")], [])
    out["array_string_len_huge.gguf"] = build(
        [s("a") + struct.pack("<IIQ", ARR, STR, 2) + s("x") + u64(2**50) + b"y"], [])

    # Types.
    out["nested_array.gguf"] = build(
        [s("a") + struct.pack("<IIQ", ARR, ARR, 1) + struct.pack("<IQ", U8, 1) + b"\1"], [])
    out["array_bad_elem_type.gguf"] = build(
        [s("a") + struct.pack("<IIQ", ARR, 13, 1) + b"\0" * 8], [])
    out["bad_value_type.gguf"] = build([s("a") + struct.pack("<I", 99) + b"\0" * 8], [])
    out["bool_value_2.gguf"] = build([s("a") + struct.pack("<IB", BOOL, 2)], [])
    out["bool_array_value_7.gguf"] = build([s("a") + struct.pack("<IIQ", ARR, BOOL, 2) + b"\0\7"],
                                           [])

    # Keys.
    out["empty_key.gguf"] = build([kv("", U32, 1)], [])
    out["duplicate_key.gguf"] = build([kv("a.b", U32, 1), kv("c", U8, 1), kv("a.b", U32, 2)], [])
    out["key_invalid_utf8.gguf"] = build([kv(b"bad\xff\xfekey", U32, 1)], [])
    out["key_overlong_utf8.gguf"] = build([kv(b"k\xc0\xafx", U32, 1)], [])
    out["key_surrogate_utf8.gguf"] = build([kv(b"k\xed\xa0\x80", U32, 1)], [])
    out["key_embedded_nul.gguf"] = build([kv(b"a\0b", U32, 1)], [])

    # Alignment.
    def with_align(t, v):
        kvs = enc(llama_kvs()) + [kv("general.alignment", t, v)]
        return build(kvs, llama_tensors(), alignment=32)
    out["alignment_zero.gguf"] = with_align(U32, 0)
    out["alignment_not_pow2.gguf"] = with_align(U32, 48)
    out["alignment_type_u64.gguf"] = with_align(U64, 32)
    out["alignment_type_string.gguf"] = with_align(STR, "32")

    # Tensor infos.
    one = [kv("general.architecture", STR, "none")]

    def single(name=b"t", dims=(4,), gtype=GGML_F32, offset=0, data=b"\0" * 16, data_size=None):
        """One tensor with a hand-written info, then aligned data."""
        t = Tensor(name, list(dims), data, gtype, offset)
        return build(one, [t], data_size=data_size)

    out["tensor_empty_name.gguf"] = single(name=b"")
    out["tensor_name_invalid_utf8.gguf"] = single(name=b"w\x80eight")
    out["tensor_name_truncated_utf8.gguf"] = single(name=b"w\xe2\x82")
    out["tensor_duplicate_name.gguf"] = build(one, [Tensor("t", [4], b"\0" * 16),
                                                    Tensor("t", [4], b"\0" * 16)])
    out["tensor_ndims_5.gguf"] = single(dims=(1, 1, 1, 1, 4))
    out["tensor_ndims_0.gguf"] = single(dims=())
    out["tensor_ndims_huge.gguf"] = (build(one, [], n_tensors=1) + s("t") +
                                      struct.pack("<I", 2**31) + b"\0" * 64)
    out["tensor_dim_negative.gguf"] = single(dims=(4, -1))
    out["tensor_dim_zero.gguf"] = single(dims=(0,))
    out["tensor_dims_count_overflow.gguf"] = single(dims=(2**40, 2**40))
    out["tensor_bytes_overflow.gguf"] = single(dims=(2**31, 2**31))
    out["tensor_huge_dims_past_end.gguf"] = single(dims=(2**20, 2**20))
    out["tensor_unknown_type.gguf"] = single(gtype=200)
    out["tensor_unsupported_type_iq2.gguf"] = single(gtype=16, dims=(256,))
    out["tensor_quant_row_not_block.gguf"] = single(gtype=GGML_Q4_0, dims=(33, 2),
                                                    data=b"\0" * 64)
    out["tensor_offset_past_end.gguf"] = single(offset=4096, data_size=16)
    out["tensor_offset_misaligned.gguf"] = single(offset=4, data=b"\0" * 32)
    out["tensor_offset_wrapping.gguf"] = single(offset=2**64 - 32, dims=(16,), data=b"\0" * 64,
                                                data_size=64)
    out["tensor_overlap.gguf"] = build(one, [Tensor("a", [8], b"\0" * 32, offset=0),
                                             Tensor("b", [8], b"\0" * 32, offset=0)])
    out["tensor_overlap_partial.gguf"] = build(one, [Tensor("a", [16], b"\0" * 64, offset=0),
                                                     Tensor("b", [8], b"\0" * 32, offset=32)])

    # llama level: the reader accepts these; hparams or tensor checks fail.
    L = {}
    L["arch_gpt2"] = tiny_llama(kv_over=[("general.architecture", STR, "gpt2")])
    L["arch_missing"] = tiny_llama(kv_drop=("general.architecture",))
    L["arch_wrong_type"] = tiny_llama(kv_over=[("general.architecture", U32, 1)])
    L["moe_experts"] = tiny_llama(kv_over=[("llama.expert_count", U32, 8)])
    L["block_count_zero"] = tiny_llama(kv_over=[("llama.block_count", U32, 0)])
    L["block_count_huge"] = tiny_llama(kv_over=[("llama.block_count", U32, 100000)])
    L["block_count_negative"] = tiny_llama(kv_over=[("llama.block_count", I32, -2)])
    L["block_count_string"] = tiny_llama(kv_over=[("llama.block_count", STR, "2")])
    L["embd_missing"] = tiny_llama(kv_drop=("llama.embedding_length",))
    L["embd_huge"] = tiny_llama(kv_over=[("llama.embedding_length", U64, 2**40)])
    L["heads_zero"] = tiny_llama(kv_over=[("llama.attention.head_count", U32, 0)])
    L["heads_not_dividing_hidden"] = tiny_llama(kv_over=[("llama.attention.head_count", U32, 3)])
    L["kv_heads_not_dividing_heads"] = tiny_llama(
        kv_over=[("llama.attention.head_count", U32, 4), ("llama.embedding_length", U32, 8),
                 ("llama.attention.head_count_kv", U32, 3)])
    L["kv_heads_more_than_heads"] = tiny_llama(
        kv_over=[("llama.attention.head_count_kv", U32, 4)])
    L["head_dim_odd"] = tiny_llama(kv_over=[("llama.attention.head_count", U32, 4),
                                            ("llama.attention.head_count_kv", U32, 4)])
    L["rope_dims_too_big"] = tiny_llama(kv_over=[("llama.rope.dimension_count", U32, 8)])
    L["ff_zero"] = tiny_llama(kv_over=[("llama.feed_forward_length", U32, 0)])
    L["context_zero"] = tiny_llama(kv_over=[("llama.context_length", U32, 0)])
    L["rms_eps_zero"] = tiny_llama(kv_over=[("llama.attention.layer_norm_rms_epsilon", F32, 0.0)])
    L["rms_eps_nan"] = tiny_llama(
        kv_over=[("llama.attention.layer_norm_rms_epsilon", F32, float("nan"))])
    L["rope_base_negative"] = tiny_llama(kv_over=[("llama.rope.freq_base", F32, -1.0)])
    L["rope_base_inf"] = tiny_llama(kv_over=[("llama.rope.freq_base", F64, float("inf"))])
    L["rope_scaling_unknown"] = tiny_llama(kv_over=[("llama.rope.scaling.type", STR, "magic")])
    L["rope_scaling_factor_zero"] = tiny_llama(
        kv_over=[("llama.rope.scaling.type", STR, "linear"),
                 ("llama.rope.scaling.factor", F32, 0.0)])
    L["bos_outside_vocab"] = tiny_llama(kv_over=[("tokenizer.ggml.bos_token_id", U32, 8)])
    L["eos_outside_vocab"] = tiny_llama(kv_over=[("tokenizer.ggml.eos_token_id", U32, 2**31)])
    L["unk_negative"] = tiny_llama(kv_over=[("tokenizer.ggml.unknown_token_id", I32, -1)])
    L["pad_outside_vocab"] = tiny_llama(kv_over=[("tokenizer.ggml.padding_token_id", U64, 2**40)])
    L["eot_outside_vocab"] = tiny_llama(kv_over=[("tokenizer.ggml.eot_token_id", U32, 100)])
    L["tokens_not_strings"] = tiny_llama(kv_over=[("tokenizer.ggml.tokens", ARR, (I32, [1] * 8))])
    L["token_type_length_mismatch"] = tiny_llama(
        kv_over=[("tokenizer.ggml.token_type", ARR, (I32, [1] * 5))])
    L["vocab_size_smaller_than_tokens"] = tiny_llama(kv_over=[("llama.vocab_size", U32, 4)])
    L["no_vocab"] = tiny_llama(kv_drop=("tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                                        "tokenizer.ggml.token_type"))
    L["missing_token_embd"] = tiny_llama(t_drop=("token_embd.weight",))
    L["missing_output_norm"] = tiny_llama(t_drop=("output_norm.weight",))
    L["missing_ffn_down"] = tiny_llama(t_drop=("blk.1.ffn_down.weight",))
    L["missing_attn_k"] = tiny_llama(t_drop=("blk.0.attn_k.weight",))
    L["shape_attn_q"] = tiny_llama(shape_over={"blk.0.attn_q.weight": [4, 2]})
    L["shape_token_embd_vocab"] = tiny_llama(shape_over={"token_embd.weight": [4, 9]})
    L["shape_ffn_down_transposed"] = tiny_llama(shape_over={"blk.1.ffn_down.weight": [4, 8]})
    L["shape_norm_2d"] = tiny_llama(shape_over={"blk.0.attn_norm.weight": [4, 2]})
    L["shape_output_3d"] = tiny_llama(t_extra=[("output.weight", [4, 8, 2])])
    L["tensor_layer_out_of_range"] = tiny_llama(t_extra=[("blk.2.attn_q.weight", [4, 4])])
    L["tensor_unknown_name"] = tiny_llama(t_extra=[("blk.0.attn_q.bias", [4])])
    # the Gemma 3 variant (issue 15): its tensors in a llama file, a gemma3
    # file missing one of them, an unsupported feature, and a range error
    # whose message must name the file's own key prefix
    hd = HP["n_embd"] // HP["n_heads"]
    L["gemma3_tensor_in_llama"] = tiny_llama(t_extra=[("blk.0.attn_q_norm.weight", [hd])])
    L["gemma3_missing_q_norm"] = tiny_gemma3(t_drop=("blk.1.attn_q_norm.weight",))
    L["gemma3_missing_post_ffw_norm"] = tiny_gemma3(t_drop=("blk.0.post_ffw_norm.weight",))
    L["gemma3_attn_softcap"] = tiny_gemma3(kv_over=[("gemma3.attn_logit_softcapping", F32, 50.0)])
    L["gemma3_block_count_zero"] = tiny_gemma3(kv_over=[("gemma3.block_count", U32, 0)])
    L["gemma3_window_pattern_zero"] = tiny_gemma3(
        kv_over=[("gemma3.attention.sliding_window", U32, 4),
                 ("gemma3.attention.sliding_window_pattern", U32, 0)])
    # the other families (issue 31): a missing or misshapen tensor of each
    # variant's own kind names the tensor; expert keys out of range name the
    # key under the file's prefix; a tensor of another variant is refused;
    # an architecture we do not run lists the ones we do
    q, kvd = HP["n_heads"] * hd, HP["n_heads_kv"] * hd
    L["arch_qwen2moe"] = tiny_family("qwen2", kv_over=[("general.architecture", STR, "qwen2moe")])
    L["qwen2_missing_k_bias"] = tiny_family("qwen2", t_drop=("blk.1.attn_k.bias",))
    L["qwen2_shape_v_bias"] = tiny_family("qwen2", shape_over={"blk.0.attn_v.bias": [kvd + 1]})
    L["qwen3_missing_k_norm"] = tiny_family("qwen3", t_drop=("blk.0.attn_k_norm.weight",))
    L["qwen3_bias_in_qwen3"] = tiny_family("qwen3", t_extra=[("blk.0.attn_q.bias", [q])])
    L["qwen3moe_missing_expert_count"] = tiny_family("qwen3moe", kv_drop=("qwen3moe.expert_count",))
    L["qwen3moe_used_more_than_experts"] = tiny_family(
        "qwen3moe", kv_over=[("qwen3moe.expert_used_count", U32, 5)])
    L["qwen3moe_shared_experts"] = tiny_family("qwen3moe", kv_over=[("qwen3moe.expert_shared_count", U32, 1)])
    L["qwen3moe_shape_down_exps"] = tiny_family(
        "qwen3moe", shape_over={"blk.1.ffn_down_exps.weight": [MOE["n_ff_exp"], HP["n_embd"], MOE["n_expert"] - 1]})
    L["qwen3moe_dense_ffn_tensor"] = tiny_family(
        "qwen3moe", t_extra=[("blk.0.ffn_gate.weight", [HP["n_embd"], HP["n_ff"]])])
    L["mixtral_missing_gate_inp"] = tiny_family("mixtral", t_drop=("blk.1.ffn_gate_inp.weight",))
    L["mixtral_expert_count_huge"] = tiny_family("mixtral", kv_over=[("llama.expert_count", U32, 1 << 20)])
    L["phi3_shape_qkv"] = tiny_family("phi3", shape_over={"blk.0.attn_qkv.weight": [HP["n_embd"], q + kvd]})
    L["phi3_missing_fused_up"] = tiny_family("phi3", t_drop=("blk.1.ffn_up.weight",))
    L["phi3_separate_q"] = tiny_family("phi3", t_extra=[("blk.0.attn_q.weight", [HP["n_embd"], q])])
    for k, v in L.items():
        out["llama_" + k + ".gguf"] = v
    return out


MOE = {"n_expert": 4, "n_used": 2, "n_ff_exp": 4}


def tiny_family(family, kv_over=None, kv_drop=(), shape_over=None, t_drop=(), t_extra=()):
    """The tiny llama as another variant of the llama forward: keys under the
    architecture's prefix (mixtral: "llama." with experts) and each
    variant's own tensors (llama.cpp's names)."""
    arch = "llama" if family == "mixtral" else family
    kvs = [(k.replace("llama.", arch + ".", 1) if k.startswith("llama.") else k, t, v)
           for k, t, v in llama_kvs()]
    kvs = [(k, t, arch if k == "general.architecture" else v) for k, t, v in kvs]
    if family in ("qwen3moe", "mixtral"):
        kvs += [(arch + ".expert_count", U32, MOE["n_expert"]), (arch + ".expert_used_count", U32, MOE["n_used"])]
        if family == "qwen3moe":
            kvs.append((arch + ".expert_feed_forward_length", U32, MOE["n_ff_exp"]))
    over = dict((k, (t, v)) for k, t, v in (kv_over or []))
    kvs = [(k, *over.pop(k)) if k in over else (k, t, v) for k, t, v in kvs if k not in kv_drop]
    kvs += [(k, t, v) for k, (t, v) in over.items()]
    e, ff, hd = HP["n_embd"], HP["n_ff"], HP["n_embd"] // HP["n_heads"]
    q, kvd = HP["n_heads"] * hd, HP["n_heads_kv"] * hd
    fx = MOE["n_ff_exp"] if family == "qwen3moe" else ff
    base_drop, extra = set(), []
    for i in range(HP["n_layers"]):
        b = "blk.%d." % i
        if family == "qwen2":
            extra += [(b + "attn_q.bias", [q]), (b + "attn_k.bias", [kvd]), (b + "attn_v.bias", [kvd])]
        if family in ("qwen3", "qwen3moe"):
            extra += [(b + "attn_q_norm.weight", [hd]), (b + "attn_k_norm.weight", [hd])]
        if family in ("qwen3moe", "mixtral"):
            base_drop |= {b + "ffn_gate.weight", b + "ffn_up.weight", b + "ffn_down.weight"}
            extra += [(b + "ffn_gate_inp.weight", [e, MOE["n_expert"]]),
                      (b + "ffn_gate_exps.weight", [e, fx, MOE["n_expert"]]),
                      (b + "ffn_up_exps.weight", [e, fx, MOE["n_expert"]]),
                      (b + "ffn_down_exps.weight", [fx, e, MOE["n_expert"]])]
        if family == "phi3":
            base_drop |= {b + "attn_q.weight", b + "attn_k.weight", b + "attn_v.weight", b + "ffn_gate.weight",
                          b + "ffn_up.weight"}
            extra += [(b + "attn_qkv.weight", [e, q + 2 * kvd]), (b + "ffn_up.weight", [e, 2 * ff])]
    # the base llama tensors a variant does not have go first (phi3's fused
    # ffn_up has the name of a base one), then t_drop from what is left
    tensors, seen = [], set()
    for t in llama_tensors(shape_over, (), extra + list(t_extra)):
        if t.name in base_drop and t.name not in seen:
            seen.add(t.name)
            continue
        if t.name not in t_drop:
            tensors.append(t)
    return build(enc(kvs), tensors)


def tiny_gemma3(kv_over=None, t_drop=()):
    """The tiny llama as a gemma3 file: keys under "gemma3.", the q/k head
    norms and the post norms of every layer."""
    kvs = [(k.replace("llama.", "gemma3.", 1) if k.startswith("llama.") else k, t, v)
           for k, t, v in llama_kvs()]
    kvs = [(k, t, "gemma3" if k == "general.architecture" else v) for k, t, v in kvs]
    over = dict((k, (t, v)) for k, t, v in (kv_over or []))
    kvs = [(k, *over.pop(k)) if k in over else (k, t, v) for k, t, v in kvs]
    kvs += [(k, t, v) for k, (t, v) in over.items()]
    e, hd = HP["n_embd"], HP["n_embd"] // HP["n_heads"]
    extra = []
    for i in range(HP["n_layers"]):
        b = "blk.%d." % i
        extra += [(b + "attn_q_norm.weight", [hd]), (b + "attn_k_norm.weight", [hd]),
                  (b + "post_attention_norm.weight", [e]), (b + "post_ffw_norm.weight", [e])]
    return build(enc(kvs), llama_tensors(None, t_drop, extra))


def write_dir(path, files):
    os.makedirs(path, exist_ok=True)
    for name in os.listdir(path):
        if name.endswith(".gguf") and name not in files:
            os.remove(os.path.join(path, name))
    for name, data in sorted(files.items()):
        with open(os.path.join(path, name), "wb") as f:
            f.write(data)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    sd, md = seeds(), malformed()
    write_dir(os.path.join(root, "tests/data/seeds/gguf"), sd)
    write_dir(os.path.join(root, "tests/data/malformed/gguf"), md)
    print("gen_malformed_gguf: %d seeds, %d malformed (%d llama-level), %d bytes" % (
        len(sd), len(md), sum(1 for k in md if k.startswith("llama_")),
        sum(len(v) for v in list(sd.values()) + list(md.values()))))


if __name__ == "__main__":
    main()
