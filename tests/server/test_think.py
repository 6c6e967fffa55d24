"""Qwen3's <think> reasoning as reasoning_content, through the official
`openai` client, on the tiny Qwen3 GGUF whose chat template writes the tags
(tests/data/families/qwen3-f16.gguf, scripts/gen_tiny_families.py). The
server runs in its test mode (`--test-scripted-output`): the generated
tokens are forced to scripted replies, so the split is checked on known
text; the parser itself at every split point in tests/server/test_think_out.c.
enable_thinking false (chat_template_kwargs, as vLLM and the template take
it) closes an empty thought in the prompt, as Qwen3's template does, and
the reply is content only."""
import json
from pathlib import Path

import pytest

from conftest import Server

MODEL = Path(__file__).resolve().parents[2] / "tests/data/families/qwen3-f16.gguf"
SCRIPT = [
    {"when": "Add 2 and 2.", "say": "<think>\nTwo plus two is four.\n</think>\n\nIt is 4."},
    {"when": "No thought.", "say": "Just an answer."},
    "<think>\nx\n</think>\n\nPlain.",
]


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    script = tmp_path_factory.mktemp("script") / "outputs.json"
    script.write_text(json.dumps(SCRIPT), encoding="utf-8")
    srv = Server("-c", "256", "--test-scripted-output", str(script), model=str(MODEL))
    yield srv
    assert srv.stop() == 0, "".join(srv.log[-40:])


def chat(c, text, **kw):
    return c.chat.completions.create(model="qwen3-f16", max_tokens=60, temperature=0,
                                     messages=[{"role": "user", "content": text}], **kw)


def test_reasoning_content_whole(qwen3):
    ch = chat(qwen3.client(), "Add 2 and 2.").choices[0]
    assert ch.message.content == "It is 4."
    assert ch.message.model_extra["reasoning_content"] == "Two plus two is four.\n"


def test_reasoning_content_streamed(qwen3):
    reasoning, content = "", ""
    for chunk in chat(qwen3.client(), "Add 2 and 2.", stream=True):
        for ch in chunk.choices:
            reasoning += (ch.delta.model_extra or {}).get("reasoning_content") or ""
            content += ch.delta.content or ""
    assert reasoning == "Two plus two is four.\n" and content == "It is 4."


def test_reply_without_a_thought_is_content(qwen3):
    ch = chat(qwen3.client(), "No thought.").choices[0]
    assert ch.message.content == "Just an answer."
    assert ch.message.model_extra["reasoning_content"] is None


def test_enable_thinking_false_closes_the_thought_in_the_prompt(qwen3):
    c = qwen3.client()
    on = chat(c, "Hello.")
    off = chat(c, "Hello.", extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert off.usage.prompt_tokens > on.usage.prompt_tokens
    assert off.choices[0].message.content == "<think>\nx\n</think>\n\nPlain."  # not parsed: thinking is off
    assert "reasoning_content" not in (off.choices[0].message.model_extra or {})
    assert on.choices[0].message.content == "Plain."


def test_bad_chat_template_kwargs_is_400(qwen3):
    status, _, body = qwen3.request("POST", "/v1/chat/completions", json.dumps(
        {"model": "qwen3-f16", "messages": [{"role": "user", "content": "hi"}],
         "chat_template_kwargs": {"enable_thinking": "no"}}), {"Content-Type": "application/json"})
    assert status == 400 and b"enable_thinking" in body
