#!/usr/bin/env python3
# venv: v41 (Python 3.12: DeepInfer and tile-kernels need it)
"""Golden data for src/model/engram (DeepSeek-V4.1 Engram), from DeepSeek's own code.

Oracles, imported, not transcribed:
  - DeepInfer 0.1.0 `deepinfer/model_executor/models/v4_modules/engram_metadata.py`:
    CompressedVocabulary (lookup table), EngramLayout.from_cfg (primes),
    NgramHashMapping (multipliers, vocab sizes, offsets).
  - tile-kernels 2.1.0 `tile_kernels/torch/engram.py`: engram_hash_ref,
    engram_gate_ref, make_offsets.
  - numpy `np.random.default_rng(seed).integers(low, high, n, dtype=np.int64)`
    for the RNG port (the call NgramHashMapping makes).
  - `tokenizers` trains the small byte-level BPE tokenizer.json the tests load.
The one piece written here is the n-gram row builder (`fill_engram_row` is C++
in DeepInfer's csrc/, not importable): `ngram_row` below follows it line by line.

DeepInfer comes from $DEEPINFER_REF_DIR/deepinfer-0.1.0.tar.gz (pinned in
scripts/oracle_v41/SHA256SUMS; scripts/oracle_v41/refs.py says where from), unpacked into
~/.cache/deepinfer-goldens/ on first use (or set DI_DEEPINFER_SRC to an
unpacked tree). Its import chain here needs no CUDA package; should a later
one, CUDA-only modules are stubbed with MagicMock (STUB_PREFIXES).

Outputs, under tests/data/golden/engram/:
  tokenizer.json   ~460-token byte-level BPE: 0 bos, 1 eos, 2 <｜▁pad▁｜>
  engram.json      lookup, multipliers, primes/offsets, hash, gate, FP8 rows,
                   RNG vectors, and (if testdata/ has it: `make testdata`) a digest
                   of the DeepSeek-V3 tokenizer's compressed vocabulary.

Run: "$(scripts/venv.sh v41)" scripts/gen_goldens_engram.py (scripts/make-goldens.sh does),
or with any Python >= 3.12 venv holding scripts/requirements-v41.txt's packages.
"""
import importlib.abc
import importlib.machinery
import json
import os
import sys
import tarfile
from unittest.mock import MagicMock

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "golden", "engram")
TARBALL = os.path.join(os.environ.get("DEEPINFER_REF_DIR", ""), "deepinfer-0.1.0.tar.gz")
V3_TOKENIZER = os.path.join(ROOT, "testdata", "tokenizer", "deepseek-v3", "tokenizer.json")
STUB_PREFIXES = ("flash_attn", "deep_gemm", "flash_mla", "deep_ep", "deep_select", "deepinfer._C",
                 "xgrammar", "kernelkit", "torch_npu")


def deepinfer_root():
    if os.environ.get("DI_DEEPINFER_SRC"):
        return os.environ["DI_DEEPINFER_SRC"]
    cache = os.path.join(os.path.expanduser("~"), ".cache", "deepinfer-goldens")
    root = os.path.join(cache, "deepinfer-0.1.0")
    if not os.path.isdir(os.path.join(root, "deepinfer")):
        os.makedirs(cache, exist_ok=True)
        with tarfile.open(TARBALL) as tf:
            tf.extractall(cache, filter="data")
    return root


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.startswith(STUB_PREFIXES):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = MagicMock(name=spec.name)
        m.__path__, m.__spec__ = [], spec
        return m

    def exec_module(self, module):
        pass


def import_oracles():
    sys.path.insert(0, deepinfer_root())
    try:
        from deepinfer.model_executor.models.v4_modules import engram_metadata
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith(STUB_PREFIXES):
            raise
        sys.meta_path.insert(0, _StubFinder())
        from deepinfer.model_executor.models.v4_modules import engram_metadata
    from tile_kernels.torch import engram as tk_engram
    return engram_metadata, tk_engram


EM, TK = import_oracles()
from deepinfer import AttrDict  # noqa: E402  (on sys.path only after import_oracles)

# ---- tokenizer -------------------------------------------------------------

