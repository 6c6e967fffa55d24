#!/usr/bin/env python3
"""Goldens for Llama 3.1 / 3.2 / 3.3 chats with tools (src/text/chat_llama31.c)
and a tiny Llama GGUF that ships that chat template, for the server's tool
tests.

Oracle: PyPI jinja2 rendering the real template text,
models/templates/meta-llama-Llama-3.1-8B-Instruct.jinja from llama.cpp as
vendored in the llama-cpp-python sdist pinned in
scripts/requirements-llamacpp.txt (read straight from the .tar.gz), in a
jinja2 environment set up the way transformers' apply_chat_template sets
it up (sandboxed, trim_blocks, lstrip_blocks, tojson = json.dumps with
ensure_ascii off and keys in order, raise_exception). The 3.2 and 3.3
templates are checked to render the same corpus identically (3.2 without
strftime_now, as plain jinja2 has none: its fallback date).

Writes
  tests/data/golden/chat/llama31_tools.json  conversations -> prompt text or
                                             the template's exception
  tests/data/golden/chat/tiny_llama31.gguf   a 2-layer llama (hidden 16) with
      a byte-level BPE vocabulary of the 256 bytes and Llama 3's special
      tokens (no merges: any text encodes, byte by byte) and the 3.1 template
      as tokenizer.chat_template; weights a fixed pattern (stdlib GGUF
      encoder of scripts/gen_malformed_gguf.py)
Checked by tests/text/test_chat_llama31.c and tests/server/test_llama_tools.py.

Usage: python3 scripts/gen_goldens_llama31_tools.py [llama_cpp_python-0.3.36.tar.gz]
(without the argument the sdist is fetched with `pip download`; needs
jinja2 3.1.6, as in scripts/requirements-tools.txt)
"""
import json
import os
import subprocess
import sys
import tarfile
import tempfile

import jinja2
import jinja2.sandbox

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gen_malformed_gguf as gg  # noqa: E402

SDIST = "llama-cpp-python==0.3.36"
OUT = os.path.join(ROOT, "tests", "data", "golden", "chat")
TEMPLATES = {v: "vendor/llama.cpp/models/templates/meta-llama-Llama-%s-Instruct.jinja" % v
             for v in ("3.1-8B", "3.2-3B", "3.3-70B")}
BOS = "<|begin_of_text|>"


def sdist_path(arg):
    if arg:
        return arg
    d = tempfile.mkdtemp()
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                    "-d", d, SDIST], check=True)
    return os.path.join(d, os.listdir(d)[0])


def templates(path):
    out = {}
    with tarfile.open(path) as tf:
        for v, rel in TEMPLATES.items():
            (m,) = [m for m in tf.getmembers() if m.name.endswith(rel)]
            out[v] = tf.extractfile(m).read().decode("utf-8")
    return out


def env():
    e = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    e.filters["tojson"] = tojson
    e.globals["raise_exception"] = raise_exception
    return e


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city, \"now\" <or> later & ünïcode.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "e.g. Zürich"},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "ratio": {"type": "number", "default": 0.5, "big": 1e20, "tiny": 2.5e-8, "one": 1.0},
        "tags": {"type": "array", "items": {"type": "string"}}, "empty": {}, "none": []},
        "required": ["city"]}}}
NOW = {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}
SYS = {"role": "system", "content": "  You are helpful.\n"}
U = {"role": "user", "content": "What is the weather in Paris?"}
CALL = {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
    "name": "get_weather", "arguments": {"city": "Paris", "days": 2, "ratio": 0.1, "tags": ["a", "b"]}}}]}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21, \"sky\": \"clear ☀\"}"}

# (name, messages, tools or None, add_generation_prompt)
CASES = [
    ("plain", [U], None, True),
    ("plain_system", [SYS, U], None, True),
    ("plain_multi", [SYS, U, {"role": "assistant", "content": " Sunny. "}, {"role": "user", "content": "\u3000Thanks\xa0"}],
     None, False),
    ("tools", [U], [WEATHER, NOW], True),
    ("tools_system", [SYS, U], [WEATHER], True),
    ("tools_call_and_result", [SYS, U, CALL, RESULT], [WEATHER, NOW], True),
    ("tools_result_object", [U, CALL, {"role": "tool", "content": {"temp": 21}}], [WEATHER], True),
    ("tools_ipython_role", [U, CALL, {"role": "ipython", "content": "21"}, {"role": "assistant", "content": "21."},
                            {"role": "user", "content": "And Oslo?"}], [WEATHER], True),
    ("tools_first_is_assistant", [SYS, {"role": "assistant", "content": "Hi"}, U], [NOW], True),
    ("tools_call_empty_args", [U, {"role": "assistant", "tool_calls": [
        {"type": "function", "function": {"name": "now", "arguments": {}}}]}], [NOW], False),
    ("tools_empty_list", [U], [], True),
    ("error_no_message_for_tools", [SYS], [WEATHER], True),
    ("error_two_calls", [U, {"role": "assistant", "tool_calls": [CALL["tool_calls"][0], CALL["tool_calls"][0]]}],
     [WEATHER], True),
]


