"""Tools and reasoning through the official `openai` client, end to end, on
the tiny DeepSeek-V4.1 checkpoint that has the protocol's special tokens
(tests/data/golden/deepseek_v41/tiny_dsml, scripts/gen_tiny_dsml.py).

A tiny random model says nothing useful, so the server runs in its test mode
(`--test-scripted-output`): the generated tokens are forced to a scripted
DeepSeek output (reasoning, </think>, DSML tool-call markup) and everything
after the sampler is the real path: detokenizer, src/text/dsml_parse.c, the
Chat Completions shapes, SSE. The tool call round-trips: the client sends
the call and its result back and gets the scripted answer to it.

Also here: the hostile inputs of issue 20 over HTTP (each a clear 400, or
413 past the body limit) and the refusal of tools on a model whose template
has no tool format (the shared SmolLM2 server)."""
import json

import openai
import pytest

from conftest import API_KEY, SLOW, read_response

BODY_LIMIT = 2 << 20

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
NOW = {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}
CALL = ("<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n"
        "<｜DSML｜ parameter name=\"city\" string=\"true\">Paris</｜DSML｜ parameter>\n"
        "</｜DSML｜ invoke>\n</｜DSML｜ calls>")
SCRIPT = [
    {"when": "Weather in Paris?", "say": "Need the tool.</think>Checking.\n\n" + CALL},
    {"when": "\"temp\": 21", "say": "Got it.</think>It is 21 degrees in Paris."},
    # (V4.1 writes "\n\n" inside a call without parameters: the tool-call
    # grammar holds a scripted output to the recipe's syntax too)
    {"when": "What time is it?", "say": "<｜DSML｜ invoke name=\"now\">\n\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"},
    {"when": "Say hi.", "say": "Hi!"},
    "Plain.",
]


# The sanitizer build (DI_TEST_SLOW > 1) skips the generations with long
# tool prompts (the tiny V4.1 forward under ASan is slow); the parsing,
# shapes and event paths run there in tests/server/test_dsml_chat.c.
heavy = pytest.mark.skipif(SLOW > 1, reason="sanitizer build: kept light")


def chat(client, **kw):
    return client.chat.completions.create(model="tiny_dsml", max_tokens=200, temperature=0, **kw)


@heavy
def test_tool_call_round_trip(tiny):
    c = tiny.client()
    q = [{"role": "user", "content": "Weather in Paris?"}]
    r = chat(c, messages=q, tools=[WEATHER, NOW])
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert ch.message.content == "Checking."
    assert ch.message.model_extra["reasoning_content"] == "Need the tool."
    (call,) = ch.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_00_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert r.usage.completion_tokens > 0 and r.usage.prompt_tokens > 100
    # the client sends the call and its result back
    q += [ch.message.model_dump(exclude_none=True),
          {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temp": 21})}]
    r2 = chat(c, messages=q, tools=[WEATHER, NOW])
    assert r2.choices[0].finish_reason == "stop"
    assert r2.choices[0].message.content == "It is 21 degrees in Paris."
    assert r2.choices[0].message.tool_calls is None
    assert r2.usage.prompt_tokens > r.usage.prompt_tokens


@heavy
def test_tool_call_streamed(tiny):
    c = tiny.client()
    stream = chat(c, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER, NOW], stream=True,
                  stream_options={"include_usage": True})
    reasoning, content, calls, finish, usage = "", "", {}, None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            d = ch.delta
            reasoning += (d.model_extra or {}).get("reasoning_content") or ""
            content += d.content or ""
            for tc in d.tool_calls or []:
                e = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                e["id"] = tc.id or e["id"]
                e["name"] += tc.function.name or ""
                e["arguments"] += tc.function.arguments or ""
            finish = ch.finish_reason or finish
    assert reasoning == "Need the tool." and content == "Checking."
    assert list(calls) == [0] and calls[0]["name"] == "get_weather" and calls[0]["id"].startswith("call_")
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris"}
    assert finish == "tool_calls"
    assert usage and usage.completion_tokens > 0


@heavy
def test_named_tool_choice_opens_the_call(tiny):
    c = tiny.client()
    r = chat(c, messages=[{"role": "user", "content": "What time is it?"}], tools=[WEATHER, NOW],
             tool_choice={"type": "function", "function": {"name": "now"}},
             extra_body={"thinking": {"type": "disabled"}})
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert [t.function.name for t in ch.message.tool_calls] == ["now"]
    assert ch.message.tool_calls[0].function.arguments == "{}"
    assert "reasoning_content" not in (ch.message.model_extra or {})
    # the recipe refuses a required call in thinking mode; so do we
    with pytest.raises(openai.BadRequestError) as e:
        chat(c, messages=[{"role": "user", "content": "What time is it?"}], tools=[NOW], tool_choice="required")
    assert e.value.param == "tool_choice"


# Enums and bounded numbers: random weights cannot wander off in free text
# (max_tokens would cut such a call short).
FORECAST = {"type": "function", "function": {
    "name": "forecast", "description": "Forecast for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "alerts": {"type": "boolean"}},
        "required": ["city", "days"], "additionalProperties": False}}}


