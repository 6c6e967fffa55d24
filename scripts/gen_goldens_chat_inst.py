#!/usr/bin/env python3
"""Goldens for the [INST] chat templates beyond those test_hf_llama checks
(Mistral-Nemo's v3-tekken, Mistral-Large-2411's v7, Llama-2-chat's), rendered
by transformers' own chat-template compiler (jinja2, the environment
apply_chat_template uses) from the templates the models ship:

  mistral-v3-tekken  mistralai/Mistral-Nemo-Instruct-2407 tokenizer_config.json
                     (as llama.cpp's models/templates/ holds it)
  mistral-v7         mistralai/Mistral-Large-Instruct-2411
  llama2             meta-llama/Llama-2-13b-chat-hf

Writes tests/data/golden/tokenizer/chat_inst.json: per case the template
text, BOS / EOS, the messages and either the rendered text or the template's
exception. tests/text/test_detok_chat.c recognizes each template from its
text and renders every case with di_tok_chat_apply.

  pip install transformers==4.55.4 jinja2   (no torch needed)
  python3 scripts/gen_goldens_chat_inst.py [NEMO_TEMPLATE.jinja]

The Nemo template is read from the llama.cpp sources bench/build_llamacpp.sh
unpacks (build-llamacpp/.../models/templates/) unless a path is given.
"""
import glob
import json
import os
import sys

import transformers
from transformers.utils.chat_template_utils import _compile_jinja_template

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "golden", "tokenizer", "chat_inst.json")

MISTRAL_V7 = ("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
              "{{ '[INST] ' + message['content'] + '[/INST]' }}{% elif message['role'] == 'system' %}"
              "{{ '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' }}"
              "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}"
              "{% else %}{{ raise_exception('Only user, system and assistant roles are supported!') }}"
              "{% endif %}{% endfor %}")
LLAMA2 = ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
          "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
          "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
          "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
          "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
          "{% if loop.index0 == 0 and system_message != false %}"
          "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
          "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
          "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
          "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")

CHATS = [
    ([{"role": "user", "content": "Hello"}], True),
    ([{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Hi"}], True),
    ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "  Hello! How can I help?\n"},
      {"role": "user", "content": "Tell me a joke. "}], True),
    ([{"role": "system", "content": " S "}, {"role": "user", "content": "a"},
      {"role": "assistant", "content": "b"}, {"role": "user", "content": " c "}], True),
    ([{"role": "system", "content": "S"}, {"role": "user", "content": "  "}], True),
    ([{"role": "system", "content": "S"}, {"role": "user", "content": "a"},
      {"role": "assistant", "content": "b"}], False),
    ([{"role": "user", "content": "a"}, {"role": "system", "content": "mid"}, {"role": "user", "content": "b"}], True),
    ([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], True),
    ([{"role": "assistant", "content": "a"}], True),
    ([{"role": "user", "content": "a"}, {"role": "tool", "content": "42"}], True),
    ([{"role": "user", "content": "\u00e9t\u00e9 \u2014 \U0001f600"}], True),
]


def nemo_template(argv):
    if len(argv) > 1:
        path = argv[1]
    else:
        found = glob.glob(os.path.join(ROOT, "build-llamacpp", "*", "vendor", "llama.cpp", "models", "templates",
                                       "mistralai-Mistral-Nemo-Instruct-2407.jinja"))
        if not found:
            sys.exit("Mistral-Nemo's template not found: run bench/build_llamacpp.sh or pass its path")
        path = found[0]
    with open(path, encoding="utf-8") as f:
        return f.read()


def main():
    templates = [("mistral-v3-tekken", "mistralai/Mistral-Nemo-Instruct-2407", nemo_template(sys.argv)),
                 ("mistral-v7", "mistralai/Mistral-Large-Instruct-2411", MISTRAL_V7),
                 ("llama2", "meta-llama/Llama-2-13b-chat-hf", LLAMA2)]
    cases = []
    for name, model, text in templates:
        compiled = _compile_jinja_template(text)
        for msgs, gen in CHATS:
            case = {"template": name, "messages": msgs, "add_generation_prompt": gen}
            try:
                case["text"] = compiled.render(messages=msgs, bos_token="<s>", eos_token="</s>",
                                               add_generation_prompt=gen)
            except Exception as e:  # the template's raise_exception
                case["error"] = str(e)[:120]
            cases.append(case)
    gold = {"manifest": {"oracle": f"transformers {transformers.__version__} chat-template compiler (jinja2)",
                         "bos_token": "<s>", "eos_token": "</s>",
                         "templates": {n: {"model": m, "text": t} for n, m, t in templates}},
            "cases": cases}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(gold, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(cases)} cases -> {OUT}")


if __name__ == "__main__":
    main()
