#!/usr/bin/env python3
# venv: tokenizers
"""tokenizer.json files in the shapes real model families ship, built and
trained with PyPI `tokenizers` (the oracle), and the ids it gives for a
fixed set of strings. tests/text/test_tokenizer_json.c loads each
tokenizer.json with our loader and must give the same ids, id for id.

Shapes (tests/data/golden/tokenizer/json/<name>/tokenizer.json):
  qwen2     byte-level BPE, NFC, Qwen2's split regex (Isolated) then ByteLevel
            without its regex, continuing_subword_prefix / end_of_word_suffix
            both "" (as Qwen2 / Qwen2.5 / Qwen3 write them), <|im_start|> etc.
            as special added tokens.
  wordpiece BERT: BertNormalizer (clean text, CJK spacing, lowercase, accents
            stripped by default), BertPreTokenizer, WordPiece with "##",
            [CLS] $A [SEP] post-processor.
  wordpiece_cased  BertNormalizer lowercase=false, strip_accents=false.
  wordpiece_nfd    Sequence[NFD, Lowercase, StripAccents] + BertPreTokenizer.
  unigram   Unigram (trained), NFKC, Metaspace (prepend always).
  t5        the T5 / ALBERT / mT5 shape as transformers converts a
            SentencePiece model: a unigram model trained by PyPI
            `sentencepiece` with its nmt_nfkc rules, its pieces and scores as
            a Unigram model, normalizer Sequence[Precompiled(the model's
            charsmap), Replace(" {2,}", " ")], Metaspace, "$A </s>".

Training text: llama.cpp's vocab test strings as they were when these
goldens were made (tests/data/golden/tokenizer/llamacpp-vocab-test.inp; its
six ggml-vocab-*.inp files then were this one file six times, and the corpus
keeps the six copies so the trained models stay the same), fixed. Cases: the same fixtures' strings plus EXTRA; written as
<name>.inp / <name>.out (one line of ids per case, encode without special
tokens) and <name>.special.out (with the post-processor's special tokens).

Oracle versions: tests/data/golden/tokenizer/json/VERSIONS.
Run: scripts/venv.sh tokenizers (scripts/requirements-tokenizers.txt), then
  .venv-tokenizers/bin/python scripts/gen_goldens_tokenizer_json.py
"""
import json
import os
import sys

import io

import sentencepiece
import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "tests", "data", "golden", "tokenizer", "llamacpp-vocab-test.inp")
OUT = os.path.join(ROOT, "tests", "data", "golden", "tokenizer", "json")
SEP = "\n__ggml_vocab_test__\n"

# Qwen2's pre-tokenizer regex, as its tokenizer.json carries it.
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
            r"\s*[\r\n]+|\s+(?!\S)|\s+")

EXTRA = [
    "int main(void) {\n    return 0;\n}\n",
    "def f(x):\n\treturn x ** 2  # square\n",
    "Ünïcödé — “quotes” … ½ ¼ ™ © ® ﬁ ①",
    "日本語のテキストと한국어 텍스트, 中文标点。",
    "12345678901234567890 1.5e-10 0x1F 3,141,592",
    "   leading and trailing spaces   ",
    "tabs\tand\r\nwindows\r\nnewlines\n\n\n",
    "emoji 👩‍👩‍👧‍👦 🇩🇪 🏳️‍🌈 done",
    "URL: https://huggingface.co/Qwen/Qwen2.5-0.5B?x=1&y=2",
    "Ελληνικά, русский, עברית, العربية, हिन्दी",
    "I'm he's we'll they'd you've it's CAN'T I'M",
    "Café naïve résumé Ångström e\u0301 A\u030a",
    "control\x01\x7f chars\u200b zero\u00a0width\ufeff",
    "unaffable unbelievably antidisestablishmentarianism",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "",
    " ",
    "\n",
    # for the nmt_nfkc charsmap: full width, compatibility forms, combining
    # sequences (graphemes under and over 6 bytes), Hangul jamo, odd spaces
    "ＡＢＣ１２３ ｶﾀｶﾅ ①② ﬁﬂ ½ ™ … 𝐀𝐁",
    "e\u0301 x\u0308\u0301 q\u0308\u0301\u0323\u0330 \u1100\u1161\u11a8 한국어",
    "a\u3000b\u2003c  d     e\u00a0f",
    "Ⅻ ㎏ ㍿ ﹏ ＂quoted＂ ＜tag＞",
]


def read_cases(path):
    text = open(path, encoding="utf-8").read()
    parts = text.split(SEP)
    return [p for p in parts[:-1]]