SPECIALS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"]
CORPUS = [
    "Hello hello HELLO HeLLo world World WORLD",
    "The the THE quick Quick brown fox jumps over the lazy dog",
    "café cafe CAFÉ Café naïve naive résumé resume Zürich zurich",
    "élan Élan über Über ñandú crème brûlée façade",
    "ＦＵＬＬ ｗｉｄｔｈ ﬁne ﬂow ½ ² ™ Ⅳ",
    "   three spaces\t\ttabs\n\nnewlines\r\n crlf  two",
    "    indented code\n        more\n",
    "日本語 テキスト 中文 한국어 😀 👍🏽 Ελληνικά ΣΟΦΙΑ русский",
    "numbers 123 4567 89 0",
    "İstanbul ǅemal ß Straße ΐ",
    "replacement \ufffd char \ufffd\ufffd x\ufffd",
    "form\x0c \x0cfeed \x0b\x0b vt \u2028 sep\u00a0nbsp \u3000 ideographic \u0085 nel \ue000pua",
]
# Whitespace other than [ \t\r\n] ending a text, so runs like "\x0c " become pieces.
TAILS = ["ff\x0c ", "ls \u2028", "nel\u0085 ", "og\u1680 ", "vt \x0b"]
# Added after training: decode gives their content as is (special or not); the
# next three put White_Space beyond [ \t\r\n] next to letters, for Strip;
# a literal U+E000 ends as " " (the sentinel step), sharing the id of " ".
ADDED = ["<think>", " Mixed CASE ", "\t", "the\u2028", "\x85hello", "\u1680World\x0c", "\ue000"]


def build_tokenizer(path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=460, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4 + TAILS * 12, trainer)
    tok.add_tokens(ADDED)
    tok.save(path)
    t = Tokenizer.from_file(path)
    assert [t.token_to_id(s) for s in SPECIALS] == [0, 1, 2]
    return t


def vocab_cases(tok_path):
    v = EM.CompressedVocabulary(tok_path)
    t = v.tokenizer
    n_fffd = sum("\ufffd" in t.decode([i], skip_special_tokens=False) for i in range(t.get_vocab_size()))
    return {"n_vocab": t.get_vocab_size(), "n_compressed": len(v),
            "lookup": [int(x) for x in v.lookup_table], "n_raw_keyed": n_fffd}


def fnv1a64_i32(values):
    h = 0xCBF29CE484222325
    for b in np.asarray(values, dtype="<i4").tobytes():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def v3_digest():
    if not os.path.exists(V3_TOKENIZER):
        return None
    v = EM.CompressedVocabulary(V3_TOKENIZER)
    lut = v.lookup_table
    return {"n_vocab": int(lut.size), "n_compressed": len(v), "fnv1a64_hex": "%016x" % fnv1a64_i32(lut),
            "sample_stride": 97, "sample": [int(x) for x in lut[::97]]}


# ---- layout ------------------------------------------------------------------

def engram_cfg(layer_ids, max_ngram, n_heads, vocab_size, head_dim, tokenizer_vocab_size=None, tok_path=None):
    """The AttrDict hugging_face/config.py:_build_engram makes from the HF text_config."""
    n = max_ngram - 1
    return AttrDict(
        vocab_size=[vocab_size] * n, n_head_per_ngram=[n_heads] * n, n_embed_per_ngram=[head_dim * n_heads] * n,
        engram_max_ngram_size=max_ngram, engram_layer_ids=list(layer_ids),
        enable_tokenizer_compression=tok_path is not None, tokenizer_name_or_path=tok_path,
        tokenizer_vocab_size=tokenizer_vocab_size)


def layout_case(name, cfg, seed, compressed_vocab):
    m = EM.NgramHashMapping(cfg, seed, device="cpu")
    vs = m.ngram_vocab_sizes  # (layers, max_ngram-1, heads) int32
    off = TK.make_offsets(vs)
    return {"name": name, "seed": seed, "layer_ids": list(cfg.engram_layer_ids),
            "max_ngram": cfg.engram_max_ngram_size, "n_heads": cfg.n_head_per_ngram[0],
            "engram_vocab_size": cfg.vocab_size[0], "compressed_vocab": compressed_vocab,
            "multipliers": m.ngram_multipliers.tolist(),
            "primes": [vs[i].reshape(-1).tolist() for i in range(vs.shape[0])],
            "offsets": off.tolist(), "row_sums": [int(vs[i].long().sum()) for i in range(vs.shape[0])]}, m, off


# ---- hash ----------------------------------------------------------------------

IMAGE_SENTINEL = -1


def ngram_row(pos, comp, max_ngram, pad):
    """csrc/engine/input_metadata/prepare_tensor_input_base.cpp:fill_engram_row without the
    MTP-draft tail: lookback r takes comp[pos - r]; before the start -> pad; from an image
    sentinel on, pad."""
    row, hit_image = [], False
    for r in range(max_ngram):
        s = pos - r
        v = pad if (hit_image or s < 0) else comp[s]
        if v == IMAGE_SENTINEL:
            hit_image, v = True, pad
        row.append(v)
    return row


