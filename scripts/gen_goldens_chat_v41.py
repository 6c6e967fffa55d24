#!/usr/bin/env python3
# venv: v41
"""DeepSeek-V4.1 chat rendering goldens from DeepSeek's own renderer.

Oracle: PyPI `deepseek-recipe` (DeepSeek, MIT), DeepseekV41Encoding
.render_conversation with thinking_mode=False (non-thinking chat; thinking,
reasoning effort and tools are the protocol issue's). Writes
tests/data/golden/chat/deepseek_v41.json: a list of {messages, prompt}
that src/text/chat_template.c's DI_CHAT_DEEPSEEK41 must reproduce (without
the leading BOS text, which the C side writes as the tokenizer's BOS token).

Usage: .venv-v41/bin/python scripts/gen_goldens_chat_v41.py
"""
import json
import os

import deepseek_recipe as dr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "golden", "chat", "deepseek_v41.json")
BOS = "<｜begin▁of▁sentence｜>"

CASES = [
    [("user", "Hi")],
    [("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello!"), ("user", "Why is the sky blue?")],
    [("system", "One."), ("system", "Two."), ("user", "a"), ("assistant", "b"), ("user", "c"), ("assistant", "d"),
     ("user", "ünïcödé ✓ <tags> \n new line")],
    [("user", "q1"), ("assistant", "a1"), ("user", "q2")],
    [("user", "a"), ("system", "S"), ("assistant", "b"), ("user", "c")],
]

MSG = {"system": dr.SystemMessage, "user": dr.UserMessage, "assistant": dr.AssistantMessage}


def main():
    out = []
    for case in CASES:
        conv = dr.Conversation([MSG[r](c) for r, c in case], thinking_mode=False)
        prompt = dr.DeepseekV41Encoding().render_conversation(conv).prompt
        assert prompt.startswith(BOS), prompt
        out.append({"messages": [{"role": r, "content": c} for r, c in case], "prompt": prompt[len(BOS):]})
    doc = {"oracle": "deepseek-recipe %s DeepseekV41Encoding (thinking_mode=False)" % dr.__version__,
           "script": "scripts/gen_goldens_chat_v41.py", "bos": BOS, "cases": out}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote", OUT, len(out), "cases")


if __name__ == "__main__":
    main()