def render(tmpl, msgs, tools, gen):
    kw = dict(messages=msgs, add_generation_prompt=gen, bos_token=BOS)
    if tools is not None:
        kw["tools"] = tools
    try:
        return {"prompt": env().from_string(tmpl).render(**kw)}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}


# ---- the tiny GGUF -------------------------------------------------------------

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
            "<|eot_id|>", "<|python_tag|>", "<|finetune_right_pad_id|>"]


def byte_tokens():
    """GPT-2's byte-level alphabet in byte order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs, n = {}, 0
    for b in range(256):
        if b in bs:
            cs[b] = chr(b)
        else:
            cs[b] = chr(256 + n)
            n += 1
    return [cs[b] for b in range(256)]


def tiny_gguf(template):
    tokens = byte_tokens() + SPECIALS
    n_vocab, e, ff, heads, kv_heads, layers = len(tokens), 16, 32, 2, 1, 2
    hd = e // heads
    kvs = [
        ("general.architecture", gg.STR, "llama"), ("general.name", gg.STR, "tiny-llama31"),
        ("llama.block_count", gg.U32, layers), ("llama.context_length", gg.U32, 4096),
        ("llama.embedding_length", gg.U32, e), ("llama.feed_forward_length", gg.U32, ff),
        ("llama.attention.head_count", gg.U32, heads), ("llama.attention.head_count_kv", gg.U32, kv_heads),
        ("llama.rope.freq_base", gg.F32, 500000.0), ("llama.attention.layer_norm_rms_epsilon", gg.F32, 1e-5),
        ("llama.rope.dimension_count", gg.U32, hd), ("llama.vocab_size", gg.U32, n_vocab),
        ("tokenizer.ggml.model", gg.STR, "gpt2"), ("tokenizer.ggml.pre", gg.STR, "llama-bpe"),
        ("tokenizer.ggml.tokens", gg.ARR, (gg.STR, tokens)),
        ("tokenizer.ggml.token_type", gg.ARR, (gg.I32, [1] * 256 + [3] * len(SPECIALS))),
        ("tokenizer.ggml.merges", gg.ARR, (gg.STR, [])),
        ("tokenizer.ggml.bos_token_id", gg.U32, 256 + SPECIALS.index("<|begin_of_text|>")),
        ("tokenizer.ggml.eos_token_id", gg.U32, 256 + SPECIALS.index("<|eot_id|>")),
        ("tokenizer.ggml.padding_token_id", gg.U32, 256 + SPECIALS.index("<|finetune_right_pad_id|>")),
        ("tokenizer.ggml.add_bos_token", gg.BOOL, 1),
        ("tokenizer.chat_template", gg.STR, template),
    ]
    spec = [("token_embd.weight", [e, n_vocab]), ("output_norm.weight", [e])]
    for i in range(layers):
        b = "blk.%d." % i
        spec += [(b + "attn_norm.weight", [e]), (b + "attn_q.weight", [e, heads * hd]),
                 (b + "attn_k.weight", [e, kv_heads * hd]), (b + "attn_v.weight", [e, kv_heads * hd]),
                 (b + "attn_output.weight", [heads * hd, e]), (b + "ffn_norm.weight", [e]),
                 (b + "ffn_gate.weight", [e, ff]), (b + "ffn_up.weight", [e, ff]), (b + "ffn_down.weight", [ff, e])]
    tensors = []
    for k, (name, dims) in enumerate(spec):
        n = 1
        for d in dims:
            n *= d
        tensors.append(gg.Tensor(name, dims, gg.f32_data(n, float(k + 1))))
    return gg.build(gg.enc(kvs), tensors)


def main():
    tm = templates(sdist_path(sys.argv[1] if len(sys.argv) > 1 else None))
    cases = []
    for name, msgs, tools, gen in CASES:
        got = render(tm["3.1-8B"], msgs, tools, gen)
        for v in ("3.2-3B", "3.3-70B"):
            assert render(tm[v], msgs, tools, gen) == got, (v, name)
        cases.append(dict(name=name, messages=msgs, tools=tools, add_generation_prompt=gen, **got))
    os.makedirs(OUT, exist_ok=True)
    doc = {"oracle": "jinja2 %s, meta-llama-Llama-3.1-8B-Instruct.jinja from %s (3.2 / 3.3 render the same)"
                     % (jinja2.__version__, SDIST),
           "script": "scripts/gen_goldens_llama31_tools.py", "bos": BOS, "cases": cases}
    with open(os.path.join(OUT, "llama31_tools.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(OUT, "tiny_llama31.gguf"), "wb") as f:
        f.write(tiny_gguf(tm["3.1-8B"]))
    print("wrote %d cases and tiny_llama31.gguf to %s" % (len(cases), OUT))


if __name__ == "__main__":
    main()