def corpus():
    return read_cases(FIXTURE) * 6


def qwen2(texts):
    tok = Tokenizer(models.BPE(continuing_subword_prefix="", end_of_word_suffix="", byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=3000, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[])
    tok.train_from_iterator(texts, trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")])
    return tok


def wordpiece(texts, normalizer):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##",
                                     max_input_chars_per_word=100))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(vocab_size=2500, min_frequency=1, show_progress=False,
                                        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                                        continuing_subword_prefix="##")
    tok.train_from_iterator(texts, trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tok


def unigram(texts):
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    trainer = trainers.UnigramTrainer(vocab_size=1500, show_progress=False, unk_token="<unk>",
                                      special_tokens=["<pad>", "</s>", "<unk>"], max_piece_length=16)
    tok.train_from_iterator(texts, trainer)
    return tok


def proto_fields(buf):
    """(field, value) pairs of one protobuf message (varint and
    length-delimited fields; what a SentencePiece ModelProto needs)."""
    i = 0

    def varint():
        nonlocal i
        v = sh = 0
        while True:
            c = buf[i]
            i += 1
            v |= (c & 0x7F) << sh
            sh += 7
            if c < 0x80:
                return v

    while i < len(buf):
        key = varint()
        f, wt = key >> 3, key & 7
        if wt == 0:
            yield f, varint()
        elif wt == 2:
            n = varint()
            yield f, buf[i:i + n]
            i += n
        elif wt == 5:
            yield f, buf[i:i + 4]
            i += 4
        elif wt == 1:
            yield f, buf[i:i + 8]
            i += 8
        else:
            raise ValueError(f"protobuf wire type {wt}")


def t5(texts):
    m = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=m, vocab_size=600,
                                             model_type="unigram", normalization_rule_name="nmt_nfkc",
                                             minloglevel=2, hard_vocab_limit=False, seed_sentencepiece_size=100000,
                                             num_threads=1)
    proto = m.getvalue()
    # ModelProto.normalizer_spec (3) -> NormalizerSpec.precompiled_charsmap (2)
    spec = next(v for f, v in proto_fields(proto) if f == 3)
    charsmap = next(v for f, v in proto_fields(spec) if f == 2)
    sp = sentencepiece.SentencePieceProcessor(model_proto=proto)
    vocab = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    tok = Tokenizer(models.Unigram(vocab, unk_id=sp.unk_id(), byte_fallback=False))
    tok.normalizer = normalizers.Sequence([normalizers.Precompiled(charsmap),
                                           normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    eos = sp.piece_to_id("</s>")
    tok.add_special_tokens([AddedToken("</s>", special=True), AddedToken("<unk>", special=True)])
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", eos)])
    return tok


def write(name, tok, cases, model_fields=None):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"), pretty=False)
    if model_fields:
        # Training rebuilds the model, dropping fields set on the one passed
        # in; write them back the way the model families' files carry them.
        j = json.load(open(os.path.join(d, "tokenizer.json"), encoding="utf-8"))
        j["model"].update(model_fields)
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False, separators=(",", ":"))
    # Reload what was written: the golden ids come from the file we ship.
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "cases.inp"), "w", encoding="utf-8", newline="") as f:
        for c in cases:
            f.write(c + SEP)
    for suffix, special in (("cases.out", False), ("cases.special.out", True)):
        with open(os.path.join(d, suffix), "w", encoding="utf-8", newline="") as f:
            for c in cases:
                f.write(" ".join(str(i) for i in tok.encode(c, add_special_tokens=special).ids) + "\n")
    print(f"{name}: vocab {tok.get_vocab_size()}, {len(cases)} cases")


def main():
    texts = corpus() + EXTRA
    cases = read_cases(FIXTURE) + EXTRA
    write("qwen2", qwen2(texts), cases, {"continuing_subword_prefix": "", "end_of_word_suffix": ""})
    write("wordpiece", wordpiece(texts, normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                                   strip_accents=None, lowercase=True)), cases)
    write("wordpiece_cased", wordpiece(texts, normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                                         strip_accents=False, lowercase=False)), cases)
    write("wordpiece_nfd", wordpiece(texts, normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase(),
                                                                 normalizers.StripAccents()])), cases)
    write("unigram", unigram(texts), cases)
    write("t5", t5(texts), cases)
    with open(os.path.join(OUT, "VERSIONS"), "w") as f:
        f.write(f"tokenizers=={tokenizers.__version__}\nsentencepiece=={sentencepiece.__version__}\n")


if __name__ == "__main__":
    main()
