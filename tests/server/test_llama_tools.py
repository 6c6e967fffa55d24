"""Llama 3.1 JSON tool calls through the official `openai` client, end to end,
on a tiny Llama GGUF that ships the real Llama 3.1 chat template
(tests/data/golden/chat/tiny_llama31.gguf, scripts/gen_goldens_llama31_tools.py).

The prompt side is checked byte for byte against jinja2 in
tests/text/test_chat_llama31.c; here the server runs in its test mode
(`--test-scripted-output`): the generated tokens are forced to a scripted
reply, a JSON call as the template asks for it, and the client gets
`tool_calls` (whole and streamed), sends the call and its result back (the
template's ipython turn) and gets the scripted answer. tool_choice required
is enforced by the grammar engine on the tiny model's random weights."""
import json
from pathlib import Path

import openai
import pytest

from conftest import Server

MODEL = Path(__file__).resolve().parents[2] / "tests/data/golden/chat/tiny_llama31.gguf"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
FORECAST = {"type": "function", "function": {"name": "forecast", "parameters": {
    "type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}, "days": {"type": "integer", "minimum": 1,
                                                                                  "maximum": 9}},
    "required": ["city", "days"], "additionalProperties": False}}}
# no free text: random weights cannot run on in a string
NOW = {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {},
                                                                      "additionalProperties": False}}}
SCRIPT = [
    {"when": "Weather in Paris?", "say": "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"},
    {"when": "\"temp\": 21", "say": "It is 21 degrees in Paris."},
    {"when": "Tagged?", "say": "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}"},
    {"when": "Say hi.", "say": "Hi!"},
    {"when": "Braces?", "say": "{not a call}"},
    "Plain.",
]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    script = tmp_path_factory.mktemp("script") / "outputs.json"
    script.write_text(json.dumps(SCRIPT), encoding="utf-8")
    srv = Server("-c", "2048", "--test-scripted-output", str(script), model=str(MODEL))
    yield srv
    assert srv.stop() == 0, "".join(srv.log[-40:])


@pytest.fixture(scope="module")
def llama_free():
    srv = Server("-c", "2048", model=str(MODEL))
    yield srv
    assert srv.stop() == 0, "".join(srv.log[-40:])


def chat(c, **kw):
    return c.chat.completions.create(model="tiny_llama31", max_tokens=200, temperature=0, **kw)


def test_tool_call_round_trip(llama):
    c = llama.client()
    q = [{"role": "user", "content": "Weather in Paris?"}]
    r = chat(c, messages=q, tools=[WEATHER])
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.content is None
    (call,) = ch.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    q += [ch.message.model_dump(exclude_none=True),
          {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temp": 21})}]
    r2 = chat(c, messages=q, tools=[WEATHER])
    assert r2.choices[0].finish_reason == "stop"
    assert r2.choices[0].message.content == "It is 21 degrees in Paris."
    assert r2.choices[0].message.tool_calls is None
    assert r2.usage.prompt_tokens > r.usage.prompt_tokens


def test_tool_call_streamed(llama):
    c = llama.client()
    calls, content, finish = {}, "", None
    for chunk in chat(c, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER], stream=True):
        for ch in chunk.choices:
            content += ch.delta.content or ""
            for tc in ch.delta.tool_calls or []:
                e = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                e["id"] = tc.id or e["id"]
                e["name"] += tc.function.name or ""
                e["arguments"] += tc.function.arguments or ""
            finish = ch.finish_reason or finish
    assert content == "" and finish == "tool_calls"
    assert list(calls) == [0] and calls[0]["name"] == "get_weather" and calls[0]["id"].startswith("call_")
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris"}


def test_python_tag_call_and_plain_answers(llama):
    c = llama.client()
    r = chat(c, messages=[{"role": "user", "content": "Tagged?"}], tools=[WEATHER])
    assert r.choices[0].message.tool_calls[0].function.name == "get_weather"
    for text, want in [("Say hi.", "Hi!"), ("Braces?", "{not a call}")]:
        r = chat(c, messages=[{"role": "user", "content": text}], tools=[WEATHER])
        assert r.choices[0].finish_reason == "stop" and r.choices[0].message.content == want
        assert r.choices[0].message.tool_calls is None
        # streamed: the held-back text comes out as content
        got = "".join(ch.delta.content or "" for chunk in chat(c, messages=[{"role": "user", "content": text}],
                                                                tools=[WEATHER], stream=True)
                      for ch in chunk.choices)
        assert got == want
    # tool_choice none: the tools are not shown and the reply is not parsed
    r = chat(c, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER], tool_choice="none")
    assert r.choices[0].message.tool_calls is None and r.choices[0].message.content.startswith("{\"name\"")


def test_bad_tool_requests_are_400(llama):
    c = llama.client()
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"P\"}"}}
    bodies = [
        dict(messages=[{"role": "user", "content": "q"}], tools=[{"type": "function", "function": {"name": "a b"}}]),
        dict(messages=[{"role": "user", "content": "q"}], tools=[WEATHER], tool_choice="maybe"),
        dict(messages=[{"role": "user", "content": "q"}], tools=[WEATHER],
             tool_choice={"type": "function", "function": {"name": "nope"}}),
        # the template takes one call per assistant turn
        dict(messages=[{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [call, call]}]),
        dict(messages=[{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [
            dict(call, function={"name": "get_weather", "arguments": "not json"})]}]),
    ]
    for b in bodies:
        with pytest.raises(openai.BadRequestError):
            chat(c, **b)


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "forecast"}}])
def test_required_tool_is_enforced_on_random_weights(llama_free, choice):
    jsonschema = pytest.importorskip("jsonschema")
    c = llama_free.client()
    for seed in range(3):
        r = c.chat.completions.create(model="tiny_llama31", max_tokens=300, temperature=1.0, seed=seed,
                                      messages=[{"role": "user", "content": "Forecast?"}], tools=[NOW, FORECAST],
                                      tool_choice=choice)
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls", ch
        (call,) = ch.message.tool_calls
        if isinstance(choice, dict):
            assert call.function.name == "forecast"
        schema = {"now": NOW, "forecast": FORECAST}[call.function.name]["function"]["parameters"]
        jsonschema.validate(json.loads(call.function.arguments), schema)
