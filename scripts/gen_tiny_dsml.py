#!/usr/bin/env python3
"""Tiny DeepSeek-V4.1 checkpoints that speak the chat protocol, for the
server's tool / reasoning tests: tests/data/golden/deepseek_v41/tiny_dsml/
(from tiny/) and, for images on the protocol path, tiny_vl_dsml/ (from the
vision checkpoint tiny_vl/, whose image token <｜deepseek_image｜> (id 4,
config.json's image_token_id) is renamed to the protocol's <｜image｜>, the
placeholder the recipe writes).

The tiny checkpoints' own tokenizers have no <think>, </think>, ｜DSML｜,
<｜User｜> ... tokens, and the model's 512 logits leave no room to add them.
This folder links tiny/'s config and weights and carries a tokenizer.json in
16 pieces are dropped and their ids given to the protocol's special tokens
(the same set and order as tests/data/golden/dsml/tokenizer.json): first
the byte tokens that valid UTF-8 never holds (0xC0, 0xC1, 0xF5..0xFF), then
the latest BPE merges whose piece no other merge builds on and whose Engram
key (the normalized piece, see src/model/engram_vocab.c) no other token
shares. Each dropped piece had a key of its own, so the Engram compressed
vocabulary keeps its size (config.json's engram_compressed_vocab_size) and
the weights fit unchanged. No oracle is involved: plain JSON surgery,
deterministic.

Usage: python3 scripts/gen_tiny_dsml.py
"""
import json
import os
import re
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "tests", "data", "golden", "deepseek_v41")
DSML_TOK = os.path.join(ROOT, "tests", "data", "golden", "dsml", "tokenizer.json")


def byte_decoder():
    """GPT-2's byte-level alphabet, reversed: vocabulary character -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def engram_key(piece, dec):
    try:
        text = bytes(dec[c] for c in piece).decode("utf-8")
    except (KeyError, UnicodeDecodeError):
        return "raw:" + piece
    k = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", text))
    k = "".join(c for c in k if not unicodedata.category(c).startswith("M")).lower()
    k = re.sub(r"[ \t\r\n]+", " ", k)
    k = k if k == " " else k.strip()
    return k or text


def make(src_name, out_name):
    SRC, OUT = os.path.join(GOLDEN, src_name), os.path.join(GOLDEN, out_name)
    tok = json.load(open(os.path.join(SRC, "tokenizer.json"), encoding="utf-8"))
    specials = [a for a in json.load(open(DSML_TOK, encoding="utf-8"))["added_tokens"] if a["id"] >= 4]
    for a in tok["added_tokens"]:
        if a["content"] == "<｜deepseek_image｜>":  # the vision checkpoint's image token keeps its id
            del tok["model"]["vocab"][a["content"]]
            a["content"] = "<｜image｜>"
            tok["model"]["vocab"][a["content"]] = a["id"]
            specials = [b for b in specials if b["content"] != a["content"]]
    vocab, merges = tok["model"]["vocab"], tok["model"]["merges"]
    dec = byte_decoder()
    keys = {}
    for piece in vocab:
        k = engram_key(piece, dec) if piece not in {a["content"] for a in tok["added_tokens"]} else piece
        keys[k] = keys.get(k, 0) + 1
    used = {p for m in merges for p in m}
    enc = {b: c for c, b in dec.items()}
    never = [enc[b] for b in [0xC0, 0xC1] + list(range(0xF5, 0x100))]
    assert not any(c in used for c in never)
    drop_bytes = [c for c in never if c in vocab][:len(specials)]
    drop = []
    for m in reversed(merges):
        if len(drop) + len(drop_bytes) == len(specials):
            break
        piece = "".join(m)
        if piece not in used and keys[engram_key(piece, dec)] == 1:
            drop.append(m)
    assert len(drop) + len(drop_bytes) == len(specials), "not enough droppable pieces"
    ids = sorted([vocab["".join(m)] for m in drop] + [vocab[c] for c in drop_bytes])
    for m in drop:
        merges.remove(m)
        del vocab["".join(m)]
    for c in drop_bytes:
        del vocab[c]
    for i, a in zip(ids, specials):
        a = dict(a)
        a["id"] = i
        tok["added_tokens"].append(a)
        vocab[a["content"]] = i
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
        f.write("\n")
    for name in sorted(os.listdir(SRC)):
        if name == "config.json" or name.startswith("model"):
            link = os.path.join(OUT, name)
            if os.path.lexists(link):
                os.remove(link)
            os.symlink(os.path.join("..", src_name, name), link)
    print("wrote", OUT)


def main():
    make("tiny", "tiny_dsml")
    make("tiny_vl", "tiny_vl_dsml")


if __name__ == "__main__":
    main()