def hash_case(name, layout, mapping, offsets, comp, pad):
    rows = [ngram_row(p, comp, layout["max_ngram"], pad) for p in range(len(comp))]
    idx = TK.engram_hash_ref(torch.tensor(rows, dtype=torch.int32), mapping.ngram_multipliers,
                             mapping.ngram_vocab_sizes, offsets)
    return {"name": name, "layout": layout["name"], "pad": pad, "comp": comp, "ngram_ids": rows,
            "index": idx.tolist()}  # (layers, tokens, (max_ngram-1)*heads)


# ---- gate ------------------------------------------------------------------------

def bf16(t):
    return t.to(torch.bfloat16)


def gate_case(name, g, hc, d, eps, kind="random"):
    x = bf16(torch.randn(1, hc, d, generator=g))
    kv = bf16(torch.randn(1, hc + 1, d, generator=g) * 0.5)
    wh = bf16(1 + 0.2 * torch.randn(hc, d, generator=g))
    we = bf16(1 + 0.2 * torch.randn(hc, d, generator=g))
    if kind == "zero_key":  # dot = 0 -> sign 0 -> gate 0.5
        kv[0, 1] = 0
    if kind == "tiny_dot":  # stream 2: x and k overlap in one element only -> |dot| under the clamp
        x[0, 2, d // 2:] = 0
        kv[0, 2, : d // 2] = 0
        kv[0, 2, 0] = -1e-9
    out, raw_dot, gate, rstd_x, rstd_k = TK.engram_gate_ref(x, kv, wh, we, 1e-6, eps, save_for_backward=True)
    # The value before the ref's final .bfloat16(), from its own gate score.
    out_f32 = x.float() + gate.unsqueeze(-1) * kv[:, hc].float().unsqueeze(-2)
    f = lambda t: [float(v) for v in t.float().reshape(-1)]  # noqa: E731
    return {"name": name, "hc": hc, "d": d, "eps": eps, "x": f(x), "kv": f(kv), "wh": f(wh), "we": f(we),
            "gate": f(gate), "out_bf16": f(out), "out_f32": f(out_f32)}


# ---- FP8 rows ----------------------------------------------------------------------

def rows_case(g, n_rows, head_dim, idx):
    raw = torch.randint(0, 256, (n_rows, head_dim), generator=g, dtype=torch.int32).to(torch.uint8)
    raw[raw == 0x7F] = 0x7E  # keep NaN codes out of the expected floats
    raw[raw == 0xFF] = 0xFE
    sc = torch.randint(110, 140, (n_rows, head_dim // 32), generator=g, dtype=torch.int32).to(torch.uint8)
    vals = raw.view(torch.float8_e4m3fn).float()
    scale = torch.exp2(sc.float() - 127).repeat_interleave(32, dim=1)
    want = (vals * scale)[torch.tensor(idx)]
    return {"n_rows": n_rows, "head_dim": head_dim, "table_hex": bytes(raw.reshape(-1).tolist()).hex(),
            "scales_hex": bytes(sc.reshape(-1).tolist()).hex(), "index": idx,
            "want": [float(v) for v in want.reshape(-1)]}


# ---- numpy RNG ----------------------------------------------------------------------

def rng_cases():
    seeds = [0, 1, 2, 10007, 14 * 10007, 123456789, 2**32 - 1, 2**32, 2**32 + 1, 2**40 + 12345,
             2**63, 2**64 - 1] + [int(s) for s in np.random.default_rng(99).integers(0, 2**63, 12)]
    # 2**31 + 1, 3 * 2**30 and 3 * 2**61 reject 25-50% of raw draws (Lemire threshold).
    highs = [1, 2, 3, 7, 1000, 2**31, 2**31 + 1, 3 * 2**30, 2**32 - 1, 2**32, 2**32 + 1, 2**33 + 5,
             10**15, (2**63 - 1) // 99092 // 2, 3 * 2**61, 2**62 + 3, 2**63 - 1]
    cases = []
    for s in seeds:
        for h in highs:
            cases.append({"seed": str(s), "low": "0", "high": str(h),
                          "values": [str(v) for v in np.random.default_rng(s).integers(0, h, 6, dtype=np.int64)]})
    for s, lo, hi in [(5, -10, 10), (6, -(2**63), 2**63 - 1), (7, 100, 101), (8, -5, 2**40), (9, -(2**63), 2**62)]:
        cases.append({"seed": str(s), "low": str(lo), "high": str(hi),
                      "values": [str(v) for v in np.random.default_rng(s).integers(lo, hi, 6, dtype=np.int64)]})
    # One long mixed stream: 32-bit-range draws share a buffered half word.
    r = np.random.default_rng(2024)
    stream = []
    for i in range(300):
        h = [5, 2**32 - 1, 10**12, 2**32, 77777][i % 5]
        stream.append({"high": str(h), "values": [str(v) for v in r.integers(0, h, 1 + i % 3, dtype=np.int64)]})
    return {"cases": cases, "stream_seed": "2024", "stream": stream}


def main():
    os.makedirs(OUT, exist_ok=True)
    tok_path = os.path.join(OUT, "tokenizer.json")
    build_tokenizer(tok_path)
    vocab = vocab_cases(tok_path)

    real_cfg = engram_cfg([1, 14], 4, 8, 16000000, 256, tokenizer_vocab_size=99092)
    real, real_map, real_off = layout_case("real_v41_flash", real_cfg, 0, 99092)
    assert real["row_sums"] == [384006168, 384016682], real["row_sums"]
    assert real["multipliers"][0] == [76632096046245, 4839876093313, 35959672319349, 73987337458391]
    tiny_cfg = engram_cfg([1, 3], 3, 2, 1000, 32, tok_path=tok_path)
    tiny, tiny_map, tiny_off = layout_case("tiny_tokenizer", tiny_cfg, 0, vocab["n_compressed"])
    odd_cfg = engram_cfg([0, 5, 40], 5, 3, 53, 32, tokenizer_vocab_size=7)  # 53 is prime
    odd, odd_map, odd_off = layout_case("odd_seed_small_vocab", odd_cfg, 123, 7)
    big_cfg = engram_cfg([2], 2, 4, 2**20, 32, tokenizer_vocab_size=2**40)
    big, big_map, big_off = layout_case("huge_vocab_32bit_bound", big_cfg, 7, 2**40)
    one_cfg = engram_cfg([3], 3, 1, 7, 32, tokenizer_vocab_size=2**62 + 1)  # bound max(1, 0)
    one, _, _ = layout_case("bound_one", one_cfg, 0, 2**62 + 1)

    g = torch.Generator().manual_seed(1234)
    lut, pad = vocab["lookup"], vocab["lookup"][2]
    tiny_comp = [int(x) for x in torch.randint(0, vocab["n_compressed"], (12,), generator=g)]
    real_comp = [int(x) for x in torch.randint(0, 99092, (10,), generator=g)]
    real_comp[3] = 99091
    odd_comp = [int(x) for x in torch.randint(0, 7, (9,), generator=g)]
    hashes = [hash_case("tiny", tiny, tiny_map, tiny_off, tiny_comp, pad),
              hash_case("real", real, real_map, real_off, real_comp, 2),
              hash_case("odd", odd, odd_map, odd_off, odd_comp, 2)]
    # Image sentinel inside a sequence (ngram ids only; those rows' hashes are masked to -1 by TK).
    img = hash_case("tiny_image", tiny, tiny_map, tiny_off, tiny_comp[:4] + [IMAGE_SENTINEL] + tiny_comp[4:8], pad)
    img.pop("index")

    gates = [gate_case("hc4_d64", g, 4, 64, 1e-20), gate_case("hc4_d256", g, 4, 256, 1e-20),
             gate_case("hc2_d96_eps", g, 2, 96, 1e-6), gate_case("zero_key", g, 4, 64, 1e-20, "zero_key"),
             gate_case("tiny_dot", g, 4, 64, 1e-20, "tiny_dot")]
    rows = rows_case(g, 40, 64, [0, 39, 7, 7, 12, 31])

    doc = {"generator": "scripts/gen_goldens_engram.py",
           "versions": {"numpy": np.__version__, "torch": torch.__version__,
                        "tokenizers": __import__("tokenizers").__version__,
                        "sympy": __import__("sympy").__version__, "deepinfer": "0.1.0 sdist",
                        "tile_kernels": getattr(__import__("tile_kernels"), "__version__", "2.1.0")},
           "vocab": vocab, "deepseek_v3_vocab": v3_digest(), "layouts": [real, tiny, odd, big, one],
           "hash": hashes, "ngram_image": img, "gate": gates, "rows": rows, "rng": rng_cases()}
    with open(os.path.join(OUT, "engram.json"), "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print("tokens %d -> compressed %d (%d raw-keyed); wrote %s" %
          (vocab["n_vocab"], vocab["n_compressed"], vocab["n_raw_keyed"], OUT))


if __name__ == "__main__":
    main()