@heavy
@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "forecast"}}])
@pytest.mark.parametrize("stream", [False, True])
def test_required_tool_is_enforced_on_random_weights(tiny_free, choice, stream):
    """Random weights under tool_choice required / named: the grammar engine
    makes the output a DSML call to the right tool with arguments its schema
    accepts (without it, the tiny model writes noise and no call)."""
    jsonschema = pytest.importorskip("jsonschema")
    c = tiny_free.client()
    tools = [NOW, FORECAST] if choice == "required" else [WEATHER, FORECAST, NOW]
    kw = dict(model="tiny_dsml", max_tokens=400, messages=[{"role": "user", "content": "Forecast for Oslo?"}],
              tools=tools, tool_choice=choice, parallel_tool_calls=False,
              extra_body={"thinking": {"type": "disabled"}})
    for seed in range(3):
        if stream:
            calls, finish = {}, None
            for chunk in c.chat.completions.create(stream=True, seed=seed, temperature=1.0, **kw):
                for ch in chunk.choices:
                    assert not ch.delta.content
                    for tc in ch.delta.tool_calls or []:
                        e = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                        e["name"] += tc.function.name or ""
                        e["arguments"] += tc.function.arguments or ""
                    finish = ch.finish_reason or finish
            got = [(e["name"], e["arguments"]) for _, e in sorted(calls.items())]
        else:
            r = c.chat.completions.create(seed=seed, temperature=1.0, **kw)
            finish = r.choices[0].finish_reason
            assert not r.choices[0].message.content
            got = [(t.function.name, t.function.arguments) for t in r.choices[0].message.tool_calls or []]
        assert finish == "tool_calls", got
        assert len(got) == 1, got  # parallel_tool_calls false: one call
        name, args = got[0]
        if isinstance(choice, dict):
            assert name == "forecast"
        schema = {t["function"]["name"]: t["function"]["parameters"] for t in tools}[name]
        jsonschema.validate(json.loads(args), schema)


@heavy
def test_required_tools_in_parallel_on_random_weights(tiny_free):
    """parallel_tool_calls (the default) lets the model make several calls;
    each is still one of the tools with valid arguments."""
    jsonschema = pytest.importorskip("jsonschema")
    c = tiny_free.client()
    r = c.chat.completions.create(model="tiny_dsml", max_tokens=600, temperature=1.0, seed=7,
                                  messages=[{"role": "user", "content": "Forecasts?"}], tools=[FORECAST, NOW],
                                  tool_choice="required", extra_body={"thinking": {"type": "disabled"}})
    ch = r.choices[0]
    if ch.finish_reason == "length":  # calls went on to max_tokens: the finished ones must still be valid
        assert ch.message.tool_calls
    else:
        assert ch.finish_reason == "tool_calls"
    schemas = {"forecast": FORECAST["function"]["parameters"], "now": NOW["function"]["parameters"]}
    for t in ch.message.tool_calls[:-1] if ch.finish_reason == "length" else ch.message.tool_calls:
        jsonschema.validate(json.loads(t.function.arguments), schemas[t.function.name])


def test_reasoning_effort_none_is_plain_chat(tiny):
    c = tiny.client()
    r = chat(c, messages=[{"role": "user", "content": "Say hi."}], reasoning_effort="none")
    assert r.choices[0].message.content == "Hi!" and r.choices[0].finish_reason == "stop"
    assert "reasoning_content" not in (r.choices[0].message.model_extra or {})
    # thinking on (the default): "Hi!" has no </think>, so it is all reasoning
    r = chat(c, messages=[{"role": "user", "content": "Say hi."}], reasoning_effort="high")
    assert r.choices[0].message.model_extra["reasoning_content"] == "Hi!"
    assert r.choices[0].message.content == ""


def post(srv, body):
    st, _, raw = srv.request("POST", "/v1/chat/completions", json.dumps(body))
    return st, (json.loads(raw) if raw else None)


def post_big(srv, body):
    """Sends a body past the limit: the server may answer 413 from the head
    and close before reading it all, so sending stops at the first error."""
    data = json.dumps(body).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            f"Authorization: Bearer {API_KEY}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode()
    with srv.connect() as s:
        s.sendall(head)
        try:
            for i in range(0, len(data), 1 << 16):
                s.sendall(data[i:i + (1 << 16)])
        except (BrokenPipeError, ConnectionResetError):
            pass
        st, _, raw = read_response(s)
    return st, (json.loads(raw) if raw else None)


def error_of(srv, body, status=400):
    st, obj = post(srv, body)
    assert st == status, (st, obj)
    assert obj["error"]["message"]
    return obj["error"]


def test_hostile_tools_are_clear_400s(tiny):
    base = {"model": "tiny_dsml", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]}
    # schemas that are not JSON Schema
    for params in [5, "object", {"type": "object", "properties": {"a": 5}}, {"type": "object", "required": "a"},
                   {"type": "objekt"}, {"type": "object", "anyOf": {}}]:
        e = error_of(tiny, dict(base, tools=[{"type": "function", "function": {"name": "f", "parameters": params}}]))
        assert e["param"] == "tools[0]" and "schema" in e["message"].lower()
    # names with odd characters
    for name in ["", "a b", "a<b>", "naïve", "x" * 65, "a\"b", "a\nb", 7]:
        e = error_of(tiny, dict(base, tools=[{"type": "function", "function": {"name": name}}]))
        assert e["param"] == "tools[0]"
    # 10,000 tools
    many = [{"type": "function", "function": {"name": f"t{i}"}} for i in range(10000)]
    e = error_of(tiny, dict(base, tools=many))
    assert e["param"] == "tools" and "at most" in e["message"]
    # unknown content block types
    e = error_of(tiny, dict(base, messages=[{"role": "user", "content": [{"type": "audio", "audio": "x"}]}]))
    assert "audio" in e["message"]
    e = error_of(tiny, dict(base, messages=[{"role": "user", "content": [{"type": "text"}]}]))
    # a tool result of 10 MB: past the body limit
    big = [{"role": "user", "content": "Weather in Paris?"},
           {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": {
               "name": "get_weather", "arguments": "{}"}}]},
           {"role": "tool", "tool_call_id": "c", "content": "x" * (10 << 20)}]
    st, obj = post_big(tiny, dict(base, messages=big, tools=[WEATHER]))
    assert st == 413 and obj["error"]["message"]
    # a tool result that fits the body but not the context: 400 (tokenizing
    # it is slow under the sanitizers)
    if SLOW == 1:
        big[2]["content"] = "word " * (300 << 10 >> 3)
        e = error_of(tiny, dict(base, messages=big, tools=[WEATHER]))
        assert e["code"] == "context_length_exceeded"


def test_tools_refused_without_a_tool_format(server):
    """SmolLM2 (ChatML template): no tool-call format, so tools are a 400
    that says so, never silently dropped."""
    e = error_of(server, {"max_tokens": 2, "messages": [{"role": "user", "content": "x"}],
                          "tools": [WEATHER]})
    assert e["param"] == "tools" and "tool-call format" in e["message"]
